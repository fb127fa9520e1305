"""Moved to `approvals.calls.bounded_jsonschema` (shared by every engine and the gate); kept until its last importer
outside the engines (`approvals.service`) reads it there."""

from ...calls.bounded_jsonschema import (
    MATCHING_MODULES,
    MAX_SECONDS,
    QUICK_SECONDS,
    TooCostly,
    bounded_run,
    install,
    quick_pass,
    schema_problems,
    search,
)

__all__ = (
    "MATCHING_MODULES",
    "MAX_SECONDS",
    "QUICK_SECONDS",
    "TooCostly",
    "bounded_run",
    "install",
    "quick_pass",
    "schema_problems",
    "search",
)
