"""Every size a request can carry has a limit, and beyond it the search tool refuses at once with
INVALID_ARGUMENT naming the field and the limit, writing nothing. The limits are set small here so
the requests stay small; the defaults are documented in the README."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeAlias

import grpc
import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.common.settings import ServerSettings
from services.search_tool.config import SearchToolSettings
from services.search_tool.limits import DOCUMENT_TOO_LARGE, RequestLimits
from tests.search_tool.grpc_helpers import Op, condition, document, fails, fields_of, search, where

Stub: TypeAlias = Any
INVALID = grpc.StatusCode.INVALID_ARGUMENT
LIMITS = RequestLimits(
    query_chars=50,
    title_chars=20,
    label_chars=10,
    url_chars=30,
    breadcrumbs=2,
    metadata_keys=3,
    metadata_string_chars=15,
    collection_metadata_keys=4,
    filter_groups=3,
    filter_conditions=2,
    filter_list_values=4,
    filter_string_chars=12,
    embed_text_chars=40,
    embed_total_chars=80,
    embed_total_word_pieces=50,
    upsert_total_bytes=100,
    upsert_total_word_pieces=40,
)


@pytest.fixture
def settings(tmp_path: Path) -> SearchToolSettings:
    return SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5),
        data_dir=tmp_path / "data",
        limits=LIMITS,
        log_format="text",
    )


@pytest.fixture
async def loaded(stub: Stub) -> Stub:
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection="docs",
            documents=[document("a", "alpha text", source="s1", metadata={"k0": "v", "k1": 1})],
        )
    )
    return stub


async def _chunks(stub: Stub) -> int:
    reply = await stub.GetCollection(search_tool_pb2.GetCollectionRequest(collection="docs"))
    return int(reply.collection.chunk_count)


def _doc(**fields: Any) -> search_tool_pb2.Document:
    metadata = fields.pop("metadata", None)
    return document("b", "beta text", metadata=metadata, **fields)


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        (_doc(title="t" * 21), "documents[0].title", "21 characters; the limit is 20"),
        (_doc(source="s" * 11), "documents[0].source", "the limit is 10"),
        (_doc(entity_type="e" * 11), "documents[0].entity_type", "the limit is 10"),
        (_doc(url="https://x/" + "u" * 30), "documents[0].url", "the limit is 30"),
        (
            _doc(breadcrumbs=[search_pb2.Breadcrumb(id=str(i), name="n") for i in range(3)]),
            "documents[0].breadcrumbs",
            "3 breadcrumbs; the limit is 2",
        ),
        (
            _doc(breadcrumbs=[search_pb2.Breadcrumb(id="b", name="n" * 11)]),
            "documents[0].breadcrumbs[0].name",
            "the limit is 10",
        ),
        (
            _doc(metadata={"k0": "v", "k1": 2, "k2": 3, "k3": 4}),
            "documents[0].metadata",
            "4 metadata keys; the limit is 3",
        ),
        (_doc(metadata={"k0": "v" * 16}), 'documents[0].metadata["k0"]', "the limit is 15"),
        (
            _doc(metadata={"n1": 1, "n2": 2, "n3": 3}),
            "documents",
            "the collection would have 5 metadata keys; the limit is 4",
        ),
    ],
)
async def test_a_document_part_over_its_limit_is_refused_and_nothing_is_written(
    loaded: Stub, bad: search_tool_pb2.Document, field: str, words: str
) -> None:
    request = search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=[bad])
    details = await fails(loaded.UpsertDocuments(request), INVALID)
    assert fields_of(details) == [field]
    assert words in details.violations[0].description
    assert await _chunks(loaded) == 1


def _eq(value: Any) -> search_pb2.FilterCondition:
    return condition("source", Op.FILTER_OPERATOR_EQUALS, value)


@pytest.mark.parametrize(
    ("request_fields", "field", "words"),
    [
        ({"primary": "q" * 51}, "query.primary", "51 characters; the limit is 50"),
        ({"variations": ["ok", "v" * 51]}, "query.variations[1]", "the limit is 50"),
        ({"keyword_expansion": "k" * 51}, "query.keyword_expansion", "the limit is 50"),
        ({"filter": where(*[[_eq("s")]] * 4)}, "filter.groups", "4 groups; the limit is 3"),
        (
            {"caller_filter": where(*[[_eq("s")]] * 4)},
            "caller_filter.groups",
            "4 groups; the limit is 3",
        ),
        (
            {"filter": where([_eq("a"), _eq("b"), _eq("c")])},
            "filter.groups[0].conditions",
            "3 conditions; the limit is 2",
        ),
        (
            {"filter": where([condition("source", Op.FILTER_OPERATOR_IN, list("abcde"))])},
            "filter.groups[0].conditions[0].value",
            "5 values; the limit is 4",
        ),
        (
            {"filter": where([_eq("s" * 13)])},
            "filter.groups[0].conditions[0].value",
            "13 characters; the limit is 12",
        ),
        (
            {"filter": where([condition("source", Op.FILTER_OPERATOR_IN, ["ok", "s" * 13])])},
            "filter.groups[0].conditions[0].value",
            "13 characters; the limit is 12",
        ),
    ],
)
async def test_a_search_part_over_its_limit_is_refused_naming_it(
    loaded: Stub, request_fields: dict[str, Any], field: str, words: str
) -> None:
    primary = request_fields.pop("primary", "alpha")
    details = await fails(loaded.Search(search("docs", primary, **request_fields)), INVALID)
    assert fields_of(details) == [field]
    assert words in details.violations[0].description


async def test_parts_at_their_limit_are_accepted(loaded: Stub) -> None:
    edge = _doc(
        title="t" * 20,
        source="s" * 10,
        url="u" * 30,
        breadcrumbs=[search_pb2.Breadcrumb(id="b" * 10, name="n" * 10)] * 2,
        metadata={"k0": "v" * 15, "k1": 2, "k2": 3},
    )
    await loaded.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=[edge])
    )
    reply = await loaded.Search(
        search(
            "docs",
            "q" * 50,
            filter=where(*[[_eq("s" * 10), _eq("s" * 10)]] * 3),
            caller_filter=where([condition("source", Op.FILTER_OPERATOR_IN, ["s" * 10] * 4)]),
        )
    )
    assert [r.chunk.document_id for r in reply.results] == ["b"]


async def test_an_embed_text_over_its_limit_is_refused(stub: Stub) -> None:
    request = search_tool_pb2.EmbedRequest(texts=["fine", "x" * 41])
    details = await fails(stub.Embed(request), INVALID)
    assert fields_of(details) == ["texts[1]"]
    assert "the limit is 40" in details.violations[0].description


async def test_embed_texts_over_the_total_are_refused_naming_the_setting(stub: Stub) -> None:
    """256 texts of 20,000 characters, each within its limit, ran past two minutes."""
    request = search_tool_pb2.EmbedRequest(texts=["x" * 40] * 2 + ["y"])
    details = await fails(stub.Embed(request), INVALID)
    assert fields_of(details) == ["texts"]
    assert "search_tool.limits.embed_total_chars is 80" in details.violations[0].description
    reply = await stub.Embed(search_tool_pb2.EmbedRequest(texts=["x" * 40] * 2))
    assert len(reply.embeddings) == 2


async def test_upsert_texts_over_the_total_are_refused_naming_the_setting(stub: Stub) -> None:
    documents = [document(f"d{n}", "t" * 60) for n in range(2)]
    details = await fails(
        stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=documents)
        ),
        INVALID,
    )
    assert fields_of(details) == ["documents"]
    assert "search_tool.limits.upsert_total_bytes is 100" in details.violations[0].description
    await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=documents[:1])
    )


async def test_upsert_over_the_word_piece_total_is_refused_naming_the_setting_and_writes_nothing(
    stub: Stub,
) -> None:
    """The model is nearly all of an upsert's time: one 1,000,000-byte document took 386 s at
    load 15. Three documents of 11 CJK characters (33 bytes, 11 word pieces and 2 markers each)
    are 39 word pieces; a fourth of one letter (3 with its markers) passes 40 while the request
    stays within the 100 bytes."""
    cjk = "漢字漢字漢字漢字漢字漢"
    documents = [document(f"d{n}", cjk) for n in range(3)] + [document("d3", "x")]
    request = search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=documents)
    details = await fails(stub.UpsertDocuments(request), INVALID)
    assert fields_of(details) == ["documents"]
    description = details.violations[0].description
    assert "42 word pieces for the model to read in all" in description
    assert "search_tool.limits.upsert_total_word_pieces is 40" in description
    listed = await stub.ListCollections(search_tool_pb2.ListCollectionsRequest())
    assert "docs" not in [c.name for c in listed.collections]  # nothing written, not even created
    reply = await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=documents[:3])
    )
    assert reply.documents_upserted == 3


async def test_one_document_over_the_word_piece_total_is_refused_naming_its_text(
    stub: Stub,
) -> None:
    """Punctuation is a word piece per character: 99 bytes are 99 word pieces. The field named
    is the document's text, so a client knows to split that document (the CLI does)."""
    dense = document("dense", "a." * 49)
    request = search_tool_pb2.UpsertDocumentsRequest(
        collection="docs", documents=[document("ok", "x"), dense]
    )
    details = await fails(stub.UpsertDocuments(request), INVALID)
    assert fields_of(details) == ["documents[1].text"]
    assert "search_tool.limits.upsert_total_word_pieces is 40" in details.violations[0].description
    assert "split the document" in details.violations[0].description
    assert details.reason == DOCUMENT_TOO_LARGE


async def test_a_title_counts_toward_the_word_pieces_once_per_chunk(stub: Stub) -> None:
    """The model reads the title with every chunk: a document within the total alone is
    refused once a title makes its chunks longer than the total."""
    text = "漢字" * 9 + "漢"  # 19 word pieces and 2 markers
    ok = search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=[document("t", text)])
    await stub.UpsertDocuments(ok)
    titled = document("t", text, title="漢字" * 10)  # 20 more
    request = search_tool_pb2.UpsertDocumentsRequest(collection="docs", documents=[titled])
    details = await fails(stub.UpsertDocuments(request), INVALID)
    assert fields_of(details) == ["documents[0].text"]
    assert "41 word pieces" in details.violations[0].description


async def test_embed_texts_over_the_word_piece_total_are_refused_naming_the_setting(
    stub: Stub,
) -> None:
    """A CJK character is a word piece: 62 texts of 256 took the model 39 s at load 15."""
    cjk = "漢字" * 5  # 10 characters, 10 word pieces (+2 markers)
    details = await fails(stub.Embed(search_tool_pb2.EmbedRequest(texts=[cjk] * 5)), INVALID)
    assert fields_of(details) == ["texts"]
    assert "60 word pieces" in details.violations[0].description
    assert "search_tool.limits.embed_total_word_pieces is 50" in details.violations[0].description
    reply = await stub.Embed(search_tool_pb2.EmbedRequest(texts=[cjk] * 4))
    assert len(reply.embeddings) == 4
