"""What makes a store module a writer, for the contract that keeps the client API's writes in the engine
(tests/import_contracts.py): a data-changing SQL statement, a row lock, a NOTIFY, or a call of one of the
schema's PL/pgSQL functions (which all write). The store writes its SQL in capitals."""

from __future__ import annotations

import re
from pathlib import Path

_SCHEMA_FUNCTION = re.compile(r"FUNCTION\s+(\w+)")


def schema_functions(store_directory: Path) -> set[str]:
    """The PL/pgSQL functions the store's schema files create."""
    return {
        match.group(1)
        for path in (store_directory / "schema").glob("*.sql")
        for match in _SCHEMA_FUNCTION.finditer(path.read_text())
    }


def write_pattern(functions: set[str]) -> re.Pattern[str]:
    """What marks a write in a store module's source (the store writes its SQL in capitals)."""
    calls = "|".join(sorted(functions)) or "(?!)"
    return re.compile(
        r"\bINSERT\s+INTO\b|\bUPDATE\s+(?:\w+\s+){0,3}SET\b|\bDELETE\s+FROM\b|\bTRUNCATE\b"
        r"|\bFOR\s+(?:NO\s+KEY\s+)?UPDATE\b|\bFOR\s+(?:KEY\s+)?SHARE\b|\bpg_notify\b|\bnextval\b"
        rf"|\b(?:{calls})\s*\("
    )


def first_write(source: str, pattern: re.Pattern[str]) -> str | None:
    """The line of ``source`` that first writes, or None."""
    match = pattern.search(source)
    if match is None:
        return None
    start = source.rfind("\n", 0, match.start()) + 1
    end = source.find("\n", match.end())
    return source[start : end if end != -1 else None].strip()
