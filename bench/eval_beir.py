"""Retrieval quality on any BEIR-format collection: KEYWORD, SEMANTIC and HYBRID nDCG@10, with the
configured fusion and with the fusion the collection calibrates for itself.

    python bench/eval_beir.py --dataset /work/datasets/cranfield [--work-dir DIR] [--out FILE]
        [--split test] [--grpc] [--per-query] [--keyword-language english]

1. Builds the collection (named after the dataset directory) once under `--work-dir` (default
   `var/eval/<name>`) through the product's ingest, in process; the embedder's vectors are cached
   in `<work-dir>/vectors.npz`, so later runs embed nothing. Keep `--work-dir` outside the
   repository for collections you share between worktrees (vectors cost CPU: MiniLM embeds a few
   hundred chunks a minute on a loaded 2-core machine).
2. Replays the engine's scored candidates of every judged query (`qrels/test.tsv`) through
   `fusion.fuse`: SEMANTIC is the dense side alone, KEYWORD the keyword side alone, HYBRID the
   configured fusion and the calibrated one (`services/search_tool/calibration.py`: pseudo-queries
   from the collection's own documents, nothing from the judgements), each query's as the search
   tool serves it (`fusion.read_by_the_embedder`: the dense weight of a query written in other
   scripts than the embedder's is lowered; "HYBRID (configured alpha for every query)" is without
   it, and `served_minus_alpha_for_every_query` the paired difference).
3. With `--grpc`, also runs the judged queries through a search tool's gRPC API, served with the
   configured fusion as the product ships it (`search_tool.fusion`, calibration off by default),
   and reports those figures beside the replayed ones: its HYBRID is the replayed "HYBRID
   (configured)". The calibrated fusion is measured by the replay alone.

4. With `--per-query`, also writes each judged query's nDCG@10 by strategy, so that two runs (the
   same collection before and after a change) compare query by query (`bench/paired_runs.py`).

5. With `--keyword-language`, the collection's words are stemmed in that language
   (`search_tool.keyword.language`; its collection is rebuilt, its vectors reused).

Scored as BEIR scores: nDCG@10 with linear gains, recall@100, over the judged queries of
`--split` (default `test`); a query that is itself a corpus document (ArguAna, Quora: same id,
same text) is not scored against itself (`bench/harness.SciFact.queries_that_are_documents`).
A document with a title and no text is searched as its title; one with neither is left out
(`ingest` in the result counts both). Queries, titles and pages longer than the product's
per-request defaults go through (`bench/harness.BENCH_LIMITS`).

Nothing is chosen on the judged queries: the figures are what a collection never tuned on gets.
The dataset is read from outside the repository and never shipped (see
`bench/classic_collections.py` for turning classic collections into this layout).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.embedding_cache import CachedEmbedder
from bench.eval_scifact import (
    _STRATEGIES,
    Replay,
    collect_replays,
    per_query_ndcg,
    replayed,
    run_queries,
    scores,
    timed_scores,
)
from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    SciFact,
    emit,
    load_beir,
    machine,
    note,
    running_search_tool,
    settings_for,
    warm_up,
)
from bench.scifact_collection import build_collection, cached_embedder
from services.common.keyword_form import ENGLISH
from services.search_tool.calibration import ALPHA_GRID
from services.search_tool.calibrations import DIRECTORY as CALIBRATION_DIRECTORY
from services.search_tool.calibrations import FusionCalibrations
from services.search_tool.config import SearchToolSettings
from services.search_tool.engine.base import Fusion, FusionMethod
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.fusion import read_by_the_embedder

SIDES = {
    "SEMANTIC": Fusion(FusionMethod.LINEAR, alpha=1.0),
    "KEYWORD": Fusion(FusionMethod.LINEAR, alpha=0.0),
}
BOOTSTRAP_SAMPLES = 2_000
WARM_UP_S = 10.0
WARM_UP_LEAST = 50


def paired_interval(
    a: dict[str, float], b: dict[str, float], *, seed: int = 7
) -> tuple[float, float, float]:
    """Mean of a - b over the queries and its 95 % bootstrap interval (queries resampled)."""
    ids = sorted(a)
    deltas = [a[q] - b[q] for q in ids]
    rng = random.Random(seed)
    means = sorted(
        sum(deltas[rng.randrange(len(ids))] for _ in ids) / len(ids)
        for _ in range(BOOTSTRAP_SAMPLES)
    )
    return (
        round(sum(deltas) / len(ids), 4),
        round(means[int(0.025 * BOOTSTRAP_SAMPLES)], 4),
        round(means[int(0.975 * BOOTSTRAP_SAMPLES) - 1], 4),
    )


async def prepared(
    data_dir: Path,
    name: str,
    data: SciFact,
    embedder: CachedEmbedder,
    settings: SearchToolSettings | None = None,
) -> dict[str, Any]:
    """The collection built (or reused) and every row folded into the indexes."""
    report = await build_collection(data_dir, data, embedder, settings, collection=name)
    engine = await LanceDBEngine.open(data_dir, policy=settings_for(data_dir).engine.index_policy())
    try:
        await engine.refresh(name)
    finally:
        await engine.close()
    return report


async def evaluate(
    dataset: Path,
    name: str,
    work_dir: Path,
    *,
    through_grpc: bool,
    split: str = "test",
    with_per_query: bool = False,
    keyword_language: str = ENGLISH,
) -> dict[str, Any]:
    data = load_beir(dataset, split=split)
    data_dir = work_dir / "lance"
    embedder = cached_embedder(work_dir / "vectors.npz")
    settings = settings_for(data_dir, keyword_language=keyword_language)
    calibrated = settings_for(data_dir, calibrate=True, keyword_language=keyword_language)
    ingest = await prepared(data_dir, name, data, embedder, settings)
    engine = await LanceDBEngine.open(data_dir, policy=settings.engine.index_policy())
    try:
        replays: dict[str, Replay] = await collect_replays(
            engine, embedder, data, collection=name, keyword_language=keyword_language
        )
        calibrations = FusionCalibrations(
            engine,
            embedder,
            calibrated.fusion,
            data_dir / CALIBRATION_DIRECTORY,
            language_of=calibrated.keyword.language_of,
        )
        started = time.monotonic()
        calibration = await calibrations.calibrate(name)
        calibration_s = round(time.monotonic() - started, 1)
    finally:
        await engine.close()
    configured = settings.fusion.to_fusion()
    note(f"{name}: calibrated {calibration.as_json()}")

    def served(fusion: Fusion) -> dict[str, Fusion]:
        """Each query's fusion as the search tool serves HYBRID (`read_by_the_embedder`)."""
        return {
            q: read_by_the_embedder(fusion, text, embedder.scripts)
            for q, text in data.queries.items()
        }

    runs = {
        "SEMANTIC": replayed(replays, SIDES["SEMANTIC"]),
        "KEYWORD": replayed(replays, SIDES["KEYWORD"]),
        "HYBRID (configured)": replayed(replays, served(configured)),
        "HYBRID (calibrated)": replayed(replays, served(calibration.fusion)),
        "HYBRID (configured alpha for every query)": replayed(replays, configured),
    }
    figures = {label: scores(r, data) for label, r in runs.items()}
    alpha_curve = {
        str(alpha): scores(replayed(replays, served(replace(configured, alpha=alpha))), data)[
            "ndcg@10"
        ]
        for alpha in ALPHA_GRID
    }
    per_query = {label: per_query_ndcg(r, data) for label, r in runs.items()}
    best_side = max(("SEMANTIC", "KEYWORD"), key=lambda s: figures[s]["ndcg@10"])
    for label in ("HYBRID (configured)", "HYBRID (calibrated)"):
        mean, low, high = paired_interval(per_query[label], per_query[best_side])
        figures[label]["minus_best_side"] = {"mean": mean, "ci95": [low, high]}
    read = paired_interval(
        per_query["HYBRID (configured)"], per_query["HYBRID (configured alpha for every query)"]
    )
    mean, low, high = paired_interval(
        per_query["HYBRID (calibrated)"], per_query["HYBRID (configured)"]
    )
    result: dict[str, Any] = {
        "benchmark": "beir",
        "collection": name,
        "dataset": str(dataset),
        "documents": len(data.corpus),
        "judged_queries": len(data.qrels),
        "split": split,
        "queries_that_are_documents": len(data.queries_that_are_documents),
        "replayed": figures,
        "best_side": best_side,
        "calibrated_minus_configured": {"mean": mean, "ci95": [low, high]},
        "served_minus_alpha_for_every_query": {"mean": read[0], "ci95": [read[1], read[2]]},
        "ndcg@10_by_alpha": alpha_curve,
        "calibration": {**calibration.as_json(), "seconds": calibration_s},
        "configured_fusion": settings.fusion.model_dump(),
        "keyword_language": keyword_language,
        "ingest": ingest,
        "machine": machine(),
    }
    if with_per_query:
        result["per_query_ndcg@10"] = per_query
    if through_grpc:
        result["grpc"] = await grpc_figures(settings, name, data)
        result["grpc_fusion"] = settings.fusion.model_dump()
    return result


async def grpc_figures(settings: SearchToolSettings, name: str, data: SciFact) -> dict[str, Any]:
    """The judged queries through a running search tool with the configured fusion (`settings`).

    Each strategy's `search_ms_p50` is taken after a warm-up (`harness.warm_up`, the judged
    queries themselves: the bench keeps no query vectors), so that the collection's first read
    into memory is not charged to whichever strategy runs first. It is the latency of 4 searches
    in flight asking for 200 chunks each, not the latency figure of `bench/search_latency.py`."""
    figures: dict[str, Any] = {}
    async with (
        running_search_tool(settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)

        async def search(text: str) -> Any:
            request = search_tool_pb2.SearchRequest(
                collection=name, query=search_pb2.SearchQuery(primary=text), limit=10
            )
            return await stub.Search(request, timeout=60)

        queries = [data.queries[q] for q in sorted(data.queries)]
        await warm_up(search, queries, seconds=WARM_UP_S, least=min(len(queries), WARM_UP_LEAST))
        for strategy in ("SEMANTIC", "KEYWORD", "HYBRID"):
            run = await run_queries(stub, data, _STRATEGIES[strategy], collection=name)
            figures[strategy] = timed_scores(run, data)
            note(f"{name} {strategy} through gRPC: {figures[strategy]}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="a BEIR-format directory")
    parser.add_argument("--name", help="collection name (default: the directory's name)")
    parser.add_argument("--work-dir", type=Path, help="collection + vector cache (var/eval/NAME)")
    parser.add_argument("--out", type=Path, help="JSON result (bench/results/beir-NAME.json)")
    parser.add_argument("--grpc", action="store_true", help="also search through gRPC")
    parser.add_argument("--split", default="test", help="the judgements: qrels/SPLIT.tsv")
    parser.add_argument(
        "--per-query",
        action="store_true",
        help="also write each judged query's nDCG@10 by strategy (`bench/paired_runs.py`)",
    )
    parser.add_argument(
        "--keyword-language",
        default=ENGLISH,
        help="the language the collection's words are stemmed in (search_tool.keyword.language)",
    )
    args = parser.parse_args()
    name = args.name or args.dataset.resolve().name
    work_dir = args.work_dir or VAR_DIR / "eval" / name
    result = asyncio.run(
        evaluate(
            args.dataset,
            name,
            work_dir,
            through_grpc=args.grpc,
            split=args.split,
            with_per_query=args.per_query,
            keyword_language=args.keyword_language,
        )
    )
    suffix = "" if args.split == "test" else f"-{args.split}"
    emit(result, args.out or RESULTS_DIR / f"beir-{name}{suffix}.json")


if __name__ == "__main__":
    main()
