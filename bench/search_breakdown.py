"""Where a search's milliseconds go: each stage of Quarry's search path timed on its own, per query,
interleaved, on the SciFact collection `make eval` builds (LanceDB engine).

    python bench/search_breakdown.py [--out bench/results/search_breakdown.json] [--queries N]

For each SciFact test query, every stage runs once back to back, the order rotating per query (a
busy shared machine's drift hits every stage alike). Stages, HYBRID (limit 10, no filter):

* `grpc`: the whole `Search` RPC through an in-process server (as `bench/peers/search.py`).
* `service`: `SearchService.search` in process (validation, filter, query embedding from the cache,
  the engine's search) — `grpc` minus this is the gRPC hop and protobuf conversion.
* `engine`: `LanceDBEngine.search` with a ready `EngineQuery`.
* `dense`, `keyword`, `completion`, `fuse`, `chunks`: the engine's own steps, each alone
  (`engine.lancedb.retrieval`, `fusion.fuse`).
* `lancedb_hybrid`: LanceDB's own hybrid query (the peer of `bench/peers/search.py`).

KEYWORD: `grpc`, `service`, `engine`, `keyword_ranked` (the engine's one FTS query, to the count
cap) and `keyword_top` (the same query to the page only).

Prints one JSON object: p50 per stage (ms) and the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.eval_scifact import index_everything
from bench.harness import RESULTS_DIR, VAR_DIR, emit, load_scifact, machine, note, percentile
from bench.harness import settings_for as search_settings
from bench.scifact_collection import (
    COLLECTION,
    HASHED_DATA_DIR,
    build_collection,
    cached_embedder,
    hashed_embedder,
)
from services.search_tool.engine.base import EngineQuery, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb.retrieval import (
    chunks_at,
    cosines_at,
    dense_candidates,
    keyword_candidates,
    keyword_scores_at,
)
from services.search_tool.fusion import Completion, fuse, missing_sides
from services.search_tool.server import build_search_tool_server
from services.search_tool.service import SearchRequest, SearchService

LIMIT = 10
WARMUP = 10

Stage = Callable[[str, Any], Awaitable[Any]]


async def timed(stages: dict[str, Stage], queries: list[tuple[str, Any]]) -> dict[str, float]:
    """p50 (ms) of each stage, the stages' order rotating per query."""
    names = list(stages)
    for text, vector in queries[:WARMUP]:
        for name in names:
            await stages[name](text, vector)
    times: dict[str, list[float]] = {name: [] for name in names}
    for n, (text, vector) in enumerate(queries):
        rotated = names[n % len(names) :] + names[: n % len(names)]
        for name in rotated:
            started = time.perf_counter()
            await stages[name](text, vector)
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: round(percentile(t, 50), 2) for name, t in times.items()}


async def run(data_dir: Path, count: int, *, hashed: bool = False) -> dict[str, Any]:
    data = load_scifact()
    embedder = hashed_embedder() if hashed else cached_embedder()
    await build_collection(data_dir, data, embedder)
    await index_everything(data_dir)  # as `bench/peers/search.py`
    texts = [data.queries[q] for q in sorted(data.queries)][:count]
    vectors = await embedder.embed(texts)
    queries = list(zip(texts, vectors, strict=True))

    settings = search_settings(data_dir)
    fusion = settings.fusion.to_fusion()
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    engine = await LanceDBEngine.open(data_dir)
    service = SearchService(engine, embedder, settings)
    table = await engine._table(COLLECTION)  # the bench times the engine's own steps
    depth = settings.fusion.candidates
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)

            def via_grpc(strategy: search_pb2.RetrievalStrategy) -> Stage:
                async def call(text: str, _: Any) -> Any:
                    return await stub.Search(
                        search_tool_pb2.SearchRequest(
                            collection=COLLECTION,
                            query=search_pb2.SearchQuery(primary=text),
                            strategy=strategy,
                            limit=LIMIT,
                        ),
                        timeout=30,
                    )

                return call

            def via_service(strategy: Strategy) -> Stage:
                async def call(text: str, _: Any) -> Any:
                    request = SearchRequest(COLLECTION, text, strategy=strategy, limit=LIMIT)
                    return await service.search(request)

                return call

            def via_engine(strategy: Strategy) -> Stage:
                async def call(text: str, vector: Any) -> Any:
                    vectors = (
                        np.zeros((0, len(vector)), dtype=np.float32)
                        if strategy is Strategy.KEYWORD
                        else np.asarray([vector], dtype=np.float32)
                    )
                    query = EngineQuery(strategy, text, vectors, limit=LIMIT, fusion=fusion)
                    return await engine.search(COLLECTION, query)

                return call

            async def dense(_: str, vector: Any) -> Any:
                target = np.asarray([vector], dtype=np.float32)
                return await dense_candidates(table, target, None, depth, None, None)

            async def keyword(text: str, _: Any) -> Any:
                return await keyword_candidates(table, text, None, depth, None)

            prepared: dict[str, Any] = {}

            async def sides(text: str, vector: Any) -> Any:
                if text not in prepared:
                    d = await dense(text, vector)
                    k, _ = await keyword(text, vector)
                    prepared[text] = (d, k, *missing_sides(d, k))
                return prepared[text]

            async def completion(text: str, vector: Any) -> Any:
                _, _, keyword_only, dense_only = await sides(text, vector)
                target = np.asarray([vector], dtype=np.float32)
                return await asyncio.gather(
                    cosines_at(table, [int(i) for i in keyword_only], target, None),
                    keyword_scores_at(table, text, [int(i) for i in dense_only], None),
                )

            completed: dict[str, Completion] = {}

            async def fusing(text: str, vector: Any) -> Any:
                d, k, _, _ = await sides(text, vector)
                if text not in completed:
                    cosines, bm25 = await completion(text, vector)
                    completed[text] = Completion(cosines, bm25)
                started = time.perf_counter()
                fuse(d, k, fusion, completed[text])
                return time.perf_counter() - started

            async def chunks(text: str, vector: Any) -> Any:
                d, _, _, _ = await sides(text, vector)
                return await chunks_at(table, [int(c.id) for c in d[0][:LIMIT]], None)

            async def lancedb_hybrid(text: str, vector: Any) -> Any:
                query = table.query().nearest_to(np.asarray(vector)).distance_type("cosine")
                return await query.nearest_to_text(text).select(["id"]).limit(LIMIT).to_arrow()

            async def keyword_ranked(text: str, _: Any) -> Any:
                return await keyword_candidates(
                    table, text, None, settings.engine.keyword_count_cap, None, keep=LIMIT
                )

            async def keyword_top(text: str, _: Any) -> Any:
                return await keyword_candidates(table, text, None, LIMIT, None)

            for text, vector in queries:  # fill the per-query caches outside the timing
                await fusing(text, vector)
            note("HYBRID stages")
            hybrid = await timed(
                {
                    "grpc": via_grpc(search_pb2.RETRIEVAL_STRATEGY_HYBRID),
                    "service": via_service(Strategy.HYBRID),
                    "engine": via_engine(Strategy.HYBRID),
                    "dense": dense,
                    "keyword": keyword,
                    "completion": completion,
                    "fuse": fusing,
                    "chunks": chunks,
                    "lancedb_hybrid": lancedb_hybrid,
                },
                queries,
            )
            note("KEYWORD stages")
            keyword_stages = await timed(
                {
                    "grpc": via_grpc(search_pb2.RETRIEVAL_STRATEGY_KEYWORD),
                    "service": via_service(Strategy.KEYWORD),
                    "engine": via_engine(Strategy.KEYWORD),
                    "keyword_ranked": keyword_ranked,
                    "keyword_top": keyword_top,
                },
                queries,
            )
    finally:
        await server.stop(0)
        await service.close()
    return {
        "benchmark": "search_breakdown",
        "data": f"SciFact collection, {len(queries)} test queries, limit {LIMIT}, interleaved"
        + ("; hashed vectors (latency only)" if hashed else ""),
        "hybrid_p50_ms": hybrid,
        "keyword_p50_ms": keyword_stages,
        "note": "fuse is timed as the whole stage call (its pure-Python part is a fraction)",
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "search_breakdown.json")
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "eval" / "scifact")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument(
        "--hashed-vectors",
        action="store_true",
        help="latency only: pseudo-random vectors instead of MiniLM's (no hour-long embedding "
        f"of the corpus on a busy machine); the collection lives in {HASHED_DATA_DIR}",
    )
    args = parser.parse_args()
    if args.hashed_vectors and args.data_dir == parser.get_default("data_dir"):
        args.data_dir = HASHED_DATA_DIR
    emit(asyncio.run(run(args.data_dir, args.queries, hashed=args.hashed_vectors)), args.out)


if __name__ == "__main__":
    main()
