"""The sign-on tests' counterparts: node-oidc-provider on a free port, and the app configured to use it."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import httpx
import pytest
import uvicorn
from joserfc.jwk import RSAKey

from approvals.store import Store
from approvals_web.app import create_app
from approvals_web.settings import Settings
from approvals_web.sso.config import OidcProvider

from ..processes import free_port, wait_until_answering

T = TypeVar("T")
HERE = Path(__file__).parent
USERS = {"alice": {"groups": ["eng-oncall", "staff"]}, "bob": {"groups": ["staff"]}, "eve": {"groups": ["visitors"]}}
CLIENT: dict[str, object] = {"grant_types": ["authorization_code"], "response_types": ["code"]}


class PortTaken(Exception):
    """The free port chosen for the provider was taken by another test's process before it listened."""


def clis_dir() -> Path:
    folder = os.environ.get("APPROVALS_CLIS_DIR")
    if not folder or not (Path(folder) / "node_modules" / "oidc-provider").is_dir():
        pytest.skip("oidc-provider is not installed: run `make clis` and set APPROVALS_CLIS_DIR")
    return Path(folder)


def new_key(kid: str) -> dict[str, object]:
    key = RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"}, private=True)
    return dict(key.as_dict(private=True))


@dataclass
class Provider:
    port: int
    folder: Path
    app_url: str
    process: subprocess.Popen[bytes] | None = None
    log: BinaryIO | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self, app_url: str) -> None:
        """Send people back to the app at `app_url` from now on: the test client `approvals` (and `other-app`,
        another application at the same provider, whose codes and tokens are not for approvals) redirect there
        only. The provider reads the clients at each request (see provider.mjs)."""
        self.app_url = app_url
        redirect = [f"{app_url}/sso/test/callback"]
        clients = {
            "approvals": {
                **CLIENT,
                "client_id": "approvals",
                "client_secret": "test-secret",
                "redirect_uris": redirect,
                "post_logout_redirect_uris": [f"{app_url}/login"],
            },
            "other-app": {
                **CLIENT,
                "client_id": "other-app",
                "client_secret": "other-secret",
                "redirect_uris": redirect,
            },
        }
        _write_whole(self.folder / "clients.json", clients)

    def reset(self, app_url: str) -> None:
        """As started, for a new test whose app is at `app_url`: the right ID tokens, every user's first groups.
        A provider that is no longer running (a test's restart failed) is started again."""
        self.hand_out(None)
        _write_whole(self.folder / "users.json", USERS)
        self.serve(app_url)
        if self.process is None or self.process.poll() is not None:
            self.launch("key-1")

    def set_groups(self, user: str, groups: list[str]) -> None:
        """Change `user`'s groups at the provider: the next sign-in carries them."""
        users = json.loads((self.folder / "users.json").read_text())
        users[user] = {"groups": groups}
        (self.folder / "users.json").write_text(json.dumps(users))

    def hand_out(self, mode: str | dict[str, object] | None) -> None:
        """Make the token endpoint hand out a wrong ID token from now on (see provider.mjs), or, with None,
        the right one again: `{"aud": ...}`, `{"iss": ...}`, `{"nonce": ...}`, `{"exp_offset": seconds}`
        (signed again with the provider's key), `"tamper"` (changed after signing), `"foreign_key"`."""
        file = self.folder / "id_token.json"
        if mode is None:
            file.unlink(missing_ok=True)
            return
        _write_whole(file, mode)

    def launch(self, kid: str) -> None:
        """Start the provider signing with `kid` on its port, or on another if another test's process took it."""
        for attempt in range(3):
            try:
                self.start(kid)
                return
            except PortTaken:
                self.stop()
                if attempt == 2:
                    raise
                self.port = free_port()

    def start(self, kid: str) -> None:
        """(Re)start the provider signing with a new key named `kid`: a restart rotates the key."""
        self.stop()
        if not (self.folder / "clients.json").exists():
            self.serve(self.app_url)
        (self.folder / "keys.json").write_text(json.dumps([new_key(f"{kid}-{secrets.token_hex(4)}")]))
        env = {
            **os.environ,
            "PORT": str(self.port),
            "KEYS": str(self.folder / "keys.json"),
            "USERS": str(self.folder / "users.json"),
            "CLIENTS": str(self.folder / "clients.json"),
            "ID_TOKEN": str(self.folder / "id_token.json"),
        }
        log = self.folder / "provider.log"
        self.log = log.open("ab")
        self.process = subprocess.Popen(
            ["node", str(self.folder / "provider.mjs")], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        wait_until_answering(self.process, self.issuer + "/.well-known/openid-configuration", log, seconds=30)
        self._check_it_is_ours(keys_file=self.folder / "keys.json")

    def _check_it_is_ours(self, keys_file: Path) -> None:
        """Another test's provider may have taken the port first (tests run in parallel processes): then ours
        exited, and the one answering publishes another key. `PortTaken` says to start again on another port."""
        ours = {key["kid"] for key in json.loads(keys_file.read_text())}
        discovery = httpx.get(self.issuer + "/.well-known/openid-configuration", timeout=5).json()
        published = {key.get("kid") for key in httpx.get(discovery["jwks_uri"], timeout=5).json()["keys"]}
        if self.process is None or self.process.poll() is not None or not ours <= published:
            raise PortTaken(f"port {self.port} answers for another provider")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None
        if self.log is not None:
            self.log.close()
            self.log = None


@dataclass
class App:
    url: str
    store: Store
    loop: asyncio.AbstractEventLoop

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the app's loop (its store lives there) and wait for it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=30)


@contextmanager
def oidc_provider(tmp_path: Path, app_url: str) -> Iterator[Provider]:
    """node-oidc-provider on a free port, signing with `key-1`, its test client sending people back to `app_url`."""
    folder = tmp_path / "oidc"
    folder.mkdir()
    shutil.copy(HERE / "provider.mjs", folder / "provider.mjs")
    (folder / "users.json").write_text(json.dumps(USERS))
    (folder / "node_modules").symlink_to(clis_dir() / "node_modules")
    provider = Provider(port=free_port(), folder=folder, app_url=app_url)
    try:
        provider.launch("key-1")
        yield provider
    finally:
        provider.stop()


def provider_settings(provider: Provider, **overrides: object) -> OidcProvider:
    """The app's settings for `provider` as `test`: staff are reviewers, eng-oncall is the `oncall` group."""
    fields = {
        "name": "test",
        "display_name": "Test IdP",
        "issuer": provider.issuer,
        "client_id": "approvals",
        "client_secret": "test-secret",
        "role_map": {"staff": "reviewer"},
        "group_map": {"eng-oncall": ["oncall"]},
        **overrides,
    }
    return OidcProvider.model_validate(fields)


@contextmanager
def provider_and_app(database_url: str, provider: Provider, **overrides: object) -> Iterator[tuple[Provider, App]]:
    """`provider` (one per process, tests/web/conftest.py: `oidc`), reset for this test, and a new app (uvicorn on
    a free port, no worker) configured with it as `test`."""
    app_port = free_port()
    provider.reset(f"http://127.0.0.1:{app_port}")
    configured = provider_settings(provider, **overrides)
    app = create_app(
        Settings(database_url=database_url, worker=False, secret_key="sso-test-secret", oidc_providers=[configured])
    )
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=app_port, log_level="warning"))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield provider, App(provider.app_url, app.state.context.store, loop)
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        loop.close()


def _write_whole(file: Path, value: object) -> None:
    """Write `value` as JSON whole or not at all: the provider reads these files at its requests."""
    part = file.with_suffix(".part")
    part.write_text(json.dumps(value))
    part.replace(file)
