"""Retrieval quality on BEIR SciFact through the gRPC API: nDCG@10 and Recall@100 per strategy.

    python bench/eval_scifact.py --out bench/results/scifact.json

Ingests `../shared/datasets/scifact/` once into a search tool on `var/eval/scifact` (later runs
reuse it), then runs the 300 test queries with SEMANTIC, KEYWORD and HYBRID — HYBRID once per
fusion setting, each with its own server over the same data — and reports BEIR's metrics.
Chunks are aggregated to documents by their best score (first occurrence in the ranking); each
query asks for 200 chunks so that 100 distinct documents can be ranked for Recall@100.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    SciFact,
    emit,
    load_scifact,
    machine,
    note,
    running_search_tool,
    settings_for,
)
from services.search_tool.config import FusionSettings
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.server import open_engine

COLLECTION = "scifact"
CHUNKS_PER_QUERY = 200
DOCS_PER_QUERY = 100
INGEST_BATCH = 64
CONCURRENT_QUERIES = 4

FUSIONS: dict[str, FusionSettings] = {
    "rrf_k60": FusionSettings(method="rrf", rrf_k=60),
    "rrf_k20": FusionSettings(method="rrf", rrf_k=20),
    "linear_a0.3": FusionSettings(method="linear", alpha=0.3),
    "linear_a0.5": FusionSettings(method="linear", alpha=0.5),
    "linear_a0.7": FusionSettings(method="linear", alpha=0.7),
}
_STRATEGIES = {
    "SEMANTIC": search_pb2.RETRIEVAL_STRATEGY_SEMANTIC,
    "KEYWORD": search_pb2.RETRIEVAL_STRATEGY_KEYWORD,
    "HYBRID": search_pb2.RETRIEVAL_STRATEGY_HYBRID,
}


@dataclass(frozen=True)
class Run:
    """Ranked document ids per query, and how long the searches took."""

    rankings: dict[str, list[str]]
    """Query id → document ids, best first, at most 100."""
    latencies_ms: list[float]
    """Client-side wall time of each Search call."""


def ndcg_at(ranking: list[str], relevant: dict[str, int], k: int = 10) -> float:
    """BEIR / trec_eval nDCG@k with linear gains."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranking[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranking: list[str], relevant: dict[str, int], k: int = 100) -> float:
    """Share of the relevant documents found in the top k."""
    wanted = {d for d, g in relevant.items() if g > 0}
    return len(wanted.intersection(ranking[:k])) / len(wanted) if wanted else 0.0


def scores(run: Run, data: SciFact) -> dict[str, Any]:
    ids = sorted(data.qrels)
    ndcg = [ndcg_at(run.rankings.get(q, []), data.qrels[q]) for q in ids]
    recall = [recall_at(run.rankings.get(q, []), data.qrels[q]) for q in ids]
    latencies = sorted(run.latencies_ms)
    return {
        "ndcg@10": round(sum(ndcg) / len(ids), 4),
        "recall@100": round(sum(recall) / len(ids), 4),
        "queries": len(ids),
        "search_ms_p50": round(latencies[len(latencies) // 2], 1),
    }


async def ingest(stub: Any, data: SciFact) -> dict[str, Any]:
    """Upsert the corpus unless the collection already holds all of it."""
    try:
        found = await stub.GetCollection(
            search_tool_pb2.GetCollectionRequest(collection=COLLECTION), timeout=30
        )
        if found.collection.document_count == len(data.corpus):
            note(f"reusing collection {COLLECTION!r}: {found.collection.chunk_count} chunks")
            return {"reused": True, "chunks": found.collection.chunk_count}
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.NOT_FOUND:
            raise
    started = time.monotonic()
    chunks = 0
    for start in range(0, len(data.corpus), INGEST_BATCH):
        batch = data.corpus[start : start + INGEST_BATCH]
        response = await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection=COLLECTION,
                documents=[
                    search_tool_pb2.Document(
                        id=d["_id"],
                        title=d.get("title", ""),
                        text=d["text"],
                        source="scifact",
                        entity_type="abstract",
                    )
                    for d in batch
                ],
            ),
            timeout=600,
        )
        chunks += response.chunks_upserted
        note(f"ingested {start + len(batch)}/{len(data.corpus)} abstracts, {chunks} chunks")
    seconds = time.monotonic() - started
    return {
        "reused": False,
        "chunks": chunks,
        "seconds": round(seconds, 1),
        "chunks_per_s": round(chunks / seconds, 1),
    }


async def run_queries(stub: Any, data: SciFact, strategy: search_pb2.RetrievalStrategy) -> Run:
    gate = asyncio.Semaphore(CONCURRENT_QUERIES)
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []

    async def one(query_id: str, text: str) -> None:
        async with gate:
            started = time.perf_counter()
            response = await stub.Search(
                search_tool_pb2.SearchRequest(
                    collection=COLLECTION,
                    query=search_pb2.SearchQuery(primary=text),
                    strategy=strategy,
                    limit=CHUNKS_PER_QUERY,
                ),
                timeout=60,
            )
            latencies.append((time.perf_counter() - started) * 1000)
        ranking: list[str] = []
        for result in response.results:
            if result.chunk.document_id not in ranking:
                ranking.append(result.chunk.document_id)
        rankings[query_id] = ranking[:DOCS_PER_QUERY]

    await asyncio.gather(*(one(q, t) for q, t in data.queries.items()))
    return Run(rankings, latencies)


async def index_everything(data_dir: Path) -> float:
    """Fold rows written since the last index build into the indexes; returns seconds taken.

    The engine rebuilds BM25 only after many unindexed rows (20,000 by default); below that,
    keyword search scans the unindexed rows (~2 s per query here), which would dominate the eval.
    """
    started = time.monotonic()
    engine = await open_engine(settings_for(data_dir))
    try:
        if isinstance(engine, LanceDBEngine):
            await engine.refresh(COLLECTION)
    finally:
        await engine.close()
    return round(time.monotonic() - started, 1)


async def evaluate(data_dir: Path) -> dict[str, Any]:
    data = load_scifact()
    results: dict[str, Any] = {}
    async with (
        running_search_tool(settings_for(data_dir)) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        ingest_report = await ingest(search_tool_pb2_grpc.SearchToolServiceStub(channel), data)
    ingest_report["index_refresh_s"] = await index_everything(data_dir)
    for label, fusion in FUSIONS.items():
        async with (
            running_search_tool(settings_for(data_dir, fusion=fusion)) as address,
            grpc.aio.insecure_channel(address) as channel,
        ):
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            if not results:
                for name in ("SEMANTIC", "KEYWORD"):
                    results[name] = scores(await run_queries(stub, data, _STRATEGIES[name]), data)
                    note(f"{name}: {results[name]}")
            key = f"HYBRID[{label}]"
            results[key] = scores(await run_queries(stub, data, _STRATEGIES["HYBRID"]), data)
            results[key]["fusion"] = fusion.model_dump()
            note(f"{key}: {results[key]}")
    best = max((k for k in results if k.startswith("HYBRID")), key=lambda k: results[k]["ndcg@10"])
    return {
        "benchmark": "scifact",
        "dataset": "BEIR SciFact test (300 queries, 5183 abstracts)",
        "metrics": results,
        "best_hybrid": {"run": best, **results[best]},
        "ingest": ingest_report,
        "chunks_per_query": CHUNKS_PER_QUERY,
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "scifact.json")
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "eval" / "scifact")
    args = parser.parse_args()
    emit(asyncio.run(evaluate(args.data_dir)), args.out)


if __name__ == "__main__":
    main()
