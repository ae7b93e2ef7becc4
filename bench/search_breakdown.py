"""Where a search's milliseconds go: each stage of Quarry's search path timed on its own, per query,
interleaved (LanceDB engine).

    python bench/search_breakdown.py [--out bench/results/search_breakdown.json] [--queries N]
    python bench/search_breakdown.py --latency-collection [--queries N]

Default: the SciFact collection `make eval` builds (12,095 chunks, no filter; query vectors from
the on-disk cache, as `bench/peers/search.py`). `--latency-collection`: the 100,000-chunk
collection `bench/search_latency.py` builds (run it once first), its filter
(`source = "pubmed" AND metadata.year >= 2015`) and MiniLM embedding every query, as there.

For each query every stage runs once back to back, the order rotating per query (a busy shared
machine's drift hits every stage alike). HYBRID stages (limit 10):

* `grpc`: the whole `Search` RPC through an in-process server (client and server in one process).
* `service`: `SearchService.search` in process (validation, filter, query embedding, the engine's
  search) — `grpc` minus this is the gRPC hop and protobuf conversion.
* `embed` (`--latency-collection` only): the query's embedding alone; and
  `service_embedding_first`: `service` with the engine hiding `EmbeddingOverlap` (the query
  embedded before the engine starts) — `service` against it is what the overlap saves.
* `engine`: `LanceDBEngine.search` with a ready `EngineQuery`: from memory, as the collection is
  held by then (every stage is warmed up for `WARMUP_S` first, `engine/lancedb/held.py`).
* `engine_lancedb`: the same search on LanceDB's path (what a collection larger than
  `engine.vectors_in_memory` gets, or one just written), whose own steps follow.
* `lancedb_hybrid` (SciFact only): LanceDB's own hybrid query, the peer of `bench/peers/search.py`.
* LanceDB's path's steps, each alone, exactly as `engine/lancedb/search.py` runs them: `dense`
  (dense candidates, filter count beside), `keyword` (keyword candidates with their vectors;
  beside a flat dense scan their chunks too), `completion` (the keyword-only candidates' cosines
  from the read vectors; a dense-only candidate's BM25 is the fusion's bound), `fuse` (Python),
  `chunks` (the page's chunks the ranking did not read, taken by address). That path's critical
  path is max(dense, keyword) + completion + fuse + chunks.

KEYWORD (SciFact only): `grpc`, `service`, `engine`, `engine_lancedb`, `keyword` (LanceDB's one
keyword query, ranked to the count cap: the page and `total_count`), `keyword_page_only` (the same
query to the page only: what the count costs) and `chunks`.

Prints one JSON object: p50 per stage (ms) and the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import grpc
import numpy as np
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import search_latency
from bench.eval_scifact import index_everything
from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    emit,
    load_scifact,
    machine,
    note,
    percentile,
    warm_up,
)
from bench.harness import settings_for as search_settings
from bench.scifact_collection import (
    COLLECTION,
    HASHED_DATA_DIR,
    build_collection,
    cached_embedder,
    hashed_embedder,
)
from services.search_tool.config import ChunkingSettings
from services.search_tool.convert import filter_from_proto, strategy_from_proto
from services.search_tool.embedding.base import Embedder
from services.search_tool.embedding.minilm import MiniLmEmbedder
from services.search_tool.engine.base import EngineQuery, Fusion, SearchEngine, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb.retrieval import keyword_candidates
from services.search_tool.engine.lancedb.search import _TableSearch
from services.search_tool.filters import FilterExpression, validate_filter
from services.search_tool.fusion import fuse
from services.search_tool.server import build_search_tool_server
from services.search_tool.service import SearchRequest, SearchService

LIMIT = 10
WARMUP = 10
WARMUP_S = 15.0
"""Searches of each engine before the timed ones (`harness.warm_up`): it holds the collection in
memory by then (`engine/lancedb/held.py`), as for any caller after the first searches."""
FILTER_TEXT = 'source = "pubmed" AND metadata.year >= 2015'
"""`bench/search_latency.py`'s filter (`hybrid_request`), for the record."""

Stage = Callable[[str], Awaitable[Any]]


async def timed(stages: dict[str, Stage], texts: list[str]) -> dict[str, float]:
    """p50 (ms) of each stage, the stages' order rotating per query."""
    names = list(stages)
    for text in texts[:WARMUP]:
        for name in names:
            await stages[name](text)
    times: dict[str, list[float]] = {name: [] for name in names}
    for n, text in enumerate(texts):
        for name in names[n % len(names) :] + names[: n % len(names)]:
            started = time.perf_counter()
            await stages[name](text)
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: round(percentile(t, 50), 2) for name, t in times.items()}


class SearchPath:
    """The stages of one collection's search path, over prepared per-query inputs."""

    def __init__(
        self,
        engine: LanceDBEngine,
        service: SearchService,
        stub: Any,
        collection: str,
        vectors: dict[str, Any],
        fusion: Fusion,
        wire_filter: search_pb2.Filter | None,
        expression: FilterExpression | None,
    ) -> None:
        self.engine, self.service, self.stub = engine, service, stub
        self.collection, self.vectors, self.fusion = collection, vectors, fusion
        self.wire_filter, self.expression = wire_filter, expression
        self.prepared: dict[tuple[Strategy, str], Any] = {}

    def args(self) -> tuple[Any, ...]:
        """What a `SearchPath` over another service needs besides engine, service and stub."""
        return (
            self.collection,
            self.vectors,
            self.fusion,
            self.wire_filter,
            self.expression,
        )

    def query(self, strategy: Strategy, text: str) -> EngineQuery:
        vector = self.vectors[text]
        vectors = (
            np.zeros((0, len(vector)), dtype=np.float32)
            if strategy is Strategy.KEYWORD
            else np.asarray([vector], dtype=np.float32)
        )
        return EngineQuery(
            strategy,
            text,
            vectors,
            filter=self.expression or FilterExpression(),
            limit=LIMIT,
            fusion=self.fusion,
        )

    def grpc(self, strategy: search_pb2.RetrievalStrategy) -> Stage:
        async def call(text: str) -> Any:
            request = search_tool_pb2.SearchRequest(
                collection=self.collection,
                query=search_pb2.SearchQuery(primary=text),
                strategy=strategy,
                limit=LIMIT,
                filter=self.wire_filter,
            )
            return await self.stub.Search(request, timeout=30)

        return call

    def service_call(self, strategy: Strategy) -> Stage:
        async def call(text: str) -> Any:
            raw = filter_from_proto(self.wire_filter or search_pb2.Filter())
            request = SearchRequest(
                self.collection, text, strategy=strategy, filter=raw, limit=LIMIT
            )
            return await self.service.search(request)

        return call

    def engine_call(self, strategy: Strategy) -> Stage:
        async def call(text: str) -> Any:
            return await self.engine.search(self.collection, self.query(strategy, text))

        return call

    def lancedb_engine_call(self, strategy: Strategy) -> Stage:
        """The engine's search on LanceDB's path, the collection not held in memory."""

        async def call(text: str) -> Any:
            return await (await self.table_search(strategy, text)).run(final=True)

        return call

    async def warm(self, strategy: search_pb2.RetrievalStrategy, texts: list[str]) -> None:
        """Both engines (the server's, the bench's) hold the collection by the timed rounds."""
        for stage in (self.grpc(strategy), self.engine_call(strategy_from_proto(strategy))):
            await warm_up(stage, texts, seconds=WARMUP_S, least=WARMUP)

    async def table_search(self, strategy: Strategy, text: str) -> _TableSearch:
        engine = self.engine
        return _TableSearch(
            self.collection,
            await engine._table(self.collection),  # the bench times the engine's own steps
            self.query(strategy, text),
            engine._limits,
            engine._counts,
            lambda: engine._vectors.covered_rows(self.collection),
            held=None,  # the steps of LanceDB's path: a collection over `vectors_in_memory`
        )

    async def prepare(self, strategy: Strategy, text: str) -> Any:
        """The first round's results (and the search holding what it read), once per query."""
        key = (strategy, text)
        if key not in self.prepared:
            search = await self.table_search(strategy, text)
            (_, dense), (keyword, _) = await asyncio.gather(
                search._dense_side(), search._keyword_side()
            )
            completion = await search._completion(dense, keyword)
            fused = fuse(dense, keyword, self.fusion, completion)
            self.prepared[key] = (search, dense, keyword, completion, fused)
        return self.prepared[key]

    def steps(self, strategy: Strategy) -> dict[str, Stage]:
        async def dense(text: str) -> Any:
            return await (await self.table_search(strategy, text))._dense_side()

        async def keyword(text: str) -> Any:
            return await (await self.table_search(strategy, text))._keyword_side()

        async def completion(text: str) -> Any:
            search, d, k, _, _ = await self.prepare(strategy, text)
            return await search._completion(d, k)

        async def fusing(text: str) -> Any:
            _, d, k, c, _ = await self.prepare(strategy, text)
            return fuse(d, k, self.fusion, c)

        async def chunks(text: str) -> Any:
            search, _, _, _, fused = await self.prepare(strategy, text)
            return await search._chunks([int(f.id) for f in fused[:LIMIT]])

        stages: dict[str, Stage] = {"dense": dense, "keyword": keyword}
        if strategy is Strategy.KEYWORD:
            del stages["dense"]
        if strategy is Strategy.HYBRID:
            stages.update(completion=completion, fuse=fusing)
        return {**stages, "chunks": chunks}


async def run(data_dir: Path, count: int, *, hashed: bool = False) -> dict[str, Any]:
    """SciFact: HYBRID and KEYWORD stages, LanceDB's own hybrid beside."""
    data = load_scifact()
    embedder = hashed_embedder() if hashed else cached_embedder()
    await build_collection(data_dir, data, embedder)
    await index_everything(data_dir)  # as `bench/peers/search.py`
    texts = [data.queries[q] for q in sorted(data.queries)][:count]
    vectors = dict(zip(texts, await embedder.embed(texts), strict=True))
    settings = search_settings(data_dir)

    async def peer(path: SearchPath) -> dict[str, Stage]:
        table = await path.engine._table(COLLECTION)

        async def lancedb_hybrid(text: str) -> Any:
            query = table.query().nearest_to(np.asarray(vectors[text])).distance_type("cosine")
            return await query.nearest_to_text(text).select(["id"]).limit(LIMIT).to_arrow()

        async def keyword_page_only(text: str) -> Any:
            return await keyword_candidates(table, text, None, LIMIT, None)

        return {"lancedb_hybrid": lancedb_hybrid, "keyword_page_only": keyword_page_only}

    async with Serving(data_dir, settings, embedder, COLLECTION, vectors, None) as path:
        extra = await peer(path)
        hybrid = await _hybrid_stages(path, texts, {"lancedb_hybrid": extra["lancedb_hybrid"]})
        await path.warm(search_pb2.RETRIEVAL_STRATEGY_KEYWORD, texts)
        for text in texts:  # the per-query first rounds, outside the timing
            await path.prepare(Strategy.KEYWORD, text)
        note("KEYWORD stages")
        keyword = await timed(
            {
                "grpc": path.grpc(search_pb2.RETRIEVAL_STRATEGY_KEYWORD),
                "service": path.service_call(Strategy.KEYWORD),
                "engine": path.engine_call(Strategy.KEYWORD),
                "engine_lancedb": path.lancedb_engine_call(Strategy.KEYWORD),
                **path.steps(Strategy.KEYWORD),
                "keyword_page_only": extra["keyword_page_only"],
            },
            texts,
        )
    return {
        "benchmark": "search_breakdown",
        "data": f"SciFact collection, {len(texts)} test queries, limit {LIMIT}, interleaved"
        + ("; hashed vectors (latency only)" if hashed else ""),
        "hybrid_p50_ms": hybrid,
        "keyword_p50_ms": keyword,
        "machine": machine(),
    }


async def run_latency_collection(data_dir: Path, count: int) -> dict[str, Any]:
    """The 100k collection of `bench/search_latency.py`, its filter, MiniLM per query."""
    await search_latency.ensure_loaded(data_dir, search_latency_context())
    texts = list(load_scifact().queries.values())[:count]
    embedder = MiniLmEmbedder()
    vectors = dict(zip(texts, await embedder.embed(texts), strict=True))
    wire_filter = search_latency.hybrid_request("").filter
    async with Serving(
        data_dir,
        search_settings(data_dir),
        embedder,
        search_latency.COLLECTION,
        vectors,
        wire_filter,
    ) as path:

        async def embed(text: str) -> Any:
            return await embedder.embed([text])

        settings = search_settings(data_dir)
        # a search calls no engine method but `fields`, `search` (and `close`)
        hiding = cast(SearchEngine, _EmbeddingFirst(path.engine))
        embedding_first = SearchService(hiding, embedder, settings)
        service_embedding_first = SearchPath(
            path.engine, embedding_first, None, *path.args()
        ).service_call(Strategy.HYBRID)
        try:
            hybrid = await _hybrid_stages(
                path,
                texts,
                {"embed": embed, "service_embedding_first": service_embedding_first},
            )
        finally:
            await embedding_first.close()
    return {
        "benchmark": "search_breakdown",
        "data": f"bench/search_latency.py collection ({search_latency.ROWS} chunks), filter "
        f"{FILTER_TEXT}, MiniLM per query, {len(texts)} SciFact queries, limit "
        f"{LIMIT}, interleaved",
        "hybrid_p50_ms": hybrid,
        "machine": machine(),
    }


def search_latency_context() -> int:
    """The keyword context `bench/search_latency.py` builds with by default (the product's)."""
    return ChunkingSettings().keyword_context_chunks


async def _hybrid_stages(
    path: SearchPath, texts: list[str], extra: dict[str, Stage]
) -> dict[str, Any]:
    await path.warm(search_pb2.RETRIEVAL_STRATEGY_HYBRID, texts)
    for text in texts:  # the per-query first rounds, outside the timing
        await path.prepare(Strategy.HYBRID, text)
    note("HYBRID stages")
    return await timed(
        {
            "grpc": path.grpc(search_pb2.RETRIEVAL_STRATEGY_HYBRID),
            "service": path.service_call(Strategy.HYBRID),
            "engine": path.engine_call(Strategy.HYBRID),
            "engine_lancedb": path.lancedb_engine_call(Strategy.HYBRID),
            **path.steps(Strategy.HYBRID),
            **extra,
        },
        texts,
    )


class _EmbeddingFirst:
    """The engine without `EmbeddingOverlap`: the service embeds the query, then searches."""

    def __init__(self, engine: LanceDBEngine) -> None:
        self._engine = engine

    async def fields(self, name: str) -> Any:
        return await self._engine.fields(name)

    async def search(self, name: str, query: EngineQuery) -> Any:
        return await self._engine.search(name, query)

    async def close(self) -> None:
        """The engine is the bench's, closed with it."""


class Serving:
    """An in-process server, a `SearchService` and the engine on one data directory."""

    def __init__(
        self,
        data_dir: Path,
        settings: Any,
        embedder: Embedder,
        collection: str,
        vectors: dict[str, Any],
        wire_filter: search_pb2.Filter | None,
    ) -> None:
        self._args = (data_dir, settings, embedder, collection, vectors, wire_filter)

    async def __aenter__(self) -> SearchPath:
        data_dir, settings, embedder, collection, vectors, wire_filter = self._args
        self._server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
        await self._server.start()
        engine = await LanceDBEngine.open(data_dir, policy=settings.engine.index_policy())
        self._service = SearchService(engine, embedder, settings)
        self._channel = grpc.aio.insecure_channel(self._server.address)
        stub = search_tool_pb2_grpc.SearchToolServiceStub(self._channel)
        expression = None
        if wire_filter is not None:
            fields = await engine.fields(collection)
            expression = validate_filter(filter_from_proto(wire_filter), fields)
        return SearchPath(
            engine,
            self._service,
            stub,
            collection,
            vectors,
            settings.fusion.to_fusion(),
            wire_filter,
            expression,
        )

    async def __aexit__(self, *_: object) -> None:
        await self._channel.close(None)
        await self._server.stop(0)
        await self._service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--hashed-vectors",
        action="store_true",
        help="latency only: pseudo-random vectors instead of MiniLM's (no hour-long embedding "
        f"of the corpus on a busy machine); the collection lives in {HASHED_DATA_DIR}",
    )
    parser.add_argument(
        "--latency-collection",
        action="store_true",
        help="the 100k filtered collection of bench/search_latency.py instead of SciFact",
    )
    args = parser.parse_args()
    if args.latency_collection:
        data_dir = args.data_dir or search_latency.default_data_dir(search_latency_context())
        out = args.out or RESULTS_DIR / "search_breakdown_100k.json"
        emit(asyncio.run(run_latency_collection(data_dir, args.queries)), out)
        return
    data_dir = args.data_dir or (
        HASHED_DATA_DIR if args.hashed_vectors else VAR_DIR / "eval" / "scifact"
    )
    out = args.out or RESULTS_DIR / "search_breakdown.json"
    emit(asyncio.run(run(data_dir, args.queries, hashed=args.hashed_vectors)), out)


if __name__ == "__main__":
    main()
