"""Does a collection fed only through `UpsertDocuments` reach indexed speed by itself?

    python bench/api_ingest_speed.py [--out bench/results/api_ingest_speed.json]

SciFact's 5,183 abstracts (12k chunks) go through gRPC `UpsertDocuments` in requests of 64, as a
client sends them, into two fresh collections: one on a search tool whose background index
maintenance is off (`engine.settle_after_s: null`, the behaviour before it existed), one with the
default (2 s). KEYWORD and HYBRID p50 over the 300 test queries are measured on both — on the
second only after its maintenance has converged by itself (the bench waits for it; it triggers
nothing) — and then on the first after the bulk `refresh` a loader would call, the reference.
Query and chunk vectors come from the on-disk cache `make eval` fills (`bench/embedding_cache.py`),
so ingest costs chunking and writes, not MiniLM.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    emit,
    load_scifact,
    machine,
    note,
    percentile,
    settings_for,
)
from bench.scifact_collection import INGEST_BATCH, cached_embedder
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.server import build_search_tool_server

COLLECTION = "api_only"
ROUNDS = 3
STRATEGIES = {
    "KEYWORD": search_pb2.RETRIEVAL_STRATEGY_KEYWORD,
    "HYBRID": search_pb2.RETRIEVAL_STRATEGY_HYBRID,
}


async def ingest(stub: Any, corpus: list[dict[str, str]]) -> float:
    started = time.monotonic()
    for start in range(0, len(corpus), INGEST_BATCH):
        batch = corpus[start : start + INGEST_BATCH]
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection=COLLECTION,
                documents=[
                    search_tool_pb2.Document(id=d["_id"], title=d.get("title", ""), text=d["text"])
                    for d in batch
                ],
            ),
            timeout=600,
        )
    return round(time.monotonic() - started, 1)


async def latencies(stub: Any, queries: list[str]) -> dict[str, float]:
    """p50 per strategy: the median over `ROUNDS` rounds of each round's p50."""
    result = {}
    for name, strategy in STRATEGIES.items():
        medians = []
        for _ in range(ROUNDS):
            times = []
            for text in queries:
                started = time.perf_counter()
                await stub.Search(
                    search_tool_pb2.SearchRequest(
                        collection=COLLECTION,
                        query=search_pb2.SearchQuery(primary=text),
                        strategy=strategy,
                        limit=10,
                    ),
                    timeout=30,
                )
                times.append((time.perf_counter() - started) * 1000)
            medians.append(percentile(times, 50))
        result[f"{name.lower()}_p50_ms"] = round(sorted(medians)[len(medians) // 2], 1)
    return result


async def layout(engine: LanceDBEngine) -> dict[str, int]:
    table = await engine._table(COLLECTION)
    fragments = int((await table.stats())["fragment_stats"]["num_fragments"])
    unindexed = sum(i.num_unindexed_rows or 0 for i in await table.list_indices())
    return {"fragments": fragments, "unindexed_index_rows": unindexed}


async def one_collection(
    data_dir: Path, settle_after_s: float | None, queries: list[str], corpus: list[dict[str, str]]
) -> dict[str, Any]:
    shutil.rmtree(data_dir, ignore_errors=True)
    embedder = cached_embedder()
    settings = settings_for(data_dir)
    engine_settings = settings.engine.model_copy(update={"settle_after_s": settle_after_s})
    settings = settings.model_copy(update={"engine": engine_settings})
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            ingest_s = await ingest(stub, corpus)
            assert server.service is not None
            engine = server.service.engine
            assert isinstance(engine, LanceDBEngine)
            waited = time.monotonic()
            await engine.maintenance_settled(COLLECTION)
            settled_s = round(time.monotonic() - waited, 1)
            report: dict[str, Any] = {
                "settle_after_s": settle_after_s,
                "ingest_s": ingest_s,
                "waited_for_maintenance_s": settled_s,
                **await layout(engine),
                **await latencies(stub, queries),
            }
            if settle_after_s is None:
                started = time.monotonic()
                await engine.refresh(COLLECTION)
                report["after_bulk_refresh"] = {
                    "refresh_s": round(time.monotonic() - started, 1),
                    **await layout(engine),
                    **await latencies(stub, queries),
                }
            return report
    finally:
        await server.stop(0)


async def run(data_dir: Path) -> dict[str, Any]:
    data = load_scifact()
    queries = list(data.queries.values())
    note("ingesting through gRPC with maintenance off")
    without = await one_collection(data_dir / "off", None, queries, data.corpus)
    note(f"maintenance off: {without}")
    note("ingesting through gRPC with maintenance on")
    with_it = await one_collection(data_dir / "on", 2.0, queries, data.corpus)
    note(f"maintenance on: {with_it}")
    return {
        "benchmark": "api_ingest_speed",
        "collection": "SciFact 5183 abstracts through UpsertDocuments, 64 per request",
        "queries": f"{len(queries)} SciFact test queries, limit 10, one client, median of "
        f"{ROUNDS} rounds' p50",
        "api_only_without_maintenance": without,
        "api_only_with_maintenance": with_it,
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "api_ingest_speed.json")
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "bench" / "api_ingest_speed")
    args = parser.parse_args()
    emit(asyncio.run(run(args.data_dir)), args.out)


if __name__ == "__main__":
    main()
