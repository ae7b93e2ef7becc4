"""Degraded coverage from Vespa reaches the gRPC caller: a search tool built exactly as
`python -m services.search_tool` builds it, on the Vespa engine, whose Vespa is a local recording
server answering with the documented soft-timeout sample (`test_http_contract.DEGRADED`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.settings import ServerSettings
from services.search_tool.config import EngineSettings, SearchToolSettings, VespaSettings
from services.search_tool.server import build_search_tool_server
from tests.search_tool.engine_fixtures import DIMENSIONS, vector_for
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply
from tests.search_tool.vespa.test_http_contract import DEGRADED, FULL, _hit, _root, _routed


class _FixtureEmbedder:
    """Vectors of the test fixtures (the collection was made with `test-model`, 8-d)."""

    model_name = "test-model"
    dimensions = DIMENSIONS
    tokenizer: Any = None
    scripts = None

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([vector_for(t) for t in texts])


async def _search_through_grpc(coverage: dict[str, Any]) -> search_tool_pb2.SearchResponse:
    def answer(request: Recorded) -> Reply:
        return _root([_hit("alpha__chunk_0", 0.5)], 1, coverage)

    vespa = RecordingServer(_routed(answer))
    await vespa.start()
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0),
        engine=EngineSettings(kind="vespa", vespa=VespaSettings(url=vespa.url)),
        log_format="text",
    )
    server = build_search_tool_server(settings, embedder_factory=_FixtureEmbedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            response: search_tool_pb2.SearchResponse = await stub.Search(
                search_tool_pb2.SearchRequest(
                    collection="fixture",
                    query=search_pb2.SearchQuery(primary="quarterly report"),
                    strategy=search_pb2.RETRIEVAL_STRATEGY_SEMANTIC,
                ),
                timeout=10,
            )
            return response
    finally:
        await server.stop(0)
        await vespa.close()


async def test_a_soft_timeout_in_vespa_reaches_the_caller_as_degraded_coverage() -> None:
    response = await _search_through_grpc(DEGRADED)
    assert [r.chunk.id for r in response.results] == ["alpha__chunk_0"]
    assert response.coverage.degraded
    assert response.coverage.percent == 99.0
    assert response.coverage.documents_searched == 990
    assert list(response.coverage.reasons) == [search_tool_pb2.COVERAGE_DEGRADATION_TIMEOUT]


async def test_a_full_vespa_answer_reaches_the_caller_as_full_coverage() -> None:
    response = await _search_through_grpc(FULL)
    assert not response.coverage.degraded
    assert response.coverage.percent == 100.0
    assert list(response.coverage.reasons) == []
