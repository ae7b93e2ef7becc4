"""From a file's bytes to the text, title and metadata of one or more documents, per format.

Each format is read by a well-kept library: python-frontmatter and markdown-it-py (Markdown),
docutils (reStructuredText), Beautiful Soup (HTML), pypdf (PDF), python-docx (DOCX), the standard
json module (JSON Lines) and Pygments' lexer table (source code); manual pages (roff) by a small
reader here, since no kept library reads roff without groff. Gzip files are read as what they
hold (`ls.1.gz`, the form most packaged documentation takes). A reader raises `ParseError`
with a reason a person can act on; `format_of` returns None for files no reader takes.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path
from typing import Any

MetadataValue = str | int | float | bool
TEXT_SUFFIXES = frozenset({".txt", ".text", ".log", ""})
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdx"})
MAN_SUFFIX = re.compile(r"\.[1-9][a-z]{0,3}")
"""Manual pages: `ls.1`, `printf.3p`, `git-commit.1`, `xterm.1x` (roff, often gzipped)."""
MAX_UNPACKED_BYTES = 64 * 2**20
"""A gzip file that unpacks to more is refused (a compressed bomb never fills memory)."""
SECTION_LEVELS = 3
"""Markdown headings down to this level start a new document (`##` ... `###` sections)."""


class ParseError(Exception):
    """A file that looked readable but could not be parsed; the message says why."""


@dataclass(frozen=True)
class Heading:
    """One step of a section's heading path."""

    slug: str
    """Lower-case, dash-separated heading text."""
    text: str
    """The heading as written."""


@dataclass(frozen=True)
class Extracted:
    """One document read from a file, before ids and file facts are added."""

    text: str
    """The body to chunk and embed."""
    title: str = ""
    """Title from the format (front matter, <title>, heading, PDF info), else empty."""
    part: str = ""
    """Distinguishes several documents of one file (a section slug, `page-3`, a record id)."""
    headings: tuple[Heading, ...] = ()
    """Headings enclosing this part (Markdown sections)."""
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)
    """Format metadata (front matter keys, page number, language ...)."""
    record_id: str = ""
    """For records (JSON Lines): the record's own id, used as the document id."""


Reader = Callable[[bytes, Path], list[Extracted]]


def format_of(path: Path) -> str | None:
    """The format name (also the documents' entity_type) for `path`, or None when unsupported;
    a gzip file (`ls.1.gz`, `notes.md.gz`) has the format of what it holds."""
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return format_of(path.with_suffix("")) if path.with_suffix("").suffix else None
    if MAN_SUFFIX.fullmatch(suffix):
        return "man"
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    if suffix in {".rst", ".rest"}:
        return "rst"
    if suffix in {".html", ".htm", ".xhtml"}:
        return "html"
    if suffix == ".pdf":
        return "pdf"
    if suffix == ".docx":
        return "docx"
    if suffix in {".jsonl", ".ndjson"}:
        return "record"
    if suffix in TEXT_SUFFIXES and not path.name.startswith("."):
        return "text"
    if language_of(path) is not None:
        return "code"
    return None


def read(kind: str, data: bytes, path: Path) -> list[Extracted]:
    """Documents of a file of format `kind` (unpacked: see `unpacked`); raises ParseError."""
    return _READERS[kind](data, path)


def unpacked(data: bytes, path: Path) -> tuple[bytes, Path]:
    """A gzip file's content and its name without `.gz`; any other file as it is. Raises
    ParseError for a broken gzip file or one that unpacks to more than `MAX_UNPACKED_BYTES`."""
    if path.suffix.lower() != ".gz":
        return data, path
    return _gunzip(data), path.with_suffix("")


def _gunzip(data: bytes) -> bytes:
    import gzip
    import zlib

    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as packed:
            unpacked = packed.read(MAX_UNPACKED_BYTES + 1)
    except (OSError, EOFError, zlib.error) as error:
        raise ParseError(f"not a readable gzip file: {error}") from error
    if len(unpacked) > MAX_UNPACKED_BYTES:
        raise ParseError(f"unpacks to more than {MAX_UNPACKED_BYTES // 2**20} MiB")
    return unpacked


def looks_binary(data: bytes) -> bool:
    """A NUL byte in the first 8 KiB: not text, whatever the suffix says."""
    return b"\0" in data[:8192]


def language_of(path: Path) -> str | None:
    """The programming language Pygments names for this file name, if it is source code."""
    from pygments.lexers import find_lexer_class_for_filename
    from pygments.util import ClassNotFound

    if path.suffix.lower() in {".json", ".xml", ".svg", ".csv", ".lock", ".toml", ".ini"}:
        return None
    try:
        lexer = find_lexer_class_for_filename(path.name)
    except ClassNotFound:
        return None
    if lexer is None or lexer.name in {"Text only", "Text output"}:
        return None
    return str(lexer.name)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ParseError(f"not UTF-8 text ({error.reason} at byte {error.start})") from error


def _text(data: bytes, path: Path) -> list[Extracted]:
    return [Extracted(text=_decode(data))]


def _code(data: bytes, path: Path) -> list[Extracted]:
    language = language_of(path) or ""
    return [Extracted(text=_decode(data), title=path.name, metadata={"language": language})]


def _markdown(data: bytes, path: Path) -> list[Extracted]:
    import frontmatter
    import yaml

    try:
        post = frontmatter.loads(_decode(data))
    except yaml.YAMLError as error:
        raise ParseError(f"front matter is not valid YAML: {error}") from error
    metadata = front_matter_metadata(post.metadata)
    title = str(post.metadata.get("title", "")) or ""
    return _sections(post.content, title, metadata)


def _sections(body: str, title: str, metadata: Mapping[str, MetadataValue]) -> list[Extracted]:
    """One document per heading section (levels 1..SECTION_LEVELS), headings as breadcrumbs."""
    from markdown_it import MarkdownIt

    lines = body.splitlines()
    tokens = MarkdownIt("commonmark").parse(body)
    starts: list[tuple[int, int, str]] = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map is not None:
            level = int(token.tag[1])
            if level <= SECTION_LEVELS:
                starts.append((token.map[0], level, tokens[i + 1].content.strip()))
    if not title:
        title = next((text for _, level, text in starts if level == 1), "")
    pieces: list[Extracted] = []
    preamble_end = starts[0][0] if starts else len(lines)
    preamble = "\n".join(lines[:preamble_end]).strip()
    if preamble:
        pieces.append(Extracted(text=preamble, title=title, metadata=metadata))
    path: list[tuple[int, Heading]] = []
    seen: dict[str, int] = {}
    for n, (start, level, text) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        path = [(lvl, h) for lvl, h in path if lvl < level]
        heading = Heading(slugify(text) or f"section-{n + 1}", text)
        path.append((level, heading))
        section = "\n".join(lines[start:end]).strip()
        slug = "/".join(h.slug for _, h in path)
        seen[slug] = seen.get(slug, 0) + 1
        part = slug if seen[slug] == 1 else f"{slug}-{seen[slug]}"
        pieces.append(
            Extracted(
                text=section,
                title=section_title(title, text),
                part=part,
                headings=tuple(h for _, h in path[:-1]),
                metadata={**metadata, "section": text},
            )
        )
    if len(pieces) == 1:
        return [replace(pieces[0], part="")]
    return pieces or [Extracted(text=body.strip(), title=title, metadata=metadata)]


def section_title(title: str, heading: str) -> str:
    """A section's title as cited: the page's title and the section's heading (`Install guide ›
    On Linux`), so two sections of one page are told apart; the heading alone without a title."""
    if not title or heading == title:
        return heading or title
    return f"{title} › {heading}"


def _rst(data: bytes, path: Path) -> list[Extracted]:
    from docutils.core import publish_doctree
    from docutils.utils import SystemMessage

    source = _decode(data)
    try:
        tree = publish_doctree(
            source,
            settings_overrides={
                "report_level": 5,
                "halt_level": 3,
                "file_insertion_enabled": False,
                "raw_enabled": False,
            },
        )
    except SystemMessage:
        # Sphinx's own roles and directives (:ref:, .. note::, .. autoclass::) are unknown to
        # plain docutils: the page is still worth reading, as the text it is.
        return [Extracted(text=source.strip(), title=_rst_title(source))]
    title = str(tree.get("title", "")) if tree.get("title") else ""
    text = tree.astext().strip()
    return [Extracted(text=text, title=title)]


_RST_UNDERLINE = re.compile(r"""^([=\-~^"'`#*+:.])\1{2,}\s*$""")


def _rst_title(source: str) -> str:
    """The first section title of reStructuredText read as plain text: a line followed by an
    underline (`====`) at least as long, optionally with an overline too."""
    lines = source.splitlines()
    for above, line in itertools.pairwise(lines):
        text = above.strip()
        underlined = _RST_UNDERLINE.match(line) and len(line.rstrip()) >= len(text)
        if text and underlined and not _RST_UNDERLINE.match(above):
            return text
    return ""


_ROFF_ESCAPES = (
    (re.compile(r"\\f(\[[^]]*\]|\(..|.)"), ""),  # font changes: \fB \fR \f(CW \f[B]
    (re.compile(r"\\s[+-]?\d+"), ""),  # size changes
    (re.compile(r"\\\*(\(..|\[[^]]*\]|.)"), ""),  # strings: \*(Tm \*R
    (re.compile(r"\\\((em|en)"), "—"),
    (re.compile(r"\\\((aq|cq|oq)"), "'"),
    (re.compile(r"\\\((dq|lq|rq)"), '"'),
    (re.compile(r"\\\((bu)"), "•"),
    (re.compile(r"\\\(..|\\\[[^]]*\]"), ""),  # other special characters
    (re.compile(r"\\[-&|^%]"), lambda m: "-" if m.group(0) == "\\-" else ""),
    (re.compile(r"\\[e\\]"), "\\\\"),
    (re.compile(r"\\ "), " "),
)
_MAN_TEXT_MACROS = frozenset(
    {"B", "I", "SM", "SB", "Nm", "Nd", "Ar", "Pa", "Xr", "It", "Op", "Em", "Sy", "Dv", "Ev", "Cm",
     "Ic", "Li", "Va", "Fn", "Ft", "Fa", "Dq", "Qq", "Sq", "Ql", "Pp", "D1", "Dl"}
)  # fmt: skip
_MAN_BREAKS = frozenset({"PP", "LP", "P", "TP", "IP", "HP", "sp", "br", "Pp", "Bl", "El"})


def _man(data: bytes, path: Path) -> list[Extracted]:
    """A manual page (man(7) or mdoc(7) roff) as its text: requests dropped, section headings
    and macro arguments kept, font and character escapes resolved; titled `ls(1)`."""
    title = ""
    lines: list[str] = []
    for raw in _decode(data).splitlines():
        if raw.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if not raw.startswith((".", "'")):
            lines.append(_roff_text(raw))
            continue
        request, _, rest = raw[1:].strip().partition(" ")
        words = [w.strip('"') for w in re.findall(r'"[^"]*"|\S+', rest)]
        if request in {"TH", "Dt"} and words:
            title = f"{words[0].lower()}({words[1]})" if len(words) > 1 else words[0].lower()
        elif request in {"SH", "SS", "Sh", "Ss"}:
            lines += ["", _roff_text(" ".join(words))]
        elif request in {"BR", "RB", "IR", "RI", "BI", "IB"}:
            lines.append(_roff_text("".join(words)))
        elif request == "Fl":
            lines.append(" ".join(f"-{_roff_text(w)}" for w in words))
        elif request in _MAN_TEXT_MACROS:
            lines.append(_roff_text(" ".join(words)))
        elif request in _MAN_BREAKS:
            lines.append(_roff_text(" ".join(words)) if request == "IP" and words else "")
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    return [Extracted(text=text, title=title or path.stem)]


def _roff_text(line: str) -> str:
    for pattern, replacement in _ROFF_ESCAPES:
        line = pattern.sub(replacement, line)
    return line


def _html(data: bytes, path: Path) -> list[Extracted]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(["script", "style", "noscript", "nav", "header", "footer", "aside", "form"]):
        tag.decompose()
    for link in soup.find_all("a"):
        link.unwrap()
    main = soup.find("main") or soup.find("article") or soup.body or soup
    text = "\n".join(line.strip() for line in main.get_text("\n").splitlines() if line.strip())
    return [Extracted(text=text, title=title)]


def _pdf(data: bytes, path: Path) -> list[Extracted]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        title = str(reader.metadata.title or "") if reader.metadata else ""
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError) as error:
        raise ParseError(f"unreadable PDF: {error}") from error
    return [
        Extracted(text=text.strip(), title=title, part=f"page-{n}", metadata={"page": n})
        for n, text in enumerate(pages, start=1)
        if text.strip()
    ]


def _docx(data: bytes, path: Path) -> list[Extracted]:
    import zipfile

    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        document = docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as error:
        raise ParseError(f"unreadable DOCX: {error}") from error
    paragraphs = [p.text for p in document.paragraphs if p.text.strip()]
    title = document.core_properties.title or ""
    return [Extracted(text="\n".join(paragraphs), title=title)]


def _records(data: bytes, path: Path) -> list[Extracted]:
    """JSON Lines: `id` (or `_id`), `title`, `text` (or `content`); other scalar keys → metadata."""
    records: list[Extracted] = []
    for number, line in enumerate(_decode(data).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ParseError(f"line {number}: not JSON ({error.msg})") from error
        if not isinstance(record, dict):
            raise ParseError(f"line {number}: a record must be a JSON object")
        record_id = record.get("id", record.get("_id"))
        if record_id is None or str(record_id) == "":
            raise ParseError(f"line {number}: the record has no `id` (or `_id`)")
        text = str(record.get("text", record.get("content", "")) or "")
        rest = {
            k: v for k, v in record.items() if k not in {"id", "_id", "title", "text", "content"}
        }
        records.append(
            Extracted(
                text=text,
                title=str(record.get("title", "") or ""),
                part=str(record_id),
                record_id=str(record_id),
                metadata={**front_matter_metadata(rest), "record_sha256": _sha(line)},
            )
        )
    return records


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def front_matter_metadata(values: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """Scalar values kept (dates as ISO-8601, lists joined with `, `); keys made filterable."""
    metadata: dict[str, MetadataValue] = {}
    for key, value in values.items():
        name = metadata_key(str(key))
        if name is None or key == "title":
            continue
        if isinstance(value, bool | int | float | str):
            metadata[name] = value
        elif isinstance(value, datetime | date):
            metadata[name] = value.isoformat()
        elif isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
            metadata[name] = ", ".join(str(v) for v in value)
    return metadata


def metadata_key(key: str) -> str | None:
    """`key` as a metadata key the search tool accepts (letters, digits, `_`), or None."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", key)[:64]
    if not name:
        return None
    return name if not name[0].isdigit() else f"_{name}"[:64]


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:80]


_READERS: dict[str, Reader] = {
    "text": _text,
    "code": _code,
    "markdown": _markdown,
    "rst": _rst,
    "man": _man,
    "html": _html,
    "pdf": _pdf,
    "docx": _docx,
    "record": _records,
}
