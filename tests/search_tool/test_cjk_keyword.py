"""Chinese, Japanese and Korean documents are found by the words inside their sentences through
the search tool's API (`keyword_form` on the stored keyword text and on the query); a document
stored before that is rewritten on its next upsert, and no other document is. A HYBRID query the
embedder cannot read (MiniLM: not in the Latin script) is ranked by BM25 first."""

from __future__ import annotations

from typing import Any

import lancedb
import numpy as np
import pytest
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.search_tool.config import SearchToolSettings
from services.search_tool.convert import document_from_proto
from services.search_tool.embedding import Embedder
from services.search_tool.ingest import content_fingerprint
from tests.search_tool.grpc_helpers import document, search, serving

KEYWORD = search_pb2.RETRIEVAL_STRATEGY_KEYWORD
HYBRID = search_pb2.RETRIEVAL_STRATEGY_HYBRID
TOKYO = document("tokyo", "東京は日本の首都であり、世界最大の都市圏の一つです。", title="東京")
BEIJING = document(
    "beijing", "北京是中华人民共和国的首都，也是全国的政治和文化中心。", title="北京"
)
TIDES = document(
    "tides", "Tides rise and fall twice a day along the northern coast.", title="Tides"
)


async def _upsert(stub: Any, *documents: Any) -> Any:
    return await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection="c", documents=list(documents))
    )


async def _found(stub: Any, text: str, strategy: Any = KEYWORD) -> list[str]:
    reply = await stub.Search(search("c", text, strategy, limit=5))
    return [r.chunk.document_id for r in reply.results]


async def test_a_word_inside_a_japanese_or_chinese_sentence_is_found_by_keyword_and_hybrid(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with serving(settings, embedder) as stub:
        await _upsert(stub, TOKYO, BEIJING, TIDES)
        assert (await _found(stub, "都市圏"))[:1] == ["tokyo"]
        assert (await _found(stub, "政治和文化"))[:1] == ["beijing"]
        assert (await _found(stub, "日本の首都はどこ？", HYBRID))[:1] == ["tokyo"]
        assert await _found(stub, "tides northern coast") == ["tides"]


async def test_a_cjk_document_stored_before_pairs_is_rewritten_on_its_next_upsert_alone(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with serving(settings, embedder) as stub:
        await _upsert(stub, TOKYO, TIDES)
    # as a search tool before character pairs stored it: the text whole, the old fingerprint
    recipe = f"{embedder.model_name}/{settings.chunking.recipe}"
    table = lancedb.connect(str(settings.data_dir)).open_table("c")
    for message in (TOKYO,):
        old = content_fingerprint(document_from_proto(message, "documents[0]"), recipe)
        table.update(
            where=f"document_id = '{message.id}'",
            values={"content_hash": old, "search_text": f"{message.title}\n{message.text}"},
        )
    async with serving(settings, embedder) as stub:
        assert await _found(stub, "都市圏") == []  # stored whole: the word is not found
        again = await _upsert(stub, TOKYO, TIDES)
        assert (again.documents_upserted, again.chunks_upserted) == (2, 1)  # the CJK one alone
        assert (await _found(stub, "都市圏"))[:1] == ["tokyo"]
        assert (await _upsert(stub, TOKYO, TIDES)).chunks_upserted == 0


def _unit(seed: int, dimensions: int) -> Any:
    vector = np.random.default_rng(seed).standard_normal(dimensions).astype(np.float32)
    return vector / np.linalg.norm(vector)


class _MisleadingEmbedder:
    """The real tokenizer; vectors that put the query next to the document it does not answer
    (`SEA`), as an English model's vectors of text in another script can."""

    def __init__(self, inner: Embedder, scripts: frozenset[str] | None) -> None:
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self.tokenizer = inner.tokenizer
        self.scripts = scripts

    async def embed(self, texts: Any) -> Any:
        near = _unit(1, self.dimensions)
        return np.stack(
            [near if "海" in t or t in QUERIES else _unit(2, self.dimensions) for t in texts]
        )


CITY = document("city", "東京は世界最大の都市圏の一つで、人口が多い。")
SEA = document("sea", "この町は海の近くにあり、漁業が盛んです。")
QUERIES = {"都市圏の人口", "population of the city"}
ENGLISH_CITY = document("city-en", "The city has the largest population of the region.")


@pytest.mark.parametrize(
    ("scripts", "query", "first"),
    [
        (frozenset({"Latin"}), "都市圏の人口", "city"),  # not read: BM25 decides
        (None, "都市圏の人口", "sea"),  # an embedder of every script: the vectors weigh 0.7
        (frozenset({"Latin"}), "population of the city", "sea"),  # read: the vectors weigh 0.7
    ],
)
async def test_hybrid_weighs_the_vectors_of_a_query_only_as_much_as_the_embedder_reads_it(
    settings: SearchToolSettings,
    embedder: Embedder,
    scripts: frozenset[str] | None,
    query: str,
    first: str,
) -> None:
    async with serving(settings, _MisleadingEmbedder(embedder, scripts)) as stub:
        await _upsert(stub, CITY, SEA, ENGLISH_CITY)
        reply = await stub.Search(search("c", query, HYBRID, limit=3))
    assert reply.results[0].chunk.document_id == first
