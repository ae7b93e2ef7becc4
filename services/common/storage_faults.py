"""PostgreSQL storage faults, told apart by SQLSTATE (the psycopg error classes), never by text:
a full disk (`53100 disk_full`) and a damaged relation (`XX001 data_corrupted`, `XX002
index_corrupted`). Both services read them through here: the search tool's `StorageFaults`
(RESOURCE_EXHAUSTED `STORAGE_FULL` / DATA_LOSS `COLLECTION_DAMAGED`) and the agent's PostgreSQL
run history (RESOURCE_EXHAUSTED `STORAGE_FULL` / DATA_LOSS naming the run or the history)."""

from __future__ import annotations

import psycopg.errors

DATABASE_FULL: tuple[type[psycopg.Error], ...] = (psycopg.errors.DiskFull,)
"""SQLSTATE 53100: the server could not extend a file (its disk or tablespace is full)."""
DATABASE_DAMAGED: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.DataCorrupted,
    psycopg.errors.IndexCorrupted,
)
"""SQLSTATE XX001 / XX002: a page of a table or an index the server cannot read."""


def database_full(error: BaseException) -> bool:
    return isinstance(error, DATABASE_FULL)


def database_damaged(error: BaseException) -> bool:
    return isinstance(error, DATABASE_DAMAGED)


def database_cause(error: BaseException) -> str:
    """The cause as a caller reads it: the server's first line and its SQLSTATE."""
    state = getattr(error, "sqlstate", None) or "?"
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"{first[:200]} (SQLSTATE {state})"
