"""How many Vespa requests each search tool RPC costs: a search tool built as `python -m
services.search_tool` builds it, on the Vespa engine, its Vespa a recording server that counts
what arrives (readiness probes left out). Each RPC is called twice: `cold` is the first call of a
process that has made the calls listed before it, `warm` the same call again within
`facts_ttl_s` (the registry entry, the filter's count and GetCollection's answer cached). The
README's table is this test's `EXPECTED`.

The figures count requests, not their cost: a count query over a large collection is the
expensive one, which is why it is cached."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
from google.protobuf import struct_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.settings import ServerSettings
from services.search_tool.config import EngineSettings, SearchToolSettings, VespaSettings
from services.search_tool.engine.vespa.package import package_profile
from services.search_tool.server import build_search_tool_server
from tests.search_tool.engine_fixtures import DIMENSIONS, vector_for
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply
from tests.search_tool.vespa.test_http_contract import (
    REGISTRY_FIELDS,
    REGISTRY_PATH,
    _grouped,
    _hit,
    _root,
)

EXPECTED = {
    "Search HYBRID": {"cold": 4, "warm": 2},
    "Search HYBRID, 3 phrasings": {"cold": 2, "warm": 2},
    "Search SEMANTIC": {"cold": 1, "warm": 1},
    "Search KEYWORD": {"cold": 2, "warm": 2},
    "Search HYBRID, filtered": {"cold": 3, "warm": 2},
    "GetCollection": {"cold": 3, "warm": 0},
}
"""Vespa requests per RPC, the calls made in this order. The first HYBRID = registry get + dense
+ keyword + the (empty) filter's count; later searches find the registry and that count cached,
so only a new filter costs its count again; KEYWORD's count depends on the words, never cached."""


class _FixtureEmbedder:
    model_name = "test-model"
    dimensions = DIMENSIONS
    tokenizer: Any = None
    scripts = None

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([vector_for(t) for t in texts])


def _respond(request: Recorded) -> Reply:
    if request.method == "GET" and request.path == REGISTRY_PATH:
        return Reply(200, {"pathId": request.path, "fields": REGISTRY_FIELDS})
    body = request.json()
    yql = body.get("yql", "")
    if "group(source)" in yql:
        return _grouped({"source": {"wiki": 1}, "entity_type": {"page": 1}}, 1)
    if "min(created_at)" in yql:
        return _grouped({}, 0)
    if body.get("ranking") in ("semantic", "keyword"):
        return _root([_hit("alpha__chunk_0", 0.5, cosines=(0.5, 0.4, 0.3), bm25=1.0)], 1)
    return _root([], 1)


@pytest.fixture
async def stub() -> AsyncIterator[tuple[Any, RecordingServer]]:
    vespa = RecordingServer(_respond)
    await vespa.start()
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0),
        engine=EngineSettings(
            kind="vespa", vespa=VespaSettings(url=vespa.url), readiness_interval_s=3600
        ),
        log_format="text",
    )
    server = build_search_tool_server(settings, embedder_factory=_FixtureEmbedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield search_tool_pb2_grpc.SearchToolServiceStub(channel), vespa
    finally:
        await server.stop(0)
        await vespa.close()


def _counted(vespa: RecordingServer) -> int:
    return sum(
        1
        for r in vespa.requests
        if not (r.path == "/search/" and r.json().get("ranking") == package_profile())
    )


def _search(
    strategy: search_pb2.RetrievalStrategy, variations: Sequence[str] = (), **fields: Any
) -> Any:
    return search_tool_pb2.SearchRequest(
        collection="fixture",
        query=search_pb2.SearchQuery(primary="tide words", variations=list(variations)),
        strategy=strategy,
        **fields,
    )


async def test_each_rpc_costs_the_vespa_requests_the_readme_states(
    stub: tuple[Any, RecordingServer],
) -> None:
    client, vespa = stub
    filtered = search_pb2.Filter(
        groups=[
            search_pb2.FilterGroup(
                conditions=[
                    search_pb2.FilterCondition(
                        field="source",
                        operator=search_pb2.FILTER_OPERATOR_EQUALS,
                        value=struct_pb2.Value(string_value="wiki"),
                    )
                ]
            )
        ]
    )
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "Search HYBRID": lambda: client.Search(_search(search_pb2.RETRIEVAL_STRATEGY_HYBRID)),
        "Search HYBRID, 3 phrasings": lambda: client.Search(
            _search(search_pb2.RETRIEVAL_STRATEGY_HYBRID, ["tides", "neap tides"])
        ),
        "Search SEMANTIC": lambda: client.Search(_search(search_pb2.RETRIEVAL_STRATEGY_SEMANTIC)),
        "Search KEYWORD": lambda: client.Search(_search(search_pb2.RETRIEVAL_STRATEGY_KEYWORD)),
        "Search HYBRID, filtered": lambda: client.Search(
            _search(search_pb2.RETRIEVAL_STRATEGY_HYBRID, filter=filtered)
        ),
        "GetCollection": lambda: client.GetCollection(
            search_tool_pb2.GetCollectionRequest(collection="fixture")
        ),
    }
    measured: dict[str, dict[str, int]] = {}
    for name, call in calls.items():
        counts = {}
        for phase in ("cold", "warm"):
            before = _counted(vespa)
            await call()
            counts[phase] = _counted(vespa) - before
        measured[name] = counts
    print(json.dumps(measured, indent=1))  # the README's table comes from here
    assert measured == EXPECTED
