"""Chinese, Japanese and Korean documents are found by the words inside their sentences through
the search tool's API (`cjk.bigrams` on the stored keyword text and on the query); a document
stored before that is rewritten on its next upsert, and no other document is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
import lancedb
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.search_tool.config import SearchToolSettings
from services.search_tool.convert import document_from_proto
from services.search_tool.embedding import Embedder
from services.search_tool.ingest import content_fingerprint
from services.search_tool.server import build_search_tool_server
from tests.search_tool.grpc_helpers import document, search

KEYWORD = search_pb2.RETRIEVAL_STRATEGY_KEYWORD
HYBRID = search_pb2.RETRIEVAL_STRATEGY_HYBRID
TOKYO = document("tokyo", "東京は日本の首都であり、世界最大の都市圏の一つです。", title="東京")
BEIJING = document(
    "beijing", "北京是中华人民共和国的首都，也是全国的政治和文化中心。", title="北京"
)
TIDES = document(
    "tides", "Tides rise and fall twice a day along the northern coast.", title="Tides"
)


@asynccontextmanager
async def _service(settings: SearchToolSettings, embedder: Embedder) -> AsyncIterator[Any]:
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield search_tool_pb2_grpc.SearchToolServiceStub(channel)
    finally:
        await server.stop(0)


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
    async with _service(settings, embedder) as stub:
        await _upsert(stub, TOKYO, BEIJING, TIDES)
        assert (await _found(stub, "都市圏"))[:1] == ["tokyo"]
        assert (await _found(stub, "政治和文化"))[:1] == ["beijing"]
        assert (await _found(stub, "日本の首都はどこ？", HYBRID))[:1] == ["tokyo"]
        assert await _found(stub, "tides northern coast") == ["tides"]


async def test_a_cjk_document_stored_before_pairs_is_rewritten_on_its_next_upsert_alone(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with _service(settings, embedder) as stub:
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
    async with _service(settings, embedder) as stub:
        assert await _found(stub, "都市圏") == []  # stored whole: the word is not found
        again = await _upsert(stub, TOKYO, TIDES)
        assert (again.documents_upserted, again.chunks_upserted) == (2, 1)  # the CJK one alone
        assert (await _found(stub, "都市圏"))[:1] == ["tokyo"]
        assert (await _upsert(stub, TOKYO, TIDES)).chunks_upserted == 0
