"""The demo corpus: the Python standard library's own documentation, read from this interpreter.

Module, class, function and method docstrings of a curated list of standard-library modules, plus
the language-reference topics that `pydoc` ships (`pydoc_data.topics`), each cut after its first
`MAX_TOPIC_CHARS` at a paragraph boundary. The size is set by the first build, which must stay
under two minutes on two cores and is bound by embedding (README has the figures):
the long tails of the reference topics were a quarter of all tokens, and sixteen modules of
the least general interest (file formats, network protocol clients and servers, locale and
Unicode tables ...) were left out to bring the corpus from ~242k to ~190k tokens. Nothing is
downloaded and the text is the PSF-licensed documentation already installed with Python. The
corpus is deterministic for a given interpreter.
"""

from __future__ import annotations

import importlib
import inspect
import platform
import re
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

SOURCE_DOCSTRINGS = "stdlib-docstrings"
SOURCE_TOPICS = "pydoc-topics"
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
DOCS_ROOT = f"https://docs.python.org/{PYTHON_VERSION}"

MODULES: tuple[str, ...] = (
    "abc", "argparse", "asyncio", "base64", "bisect", "collections", "collections.abc",
    "concurrent.futures", "contextlib", "contextvars", "copy", "csv", "dataclasses", "datetime",
    "dis", "email.utils", "enum", "fnmatch", "fractions", "functools", "getpass", "gettext",
    "glob", "graphlib", "gzip", "hashlib", "heapq", "hmac", "html", "html.parser", "importlib",
    "inspect", "io", "itertools", "json", "keyword", "logging", "math", "operator", "os",
    "os.path", "pathlib", "pickle", "pprint", "queue", "random", "re", "sched", "secrets", "shlex",
    "shutil", "signal", "socket", "sqlite3", "stat", "statistics", "string", "struct",
    "subprocess", "tempfile", "textwrap", "threading", "time", "timeit", "tomllib", "traceback",
    "types", "typing", "urllib.parse", "urllib.request", "uuid", "warnings", "weakref", "zlib",
    "zoneinfo",
)  # fmt: skip

_PAGES: dict[str, tuple[str, ...]] = {
    "reference/simple_stmts": (
        "assert", "assignment", "augassign", "break", "continue", "del", "global", "import",
        "nonlocal", "pass", "raise", "return", "yield",
    ),
    "reference/compound_stmts": (
        "async", "class", "compound", "else", "for", "function", "if", "try", "while", "with",
    ),
    "reference/expressions": (
        "atom-identifiers", "atom-literals", "attribute-references", "await", "binary", "bitwise",
        "booleans", "calls", "comparisons", "conversions", "dict", "exprlists", "in", "lambda",
        "lists", "operator-summary", "power", "shifting", "slicings", "subscriptions", "unary",
    ),
    "reference/datamodel": (
        "attribute-access", "callable-types", "context-managers", "customization",
        "numeric-types", "objects", "sequence-types", "specialnames", "types",
    ),
    "reference/executionmodel": ("dynamic-features", "exceptions", "execmodel", "naming"),
    "reference/lexical_analysis": (
        "floating", "id-classes", "identifiers", "imaginary", "integers", "numbers", "strings",
    ),
    "library/stdtypes": (
        "bltin-code-objects", "bltin-ellipsis-object", "bltin-null-object", "bltin-type-objects",
        "specialattrs", "string-methods", "truth", "typesfunctions", "typesmapping",
        "typesmethods", "typesmodules", "typesseq", "typesseq-mutable",
    ),
    "library/string": ("formatstrings",),
    "library/pdb": ("debugger",),
}  # fmt: skip
TOPIC_PAGES = {label: page for page, labels in _PAGES.items() for label in labels}
"""The documentation page of each pydoc topic label (labels are the pages' Sphinx anchors)."""
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_ROLE = re.compile(r":(?:[a-z]+:)*[a-z]+:`(?P<target>[^`]+)`")
_OBJECT_REPR = re.compile(r"<(?P<type>[\w.]+) object at 0x[0-9a-fA-F]+>")
_CALLABLE_REPR = re.compile(
    r"<(?:built-in )?(?:function|method|bound method|class) (?P<name>[\w.]+|<lambda>)"
    r"(?: of [^>]*)? at 0x[0-9a-fA-F]+>"
)

MetadataValue = str | int | float | bool


@dataclass(frozen=True)
class Breadcrumb:
    """A step from the documentation root to a document: package, module, class or section."""

    id: str
    """Stable id of the step, e.g. `py:concurrent.futures`."""
    name: str
    """What a reader sees."""
    entity_type: str
    """`package`, `module`, `class` or `section`."""


@dataclass(frozen=True)
class Document:
    """One demo document, as plain data; `build.document_message` gives its wire form."""

    id: str
    """`py:<qualified name>` or `topic:<label>`."""
    title: str
    """The qualified name, or the topic's heading."""
    text: str
    """Signature and docstring, or the topic's text."""
    source: str
    """`SOURCE_DOCSTRINGS` or `SOURCE_TOPICS`."""
    entity_type: str
    """`module`, `class`, `function`, `method` or `topic`."""
    created_at: datetime
    """When this interpreter was built."""
    updated_at: datetime
    """When the documented source last changed."""
    url: str
    """The page on docs.python.org."""
    breadcrumbs: tuple[Breadcrumb, ...]
    """Path from the documentation root."""
    metadata: dict[str, MetadataValue]
    """Filterable scalars: module, package, python_version, is_private, is_async, ..."""


_MIN_DOC_CHARS = 20
MAX_TOPIC_CHARS = 2_000
"""Reference topics are cut here, at the last paragraph break before it."""


@dataclass(frozen=True)
class _Origin:
    """Where a module's documentation comes from and when it was written."""

    module: str
    """Dotted module name."""
    created_at: datetime
    """When this interpreter was built."""
    updated_at: datetime
    """Modification time of the module's source file (the build time for built-in modules)."""


def build_corpus(
    modules: tuple[str, ...] = MODULES, *, include_topics: bool = True
) -> list[Document]:
    """Every demo document, in a stable order, ids unique."""
    documents: dict[str, Document] = {}
    for name in modules:
        module = _import_quietly(name)
        if module is None:
            continue
        for document in _module_documents(module, _origin_of(name, module)):
            documents.setdefault(document.id, document)
    for document in _topic_documents() if include_topics else ():
        documents.setdefault(document.id, document)
    return list(documents.values())


def interpreter_built_at() -> datetime:
    """The build date this interpreter reports (`platform.python_build()`), as UTC."""
    try:
        return datetime.strptime(platform.python_build()[1], "%b %d %Y %H:%M:%S").replace(
            tzinfo=UTC
        )
    except ValueError:
        return datetime.fromtimestamp(Path(sys.executable).stat().st_mtime, UTC)


def _import_quietly(name: str) -> ModuleType | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except ImportError:
            return None


def _origin_of(name: str, module: ModuleType) -> _Origin:
    built = interpreter_built_at()
    path = getattr(module, "__file__", None)
    updated = datetime.fromtimestamp(Path(path).stat().st_mtime, UTC) if path else built
    return _Origin(name, created_at=built, updated_at=updated)


def _module_documents(module: ModuleType, origin: _Origin) -> Iterator[Document]:
    doc = _own_doc(module)
    if doc:
        yield _document(origin, (), origin.module, "module", doc, signature="")
    for name, member in _public_members(module):
        if inspect.isclass(member):
            yield from _class_documents(origin, name, member)
        elif _is_function(member):
            member_doc = _own_doc(member)
            if member_doc:
                yield _document(
                    origin, (), name, "function", member_doc, _signature(member), member
                )


def _class_documents(origin: _Origin, name: str, cls: type) -> Iterator[Document]:
    doc = _own_doc(cls)
    if doc:
        yield _document(origin, (), name, "class", doc, _signature(cls))
    for attr, member in sorted(vars(cls).items()):
        if attr.startswith("__") or not _is_function(member):
            continue
        function = member.__func__ if isinstance(member, classmethod | staticmethod) else member
        member_doc = _own_doc(function)
        if member_doc:
            yield _document(
                origin, (name,), attr, "method", member_doc, _signature(function), function
            )


def _public_members(module: ModuleType) -> list[tuple[str, object]]:
    """Members defined in `module` or its private submodules, in `__all__` when it has one."""
    exported = getattr(module, "__all__", None)
    names = sorted(exported) if isinstance(exported, list | tuple) else sorted(vars(module))
    members = []
    for name in names:
        member = getattr(module, name, None)
        if member is None or (exported is None and name.startswith("__")):
            continue
        home = getattr(member, "__module__", None) or ""
        if home == module.__name__ or home.startswith(f"{module.__name__}."):
            members.append((name, member))
    return members


def _is_function(member: object) -> bool:
    if isinstance(member, classmethod | staticmethod):
        member = member.__func__
    return inspect.isfunction(member) or inspect.isbuiltin(member) or inspect.isroutine(member)


def _own_doc(obj: object) -> str:
    """The object's own docstring, cleaned; empty when absent or too short to be useful."""
    raw = getattr(obj, "__doc__", None)
    if not isinstance(raw, str):
        return ""
    doc = inspect.cleandoc(raw)
    return doc if len(doc) >= _MIN_DOC_CHARS else ""


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""


def _document(
    origin: _Origin,
    owners: tuple[str, ...],
    name: str,
    entity_type: str,
    doc: str,
    signature: str,
    function: object | None = None,
) -> Document:
    module = origin.module
    qualified = ".".join((module, *owners, name)) if entity_type != "module" else module
    heading = clean_markup(f"{qualified}{signature}")
    doc = clean_markup(doc)
    return Document(
        id=f"py:{qualified}",
        title=qualified,
        text=f"{heading}\n\n{doc}",
        source=SOURCE_DOCSTRINGS,
        entity_type=entity_type,
        created_at=origin.created_at,
        updated_at=origin.updated_at,
        url=_docs_url(module, qualified, entity_type),
        breadcrumbs=_breadcrumbs(module, owners),
        metadata={
            "module": module,
            "package": module.split(".")[0],
            "python_version": PYTHON_VERSION,
            "is_private": any(part.startswith("_") for part in (*owners, name)),
            "is_async": inspect.iscoroutinefunction(function) if function is not None else False,
            "deprecated": "deprecated" in doc.lower(),
            "line_count": doc.count("\n") + 1,
        },
    )


def _docs_url(module: str, qualified: str, entity_type: str) -> str:
    anchor = f"module-{module}" if entity_type == "module" else qualified
    return f"{DOCS_ROOT}/library/{module.lower()}.html#{anchor}"


def _breadcrumbs(module: str, owners: tuple[str, ...]) -> tuple[Breadcrumb, ...]:
    """package → module → class, each a step with its own id."""
    parts = module.split(".")
    crumbs = [
        Breadcrumb(
            id=f"py:{'.'.join(parts[: i + 1])}",
            name=".".join(parts[: i + 1]),
            entity_type="package",
        )
        for i in range(len(parts) - 1)
    ]
    crumbs.append(Breadcrumb(id=f"py:{module}", name=module, entity_type="module"))
    for i in range(len(owners)):
        path = ".".join((module, *owners[: i + 1]))
        crumbs.append(Breadcrumb(id=f"py:{path}", name=owners[i], entity_type="class"))
    return tuple(crumbs)


def _topic_documents() -> Iterator[Document]:
    from pydoc_data import topics

    built = interpreter_built_at()
    updated = datetime.fromtimestamp(Path(topics.__file__).stat().st_mtime, UTC)
    for label in sorted(topics.topics):
        text = _head(clean_markup(topics.topics[label].strip()), MAX_TOPIC_CHARS)
        title = _topic_title(label, text)
        yield Document(
            id=f"topic:{label}",
            title=title,
            text=text,
            source=SOURCE_TOPICS,
            entity_type="topic",
            created_at=built,
            updated_at=updated,
            url=topic_url(label),
            breadcrumbs=(
                Breadcrumb(id="topic:reference", name="Language reference", entity_type="section"),
            ),
            metadata={
                "module": "",
                "package": "",
                "python_version": PYTHON_VERSION,
                "is_private": False,
                "is_async": False,
                "deprecated": "deprecated" in text.lower(),
                "line_count": text.count("\n") + 1,
            },
        )


def topic_url(label: str) -> str:
    """The reference section a pydoc topic comes from (the reference index when unknown)."""
    page = TOPIC_PAGES.get(label)
    return f"{DOCS_ROOT}/{page}.html#{label}" if page else f"{DOCS_ROOT}/reference/index.html"


def clean_markup(text: str) -> str:
    """Text as a reader sees it: reST roles reduced to their text, grammar productions dropped,
    object reprs without their (run-dependent) addresses."""
    text = _ROLE.sub(_role_text, text)
    text = _CALLABLE_REPR.sub(lambda m: m.group("name"), text)
    text = _OBJECT_REPR.sub(lambda m: f"<{m.group('type')}>", text)
    return _without_grammar(_ADDRESS.sub("", text))


def _role_text(match: re.Match[str]) -> str:
    """`:func:`~os.path.join`` → join; `:ref:`text <label>`` → text; else the target."""
    target = match.group("target").strip()
    if target.endswith(">") and " <" in target:
        return target[: target.rindex(" <")].strip()
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip("!")


def _without_grammar(text: str) -> str:
    """Drop BNF productions (`name ::= ...` and their `| ...` continuation lines)."""
    kept: list[str] = []
    in_rule = False
    for line in text.split("\n"):
        stripped = line.strip()
        if "::=" in line:
            in_rule = True
            continue
        if in_rule and stripped.startswith("|"):
            continue
        in_rule = False
        kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept))


def _head(text: str, limit: int) -> str:
    """`text` up to `limit` characters, ending at a paragraph break when there is one."""
    if len(text) <= limit:
        return text
    cut = text.rfind("\n\n", 0, limit)
    return text[: cut if cut > 0 else limit].rstrip()


def _topic_title(label: str, text: str) -> str:
    """The topic's first heading line (e.g. "Assignment statements"), else its label."""
    first = text.splitlines()[0].strip() if text else ""
    return first if 0 < len(first) <= 80 else label
