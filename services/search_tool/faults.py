"""Storage faults, named: a full disk and a damaged collection, told apart from bugs.

The engines surface both as whatever their storage layer raises (LanceDB: `RuntimeError("lance
error: LanceError(IO): No space left on device (os error 28) ...")`, or a Rust panic on a file it
cannot decode). `StorageFaults.on(collection)` wraps one operation on a collection and turns them
into statuses that say what happened: a full disk is RESOURCE_EXHAUSTED naming the data directory
and the cause (reason `STORAGE_FULL`), a damaged collection DATA_LOSS naming the collection (reason
`COLLECTION_DAMAGED`). Anything else passes through untouched, so a bug stays INTERNAL.

The PostgreSQL engine's faults are told by SQLSTATE (`services.common.storage_faults`: 53100
disk_full; XX001 data_corrupted, XX002 index_corrupted), named as the PostgreSQL database with
the SQLSTATE in the message and the ErrorInfo metadata.
"""

from __future__ import annotations

import errno
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from services.common.errors import DataLoss, QuarryError, ResourceExhausted
from services.common.storage_faults import database_cause, database_damaged, database_full

log = logging.getLogger(__name__)

FULL_RETRY_AFTER_S = 60.0
"""RetryInfo of STORAGE_FULL: space is freed by an operator, not in a second."""
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
_FULL_MARKERS = (
    "No space left on device",
    "(os error 28)",
    "File too large",
    "(os error 27)",
    "Disk quota exceeded",
    "(os error 122)",
)
_DAMAGE_MARKERS = (
    "Corrupt",
    "corrupt",
    "lance error: Not found:",
    "Invalid data",
    "failed to decode",
    "unexpected end of file",
    "checksum",
)
_SOURCE_LOCATION = re.compile(r", /\S+\.rs:\d+:\d+$")
"""The Rust source position a lance error ends with."""
_DAMAGE_TYPES = frozenset({"RustPanic", "ArrowInvalid", "DecodeError"})
"""A Rust panic in the storage layer is what a file it cannot decode ends in."""


def leaves(error: BaseException) -> Iterator[BaseException]:
    """`error` itself, or every exception inside an exception group (a TaskGroup's)."""
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from leaves(inner)
    else:
        yield error


def is_storage_full(error: BaseException) -> bool:
    if isinstance(error, psycopg.Error):  # told by SQLSTATE, never by the server's text
        return database_full(error)
    if isinstance(error, OSError) and error.errno in _FULL_ERRNOS:
        return True
    text = str(error)
    return any(marker in text for marker in _FULL_MARKERS)


def is_damage(error: BaseException) -> bool:
    if isinstance(error, QuarryError) or is_storage_full(error):
        return False
    if isinstance(error, psycopg.Error):  # told by SQLSTATE, never by the server's text
        return database_damaged(error)
    if type(error).__name__ in _DAMAGE_TYPES:
        return True
    text = str(error)
    return any(marker in text for marker in _DAMAGE_MARKERS)


class StorageFaults:
    """Maps storage faults of operations on collections stored under `data_dir`."""

    def __init__(self, data_dir: Path | None) -> None:
        self._data_dir = data_dir

    @contextmanager
    def on(self, collection: str) -> Iterator[None]:
        try:
            yield
        except QuarryError:
            raise
        except Exception as error:
            mapped = self.mapped(error, collection)
            if mapped is None:
                raise
            raise mapped from error

    def mapped(self, error: BaseException, collection: str) -> QuarryError | None:
        """The status `error` means for `collection`, or None when it is not a storage fault."""
        for leaf in leaves(error):
            if is_storage_full(leaf):
                return self.full(leaf, collection)
        for leaf in leaves(error):
            if is_damage(leaf):
                return self.damaged(leaf, collection)
        return None

    def full(self, cause: BaseException, collection: str) -> ResourceExhausted:
        if database_full(cause):
            where, said = "the PostgreSQL database", database_cause(cause)
            metadata = {"storage": "postgres", "sqlstate": str(getattr(cause, "sqlstate", ""))}
        else:
            where = str(self._data_dir) if self._data_dir is not None else "the engine's storage"
            said, metadata = _first_line(cause), {"data_dir": where}
            where = f"the search tool's data directory {where}"
        log.error(
            "storage full: write refused",
            extra={"collection": collection, "storage": where, "error": str(cause)[:500]},
        )
        return ResourceExhausted(
            f"{where} is full ({said}): the write to collection {collection} stopped; reads "
            "keep working. Free space, then retry (upserts are idempotent)",
            reason="STORAGE_FULL",
            metadata={**metadata, "collection": collection},
            retry_after_s=FULL_RETRY_AFTER_S,
        )

    def damaged(self, cause: BaseException, collection: str) -> DataLoss:
        log.error(
            "collection damaged",
            extra={"collection": collection, "error": str(cause)[:500]},
        )
        said, metadata = _first_line(cause), {"collection": collection}
        if database_damaged(cause):
            said = f"the PostgreSQL database: {database_cause(cause)}"
            metadata["sqlstate"] = str(getattr(cause, "sqlstate", ""))
        return DataLoss(
            f"collection {collection} is damaged ({said}); other collections are "
            "not affected. Restore it from a backup, or delete it and ingest it again",
            reason="COLLECTION_DAMAGED",
            metadata=metadata,
        )


def _first_line(error: BaseException) -> str:
    """The cause in a few words: its first line, without the storage layer's source location."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return _SOURCE_LOCATION.sub("", text)[:200]
