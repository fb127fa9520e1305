"""Fresh migrated databases for tests, fast: each process migrates once, then copies.

SQLite: the alembic scripts run once into a template file that each test copies.
PostgreSQL: they run once into a template database; each test gets `CREATE DATABASE ... TEMPLATE`
of it (a file-level copy, ~0.1-0.2 s, where truncating 17 tables took 0.3-0.6 s), dropped in
background threads so no test waits for the drop (which takes longer than the copy). Every
name carries the xdist worker id and a random per-process part, so workers and concurrent
sessions on the shared server never meet.

`template(backend, name, seed)` makes a further template from a migrated one with rows every test of a kind
starts from (the web tests' users and tokens), built once per process instead of per test.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import psycopg

from approvals.store.migrate import upgrade

__all__ = ("BACKENDS", "DATABASES", "PG_SERVER", "Databases", "Seed", "worker_id")

PG_SERVER = os.environ.get("APPROVALS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
BACKENDS = [b.strip() for b in os.environ.get("APPROVALS_TEST_DATABASES", "sqlite,postgresql").split(",") if b.strip()]

Seed = Callable[[str], Awaitable[Any]]
"""Fills the database at the URL it is given; what it returns is kept with the template."""


def worker_id() -> str:
    """pytest-xdist's worker id ("gw0", ...), or "main" without xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER", "main")


def _url(name: str) -> str:
    return PG_SERVER.rsplit("/", 1)[0] + f"/{name}"


def _admin() -> psycopg.Connection[Any]:
    return psycopg.connect(PG_SERVER, autocommit=True)


@dataclass
class Template:
    """A database to copy (a SQLite file or a PostgreSQL database name) and what its seed returned."""

    location: str
    seeded: Any = None


@dataclass
class Databases:
    """This process's templates and the PostgreSQL databases copied from them."""

    prefix: str = field(default_factory=lambda: f"approvals_{worker_id()}_{uuid.uuid4().hex[:8]}".lower())
    _folder: Path | None = None
    _templates: dict[tuple[str, str], Template] = field(default_factory=dict)
    _created: set[str] = field(default_factory=set)
    _names: itertools.count[int] = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _dropper: ThreadPoolExecutor | None = None
    _drops: list[Future[None]] = field(default_factory=list)

    def template(self, backend: str, seed_name: str = "", seed: Seed | None = None) -> Template:
        """The migrated template of `backend` (seeded by `seed`, once, under `seed_name`)."""
        key = (backend, seed_name)
        with self._lock:
            if key in self._templates:
                return self._templates[key]
        if seed is None:
            location = self._sqlite_template() if backend == "sqlite" else self._pg_template()
            made = Template(location)
        else:
            base = self.template(backend)
            location = self._copy(backend, base.location, f"tpl_{seed_name}")
            with ThreadPoolExecutor(max_workers=1) as thread:  # a loop of its own: the caller may be in one
                made = Template(location, thread.submit(anyio.run, seed, self.url(backend, location)).result())
        with self._lock:
            return self._templates.setdefault(key, made)

    def fresh(self, backend: str, folder: Path, seed_name: str = "", seed: Seed | None = None) -> tuple[str, Any]:
        """A new database copied from the template (SQLite: a file in `folder`), and what the seed returned."""
        template = self.template(backend, seed_name, seed)
        if backend == "sqlite":
            path = folder / "approvals.db"
            shutil.copy(template.location, path)
            return f"sqlite:///{path}", template.seeded
        return _url(self._copy(backend, template.location, f"t{next(self._names)}")), template.seeded

    def release(self, url: str) -> None:
        """Drop a PostgreSQL database `fresh` made, in the background (SQLite files go with their folder)."""
        name = url.rsplit("/", 1)[1]
        if name not in self._created:
            return
        with self._lock:
            if self._dropper is None:
                # a drop waits for every backend on the server to let go of the files (~0.3-3 s): two at a time
                self._dropper = ThreadPoolExecutor(max_workers=2, thread_name_prefix="drop-db")
            self._drops.append(self._dropper.submit(self._drop, name))

    def close(self) -> None:
        """Wait for the drops, then drop the templates; remove the SQLite folder."""
        for drop in self._drops:
            drop.result()
        if self._dropper is not None:
            self._dropper.shutdown()
        for name in sorted(self._created):
            self._drop(name)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)

    @staticmethod
    def url(backend: str, location: str) -> str:
        return f"sqlite:///{location}" if backend == "sqlite" else _url(location)

    def _sqlite_template(self) -> str:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        path = self._folder / "template.db"
        upgrade(f"sqlite:///{path}")
        return str(path)

    def _pg_template(self) -> str:
        name = f"{self.prefix}_tpl"
        try:
            with _admin() as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.OperationalError as exc:
            raise AssertionError(
                f"PostgreSQL is not reachable at {PG_SERVER} ({exc}); start it or set APPROVALS_TEST_DATABASES=sqlite"
            ) from exc
        self._created.add(name)
        upgrade(_url(name))
        return name

    def _copy(self, backend: str, source: str, suffix: str) -> str:
        if backend == "sqlite":
            assert self._folder is not None
            path = self._folder / f"{suffix}.db"
            shutil.copy(source, path)
            return str(path)
        name = f"{self.prefix}_{suffix}"
        with _admin() as conn:  # WAL_LOG copies block by block through the WAL: no checkpoint, unlike FILE_COPY
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}" STRATEGY WAL_LOG')
        self._created.add(name)
        return name

    def _drop(self, name: str) -> None:
        with _admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._created.discard(name)


DATABASES = Databases()
"""This process's databases; tests/conftest.py closes them when the session ends."""
