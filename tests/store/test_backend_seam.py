"""The store's seam holds: only the backends know which database they are on.

`import-linter` (pyproject.toml, `make lint`) holds the layers and the store free of import
cycles; this holds the other half of the seam, which no import shows: no code outside
`approvals/store/backends/` asks for the dialect, so every difference between SQLite and
PostgreSQL has one home (`approvals.store.backend.Backend`).
"""

from __future__ import annotations

import re
from pathlib import Path

import approvals
import approvals_web

DIALECT_CHECK = re.compile(r"\bis_postgres\b|\bis_sqlite\b|dialect\.name|[=!]= \"(postgresql|sqlite)\"")
BACKENDS = Path(approvals.__file__).parent / "store" / "backends"


def test_no_code_outside_the_backends_asks_which_database_it_is_on() -> None:
    roots = (Path(approvals.__file__).parent, Path(approvals_web.__file__).parent)
    checks = [
        f"{path}:{number}: {line.strip()}"
        for root in roots
        for path in sorted(root.rglob("*.py"))
        if BACKENDS not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if DIALECT_CHECK.search(line)
    ]
    assert checks == []


def test_the_pattern_finds_the_checks_it_forbids() -> None:
    for check in ("if self.db.is_postgres:", "dialect = tx.session.dialect.name", 'if dialect == "sqlite":'):
        assert DIALECT_CHECK.search(check), check
