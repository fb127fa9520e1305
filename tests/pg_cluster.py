"""A PostgreSQL cluster of the test's own, to stop and restart: the shared one is never touched.

`initdb` into a temporary folder (as the `postgres` user when the tests run as root, since
PostgreSQL refuses to run as root), started on a free loopback port with trust auth.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from .processes import free_port

__all__ = ("OwnCluster", "own_cluster")


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if versions:
            return str(versions[-1] / name)
        raise AssertionError(f"{name} not found: install PostgreSQL's server package")
    return found


def _as_postgres(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@dataclass
class OwnCluster:
    folder: Path
    port: int

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def database(self, name: str = "approvals") -> str:
        """Create a database; its URL."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def _ctl(self, *args: str) -> None:
        command = _as_postgres([_bin("pg_ctl"), "-D", str(self.folder / "data"), "-w", "-t", "60", *args])
        subprocess.run(command, check=True, capture_output=True, timeout=90)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-l", str(self.folder / "server.log"), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def own_cluster() -> Iterator[OwnCluster]:
    """A fresh cluster, running until the block ends; then stopped and removed.

    Its folder is made in the system's temporary folder, not pytest's: the `postgres` user
    must be able to reach it, and pytest's are private to the user running the tests.
    """
    folder = Path(tempfile.mkdtemp(prefix="approvals-pg-"))
    folder.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    subprocess.run(
        _as_postgres([_bin("initdb"), "-D", str(folder / "data"), "-A", "trust", "-U", "postgres", "--no-sync"]),
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster = OwnCluster(folder=folder, port=free_port())
    cluster.start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped by the test
            cluster.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)
