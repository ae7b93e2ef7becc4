"""Which files an ingest reads, and the document each part of a file becomes: the units
`quarry ingest` feeds the one ingest pipeline (`sync`).

A document id is the file's path relative to the folder above the argument it was found under
(`quarry ingest docs/` gives `docs/guide/intro.md`), plus the part of the file it holds
(`docs/guide/intro.md/install` for a Markdown section, `report.pdf/page-3` for a PDF page), or a
record's own id (JSON Lines). Characters the search tool does not take in ids are written `:XX`
(their UTF-8 bytes in hex), so every path keeps one id of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from google.protobuf import timestamp_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from quarry_cli.ingest.formats import (
    Extracted,
    MetadataValue,
    ParseError,
    format_of,
    looks_binary,
    read,
    unpacked,
)
from quarry_cli.ingest.sync import (
    BATCH_DOCUMENTS,
    HASH_KEY,
    PATH_KEY,
    Failed,
    IngestSummary,
    ProgressCallback,
    Skipped,
    StoredHashes,
    Target,
    Unit,
    sync,
)
from services.search_tool.client import SearchToolClient

MAX_ID_CHARS = 256


@dataclass(frozen=True)
class SourceFile:
    """A file found under one of the paths given."""

    path: Path
    """Where it is."""
    relative: str
    """POSIX path from the folder above the argument it was found under."""
    source: str
    """The documents' `source`: the name given, else the argument's folder name."""


@dataclass(frozen=True)
class FileFacts:
    """What every document of one file shares."""

    file: SourceFile
    """The file."""
    kind: str
    """Its format, which is also the entity_type."""
    sha256: str
    """SHA-256 of its bytes."""
    modified: datetime
    """Last modification."""
    created: datetime
    """Creation (birth time where the file system keeps it, else the modification time)."""
    base_url: str = ""
    """Prefix for urls instead of `file://`."""


@dataclass(frozen=True)
class IngestOptions:
    """What `quarry ingest` reads and where it stores it."""

    collection: str
    """Target collection (created when missing)."""
    paths: Sequence[Path]
    """Files and folders."""
    source: str = ""
    """The documents' `source`; empty: each argument's folder name."""
    base_url: str = ""
    """Url prefix for documents instead of `file://` paths."""
    prune: bool = False
    """Delete documents of the run's sources whose file is gone."""
    dry_run: bool = False
    """Plan only: read and compare, send and delete nothing."""
    batch_documents: int = BATCH_DOCUMENTS
    """Most documents per request."""


async def ingest(
    client: SearchToolClient,
    options: IngestOptions,
    *,
    progress: ProgressCallback | None = None,
) -> IngestSummary:
    """Bring `options.collection` in line with the files under `options.paths`."""
    files = list(walk(options.paths, source=options.source))
    target = Target(
        collection=options.collection,
        sources=frozenset(f.source for f in files),
        prune=options.prune,
        dry_run=options.dry_run,
        batch_documents=options.batch_documents,
    )
    units = [file_unit(f, base_url=options.base_url) for f in files]
    return await sync(client, target, units, progress=progress)


def file_unit(file: SourceFile, *, base_url: str = "") -> Unit:
    """One file as a unit of the pipeline: read, hashed, and parsed only when it changed."""

    def read_file(stored: StoredHashes) -> list[search_tool_pb2.Document] | None:
        kind = format_of(file.path)
        if kind is None:
            raise Skipped("unsupported file type")
        try:
            data = file.path.read_bytes()
        except OSError as error:
            raise Failed(f"cannot read: {error.strerror or error}") from error
        try:
            content, name = unpacked(data, file.path)
        except ParseError as error:
            raise Failed(str(error)) from error
        if kind not in {"pdf", "docx"} and looks_binary(content):
            raise Skipped("binary content")
        facts = file_facts(file, kind, data, base_url=base_url)
        if kind != "record" and stored == {facts.sha256}:
            return None
        try:
            parts = read(kind, content, name)
        except ParseError as error:
            raise Failed(str(error)) from error
        documents = [to_document(facts, p) for p in parts if p.text.strip()]
        if not documents:
            raise Skipped("no text")
        return documents

    return Unit(file.relative, read_file)


def walk(paths: Sequence[Path], *, source: str = "") -> Iterator[SourceFile]:
    """Every non-hidden file under `paths` (files given directly included), sorted per argument."""
    seen: set[Path] = set()
    for argument in paths:
        root = argument.resolve()
        base = root.parent
        name = source or (root.name if root.is_dir() else root.parent.name) or "files"
        candidates = sorted(root.rglob("*")) if root.is_dir() else [root]
        for path in candidates:
            relative = path.relative_to(base)
            if path in seen or not path.is_file() or _hidden(path.relative_to(root)):
                continue
            seen.add(path)
            yield SourceFile(path, relative.as_posix(), name)


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in relative.parts)


def encode_id(text: str) -> str:
    """`text` with every character outside `A-Z a-z 0-9 _ - . /` written `:XX`; at most 256."""
    encoded = quote(text, safe="/._-").replace("%", ":")
    if len(encoded) <= MAX_ID_CHARS:
        return encoded
    digest = hashlib.sha256(encoded.encode()).hexdigest()[:16]
    return f"{encoded[: MAX_ID_CHARS - 17]}:{digest}"


def document_id(facts: FileFacts, part: Extracted) -> str:
    if part.record_id:
        return encode_id(part.record_id)
    return encode_id(f"{facts.file.relative}/{part.part}" if part.part else facts.file.relative)


def to_document(facts: FileFacts, part: Extracted) -> search_tool_pb2.Document:
    """The document one part of a file becomes."""
    metadata: dict[str, MetadataValue] = {**part.metadata}
    record_hash = metadata.pop("record_sha256", None)
    metadata.update(
        {
            PATH_KEY: facts.file.relative,
            "format": facts.kind,
            HASH_KEY: str(record_hash) if record_hash else facts.sha256,
        }
    )
    return search_tool_pb2.Document(
        id=document_id(facts, part),
        title=part.title or facts.file.path.name,
        text=part.text,
        source=facts.file.source,
        entity_type=facts.kind,
        created_at=_timestamp(facts.created),
        updated_at=_timestamp(facts.modified),
        url=_url(facts, part),
        breadcrumbs=_breadcrumbs(facts, part),
        metadata={k: _value(v) for k, v in metadata.items()},
    )


def file_facts(file: SourceFile, kind: str, data: bytes, *, base_url: str = "") -> FileFacts:
    stat = file.path.stat()
    modified = datetime.fromtimestamp(stat.st_mtime, UTC)
    birth = getattr(stat, "st_birthtime", None)
    created = datetime.fromtimestamp(birth, UTC) if birth else modified
    return FileFacts(
        file, kind, hashlib.sha256(data).hexdigest(), modified, created, base_url.rstrip("/")
    )


def _url(facts: FileFacts, part: Extracted) -> str:
    base = (
        f"{facts.base_url}/{quote(facts.file.relative)}"
        if facts.base_url
        else facts.file.path.as_uri()
    )
    page = part.metadata.get("page")
    return f"{base}#page={page}" if page else base


def _breadcrumbs(facts: FileFacts, part: Extracted) -> list[search_pb2.Breadcrumb]:
    folders = facts.file.relative.split("/")[:-1]
    crumbs = [
        search_pb2.Breadcrumb(
            id=encode_id("/".join(folders[: i + 1])), name=name, entity_type="folder"
        )
        for i, name in enumerate(folders)
    ]
    if part.headings:
        crumbs.append(
            search_pb2.Breadcrumb(
                id=encode_id(facts.file.relative), name=facts.file.path.name, entity_type="file"
            )
        )
        trail = facts.file.relative
        for heading in part.headings:
            trail = f"{trail}/{heading.slug}"
            crumbs.append(
                search_pb2.Breadcrumb(id=encode_id(trail), name=heading.text, entity_type="section")
            )
    return crumbs


def _timestamp(moment: datetime) -> timestamp_pb2.Timestamp:
    message = timestamp_pb2.Timestamp()
    message.FromDatetime(moment)
    return message


def _value(value: MetadataValue) -> search_pb2.MetadataValue:
    if isinstance(value, bool):
        return search_pb2.MetadataValue(bool_value=value)
    if isinstance(value, int):
        return search_pb2.MetadataValue(int_value=value)
    if isinstance(value, float):
        return search_pb2.MetadataValue(double_value=value)
    return search_pb2.MetadataValue(string_value=value)
