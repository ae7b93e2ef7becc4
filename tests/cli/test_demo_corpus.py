"""The demo corpus built from the standard library's documentation, and its wire form."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from quarry_cli.demo.build import DEFAULT_COLLECTION, document_message, ensure_demo_collection
from quarry_cli.demo.corpus import (
    SOURCE_DOCSTRINGS,
    SOURCE_TOPICS,
    Document,
    build_corpus,
    clean_markup,
    topic_url,
)
from quarry_cli.ingest.sync import Progress, content_hash
from services.common.settings import ServerSettings
from services.search_tool.chunking import Chunker
from services.search_tool.client import SearchToolClient
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder
from services.search_tool.embedding.minilm import WordPieceTokenizer, load_tokenizer
from services.search_tool.server import SearchToolServer, build_search_tool_server

_ID = re.compile(r"^[A-Za-z0-9_.:/-]+$")


@pytest.fixture(scope="module")
def corpus() -> list[Document]:
    return build_corpus()


def _by_id(corpus: list[Document]) -> dict[str, Document]:
    return {d.id: d for d in corpus}


def test_corpus_is_deterministic(corpus: list[Document]) -> None:
    assert build_corpus() == corpus


def test_ids_are_unique_and_use_only_allowed_characters(corpus: list[Document]) -> None:
    ids = [d.id for d in corpus]
    assert len(ids) == len(set(ids))
    assert all(_ID.match(i) for i in ids), [i for i in ids if not _ID.match(i)][:5]


def test_corpus_is_sized_for_a_first_build_under_two_minutes(corpus: list[Document]) -> None:
    """The first build is bound by embedding: ~190k tokens took 80 s to embed on a slow day
    (~2,400 tokens/s on 2 cores), 95.7 s for the whole first start."""
    chunker = Chunker(WordPieceTokenizer())
    tokenizer = load_tokenizer()
    texts = [f"{d.title}\n{c.text}" for d in corpus for c in chunker.split(d.text)]
    tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))
    assert 150_000 <= tokens <= 200_000


def test_every_kind_of_entity_and_both_sources_are_present(corpus: list[Document]) -> None:
    kinds = Counter(d.entity_type for d in corpus)
    assert set(kinds) == {"module", "class", "function", "method", "topic"}
    assert min(kinds.values()) >= 50
    assert {d.source for d in corpus} == {SOURCE_DOCSTRINGS, SOURCE_TOPICS}


def test_every_document_has_text_title_url_timestamps_and_breadcrumbs(
    corpus: list[Document],
) -> None:
    for d in corpus:
        assert d.text.strip(), d.id
        assert d.title, d.id
        assert d.url.startswith("https://docs.python.org/3."), d.id
        assert d.created_at is not None, d.id
        assert d.created_at.tzinfo is not None, d.id
        assert d.updated_at is not None, d.id
        assert d.updated_at.tzinfo is not None, d.id
        assert d.breadcrumbs, d.id


def test_metadata_keys_have_one_type_each_across_the_corpus(corpus: list[Document]) -> None:
    types: dict[str, set[type]] = {}
    for d in corpus:
        for key, value in d.metadata.items():
            types.setdefault(key, set()).add(type(value))
    assert types == {
        "module": {str},
        "package": {str},
        "python_version": {str},
        "is_private": {bool},
        "is_async": {bool},
        "deprecated": {bool},
        "line_count": {int},
    }


def test_metadata_values_vary_so_filters_select_something(corpus: list[Document]) -> None:
    private = Counter(d.metadata["is_private"] for d in corpus)
    asynchronous = Counter(d.metadata["is_async"] for d in corpus)
    assert private[True] > 20
    assert private[False] > 1000
    assert asynchronous[True] > 10
    assert len({d.metadata["module"] for d in corpus}) > 50


def test_temporary_directory_class_is_documented_with_its_signature(
    corpus: list[Document],
) -> None:
    doc = _by_id(corpus)["py:tempfile.TemporaryDirectory"]
    assert doc.entity_type == "class"
    assert doc.title == "tempfile.TemporaryDirectory"
    assert doc.text.startswith("tempfile.TemporaryDirectory(")
    assert "temporary directory" in doc.text
    assert (
        doc.url == "https://docs.python.org/3.11/library/tempfile.html#tempfile.TemporaryDirectory"
    )
    assert doc.metadata["module"] == "tempfile"
    assert [b.name for b in doc.breadcrumbs] == ["tempfile"]


def test_method_breadcrumbs_lead_from_package_through_module_to_class(
    corpus: list[Document],
) -> None:
    doc = _by_id(corpus)["py:concurrent.futures.Executor.map"]
    assert doc.entity_type == "method"
    assert [(b.name, b.entity_type) for b in doc.breadcrumbs] == [
        ("concurrent", "package"),
        ("concurrent.futures", "module"),
        ("Executor", "class"),
    ]
    assert doc.metadata["package"] == "concurrent"


def test_package_members_are_named_by_their_public_module(corpus: list[Document]) -> None:
    by_id = _by_id(corpus)
    create_task = by_id["py:asyncio.create_task"]
    assert create_task.metadata["is_async"] is False
    assert by_id["py:asyncio.sleep"].metadata["is_async"] is True
    assert "py:os.path.join" in by_id


def test_private_members_are_marked_private(corpus: list[Document]) -> None:
    private = [d for d in corpus if d.metadata["is_private"]]
    assert all(any(part.startswith("_") for part in d.id.split(".")) for d in private)


def test_pydoc_topics_are_language_reference_documents(corpus: list[Document]) -> None:
    topic = _by_id(corpus)["topic:assignment"]
    assert topic.source == SOURCE_TOPICS
    assert topic.entity_type == "topic"
    assert topic.title == "Assignment statements"
    assert topic.metadata["module"] == ""


def test_wire_form_keeps_every_field_and_metadata_type(corpus: list[Document]) -> None:
    doc = _by_id(corpus)["py:tempfile.TemporaryDirectory"]
    message = document_message(doc)
    assert (message.id, message.title, message.text) == (doc.id, doc.title, doc.text)
    assert (message.source, message.entity_type, message.url) == (
        doc.source,
        doc.entity_type,
        doc.url,
    )
    assert doc.created_at is not None
    assert message.created_at.ToDatetime().replace(tzinfo=doc.created_at.tzinfo) == doc.created_at
    assert [b.id for b in message.breadcrumbs] == [b.id for b in doc.breadcrumbs]
    assert message.metadata["is_private"].WhichOneof("kind") == "bool_value"
    assert message.metadata["line_count"].int_value == doc.metadata["line_count"]
    assert message.metadata["module"].string_value == "tempfile"


# --- building the demo collection through a real search tool --------------------------------------

SMALL_MODULES = ("tempfile", "shutil", "glob")
QUESTION = "How do I create a temporary directory that is removed automatically?"


@pytest.fixture
async def demo_server(tmp_path: Path, embedder: Embedder) -> AsyncIterator[SearchToolServer]:
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5), data_dir=tmp_path / "data", log_format="text"
    )
    built = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await built.start()
    yield built
    await built.stop(0)


@pytest.mark.slow
async def test_demo_build_ingests_once_then_answers_the_temporary_directory_question(
    demo_server: SearchToolServer,
) -> None:
    small = build_corpus(SMALL_MODULES, include_topics=False)
    reports: list[Progress] = []
    first = await ensure_demo_collection(
        demo_server.address, corpus=small, batch_size=16, progress=reports.append
    )
    assert first.built
    assert first.documents == len(small)
    assert first.chunks >= len(small)
    assert (reports[-1].files_done, reports[-1].files_total) == (len(small), len(small))
    assert reports[-1].chunks == first.chunks
    assert [r.chunks for r in reports] == sorted(r.chunks for r in reports)

    again = await ensure_demo_collection(demo_server.address, corpus=small)
    assert not again.built
    assert again.documents == len(small)

    async with grpc.aio.insecure_channel(demo_server.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        for strategy in (
            search_pb2.RETRIEVAL_STRATEGY_HYBRID,
            search_pb2.RETRIEVAL_STRATEGY_SEMANTIC,
        ):
            response = await stub.Search(
                search_tool_pb2.SearchRequest(
                    collection=DEFAULT_COLLECTION,
                    query=search_pb2.SearchQuery(primary=QUESTION),
                    strategy=strategy,
                    limit=3,
                )
            )
            top = [r.chunk.document_id for r in response.results]
            assert "py:tempfile.TemporaryDirectory" in top, (strategy, top)


@pytest.mark.slow
async def test_demo_build_completes_a_partially_built_collection(
    demo_server: SearchToolServer,
) -> None:
    small = build_corpus(SMALL_MODULES, include_topics=False)
    partial = await ensure_demo_collection(demo_server.address, corpus=small[:10])
    assert partial.documents == 10
    finished = await ensure_demo_collection(demo_server.address, corpus=small)
    assert finished.built
    assert finished.documents == len(small)


@pytest.mark.slow
async def test_demo_rebuild_sends_only_a_changed_document_and_deletes_one_the_corpus_lost(
    demo_server: SearchToolServer,
) -> None:
    """The demo goes through the ingest pipeline: a new Python version that changes one
    docstring and drops one function costs one upsert and one delete, not a rebuild."""
    small = build_corpus(SMALL_MODULES, include_topics=False)
    await ensure_demo_collection(demo_server.address, corpus=small)
    changed = replace(small[0], text=small[0].text + "\n\nA sentence a newer Python added.")
    newer = [changed, *small[1:-1]]
    reports: list[Progress] = []
    again = await ensure_demo_collection(demo_server.address, corpus=newer, progress=reports.append)
    assert again.built
    assert again.documents == len(small) - 1
    assert reports[-1].chunks == len(Chunker(WordPieceTokenizer()).split(changed.text))
    async with SearchToolClient(demo_server.address) as client:
        stored = {d.id: d for d in await client.list_documents(DEFAULT_COLLECTION)}
    assert small[-1].id not in stored
    assert stored[changed.id].metadata["content_sha256"].string_value == content_hash(
        document_message(changed)
    )
    unchanged = await ensure_demo_collection(demo_server.address, corpus=newer)
    assert not unchanged.built


def test_reference_topics_are_cut_at_a_paragraph_break_within_the_limit(
    corpus: list[Document],
) -> None:
    from quarry_cli.demo.corpus import MAX_TOPIC_CHARS, SOURCE_TOPICS

    topics = [d for d in corpus if d.source == SOURCE_TOPICS]
    assert all(len(d.text) <= MAX_TOPIC_CHARS for d in topics)
    assert any(len(d.text) > MAX_TOPIC_CHARS // 2 for d in topics)
    assert all(not d.text.endswith(("\n", " ")) for d in topics)


def test_topic_documents_link_to_their_reference_section(corpus: list[Document]) -> None:
    topics = [d for d in corpus if d.source == SOURCE_TOPICS]
    assert topics
    assert all("search.html" not in d.url for d in topics)
    by_id = _by_id(corpus)
    assert by_id["topic:assignment"].url.endswith("/reference/simple_stmts.html#assignment")
    assert by_id["topic:typesseq"].url.endswith("/library/stdtypes.html#typesseq")
    assert topic_url("no-such-label").endswith("/reference/index.html")


def test_the_corpus_carries_no_markup_leftovers(corpus: list[Document]) -> None:
    texts = [d.text for d in corpus]
    assert not [t for t in texts if re.search(r":[a-z]+:`", t)]
    assert not [t for t in texts if "::=" in t]
    assert not [t for t in texts if " at 0x" in t]
    assert "copy_function=copy2" in _by_id(corpus)["py:shutil.copytree"].text


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Use :func:`~os.path.join` here.", "Use join here."),
        ("See :ref:`buffer protocol <bufferobjects>`.", "See buffer protocol."),
        (
            ":exc:`ValueError` and :py:data:`socket.SO_REUSEPORT`",
            "ValueError and socket.SO_REUSEPORT",
        ),
        ("f(copy=<function copy2 at 0x7f8e12345678>)", "f(copy=copy2)"),
        ("pop(default=<object object at 0x7ff4dcda4160>)", "pop(default=<object>)"),
        ("A:\n\n   x ::= a\n        | b\n\nThen text.", "A:\n\nThen text."),
    ],
)
def test_markup_is_cleaned_at_build_time(raw: str, clean: str) -> None:
    assert clean_markup(raw) == clean
