"""What expanding a search's query with a passage the model writes to answer it
(`agent.loop.expand_queries`, HyDE) does to the first search on questions asked in other words
than the documents use: the paraphrased questions of `bench/answer_quality_questions.py` over
the demo collection (`--questions`: the 48 of the first set, the 150 held out, or all), each with
its answering documents.

    python bench/expand_questions.py [--data-dir var/bench-answer-quality] [--threads 2]
                                     [--questions tuned|held-out|all] [--first N]

It starts the real local model (`make local-model`: Qwen2.5-Coder-1.5B through llama-cpp-python)
and Quarry's services as processes (`bench/local_model_stack.py`). Each question is sent to the
search tool as a client sends it (`Search`, 10 hits, HYBRID and SEMANTIC); then its passage is
written as the agent's `search` tool has it written (`services.agent.expand.expand` through the
LLM gateway's `Generate`, the `local` route) and the same searches are sent again as the agent
sends them: the question followed by the passage as a variation, and the passage's words in the
keyword query (`query.keyword_expansion`, since session 22). Reported for each strategy, before
and after: answering document at rank 1, within the top 3, MRR@10, each difference with its 95 %
paired bootstrap interval (questions resampled); the expansions that failed; the seconds an
expansion takes.

The collection is read from a copy of `--data-dir` (`bench/answer_quality.py` builds it there).

`--beir DATASET:WORK_DIR` (repeatable) also measures held-out BEIR collections already built by
`bench/eval_beir.py` in WORK_DIR (only read): `--queries` judged queries of each (chosen with
`--seed` before anything is measured) have their passages written the same way, through the
gateway, and each query is replayed through the engine in process (`engine.scored_candidates`
with the query's vector and its expansion's, as the search tool stacks a query's variations, and
`fusion.fuse`, as `bench/eval_beir.py` replays): nDCG@10 of KEYWORD, SEMANTIC and HYBRID with
and without the expansion, paired.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from bench.answer_quality_questions import add_question_set_argument, question_set, set_of
from bench.eval_scifact import CHUNKS_PER_QUERY, Replay
from bench.first_search import COLLECTION, PAGE, paired, paired_ndcg, settled, strategies
from bench.harness import RESULTS_DIR, VAR_DIR, emit, load_beir, machine, note, settings_for
from bench.local_model_stack import local_model_stack
from bench.rerank_questions import figures, first_answering
from bench.scifact_collection import cached_embedder
from services.agent.config import LoopSettings
from services.agent.expand import expand, expansion_text
from services.agent.gateway_client import GatewayModelClient
from services.agent.run import Deadline
from services.agent.search_tool_client import search_hit
from services.search_tool.engine.base import EngineQuery, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.service import SearchRequest, keyword_text

ROUTE = "local"
"""The agent's route in the local model's configuration (`scripts/local_model.py config`)."""
STRATEGIES = {
    "HYBRID": search_pb2.RETRIEVAL_STRATEGY_HYBRID,
    "SEMANTIC": search_pb2.RETRIEVAL_STRATEGY_SEMANTIC,
}
METRICS = ("rank1", "top3", "mrr10")


async def measure(args: argparse.Namespace, search_address: str, gateway: str) -> dict[str, Any]:
    chosen = list(question_set(args.questions).items())
    questions = chosen[: args.first] if args.first else chosen
    rows: dict[str, dict[str, dict[str, dict[str, float]]]] = {
        s: {"question": {}, "expanded": {}} for s in STRATEGIES
    }
    seconds: list[float] = []
    failed = 0
    passages: dict[str, str] = {}
    async with (
        grpc.aio.insecure_channel(search_address) as search_channel,
        grpc.aio.insecure_channel(gateway) as gateway_channel,
    ):
        stub = search_tool_pb2_grpc.SearchToolServiceStub(search_channel)
        model = GatewayModelClient(gateway_channel)

        async def first_rank(
            strategy: search_pb2.RetrievalStrategy,
            variations: list[str],
            text: str,
            docs: set[str],
            keyword_expansion: str = "",
        ) -> int | None:
            reply = await stub.Search(
                search_tool_pb2.SearchRequest(
                    collection=COLLECTION,
                    query=search_pb2.SearchQuery(
                        primary=text, variations=variations, keyword_expansion=keyword_expansion
                    ),
                    strategy=strategy,
                    limit=PAGE,
                )
            )
            return first_answering([search_hit(r) for r in reply.results], docs)

        for key, question in questions:
            started = time.perf_counter()
            expansion = await expand(
                question.text,
                model=model,
                route=ROUTE,
                max_output_tokens=args.max_tokens,
                deadline=Deadline(None),
            )
            seconds.append(time.perf_counter() - started)
            failed += expansion.failed
            passages[key] = expansion.passage
            variations = (
                [] if expansion.failed else [expansion_text(question.text, expansion.passage)]
            )
            answering = set(question.documents)
            moved = []
            for label, strategy in STRATEGIES.items():
                before = await first_rank(strategy, [], question.text, answering)
                after = await first_rank(
                    strategy, variations, question.text, answering, expansion.passage
                )
                rows[label]["question"][key] = figures(before)
                rows[label]["expanded"][key] = figures(after)
                moved.append(f"{label} {before} -> {after}")
            note(f"{key} {', '.join(moved)} ({seconds[-1]:.1f} s)")

    ordered = sorted(seconds)
    sets: dict[str, set[str]] = {}
    for key, _ in questions:
        sets.setdefault(set_of(key), set()).add(key)
    return {
        "question_set": args.questions,
        "questions": len(questions),
        "strategies": before_after(rows),
        # with `--questions all`, each set apart too (the first 48 were looked at hard)
        "by_set": {name: before_after(rows, keys) for name, keys in sets.items()},
        "expansions_failed": failed,
        "seconds_per_expansion": {
            "p50": round(ordered[len(ordered) // 2], 2),
            "max": round(ordered[-1], 2),
            "mean": round(sum(ordered) / len(ordered), 2),
        },
        "passages": passages,
    }


def before_after(
    rows: dict[str, dict[str, dict[str, dict[str, float]]]], keys: set[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per strategy: each metric's mean without and with the expansion and their paired
    difference, over the questions of `keys` (all when None)."""

    def chosen(by_question: dict[str, dict[str, float]], metric: str) -> dict[str, float]:
        return {q: r[metric] for q, r in by_question.items() if keys is None or q in keys}

    def mean(values: dict[str, float]) -> float:
        return round(sum(values.values()) / len(values), 3)

    return {
        label: {
            "question": {m: mean(chosen(arms["question"], m)) for m in METRICS},
            "expanded": {m: mean(chosen(arms["expanded"], m)) for m in METRICS},
            "expanded_minus_question": {
                m: paired(chosen(arms["expanded"], m), chosen(arms["question"], m)) for m in METRICS
            },
        }
        for label, arms in rows.items()
    }


async def passages_of(
    gateway: str, texts: dict[str, str], max_tokens: int
) -> tuple[dict[str, str], list[float]]:
    """Each query's passage written through the gateway as the agent has it written ("" when
    the expansion failed), and the seconds each took."""
    passages: dict[str, str] = {}
    seconds: list[float] = []
    async with grpc.aio.insecure_channel(gateway) as channel:
        model = GatewayModelClient(channel)
        for query_id, text in texts.items():
            started = time.perf_counter()
            expansion = await expand(
                text,
                model=model,
                route=ROUTE,
                max_output_tokens=max_tokens,
                deadline=Deadline(None),
            )
            seconds.append(time.perf_counter() - started)
            passages[query_id] = expansion.passage
            if len(passages) % 10 == 0:
                note(f"{len(passages)}/{len(texts)} passages ({seconds[-1]:.1f} s the last)")
    return passages, seconds


async def heldout(
    spec: str, args: argparse.Namespace, gateway: str, scratch: Path
) -> dict[str, Any]:
    """nDCG@10 of each strategy on a held-out collection, with and without the expansion."""
    dataset, _, work = spec.partition(":")
    dataset_dir, work_dir = Path(dataset), Path(work)
    name = dataset_dir.name
    data = load_beir(dataset_dir, split="test")
    ids = sorted(data.queries)
    random.Random(args.seed).shuffle(ids)
    chosen = sorted(ids[: args.queries])
    texts = {q: data.queries[q] for q in chosen}
    data = dataclasses.replace(
        data, queries=texts, qrels={q: r for q, r in data.qrels.items() if q in texts}
    )
    note(f"{name}: writing {len(texts)} passages")
    passages, seconds = await passages_of(gateway, texts, args.max_tokens)
    cache = scratch / f"{name}-vectors.npz"
    shutil.copyfile(work_dir / "vectors.npz", cache)
    embedder = cached_embedder(cache)
    query_vectors = await embedder.embed([texts[q] for q in chosen])
    expanded = [expansion_text(texts[q], passages[q]) for q in chosen if passages[q]]
    expansion_vectors = iter(await embedder.embed(expanded))
    settings = settings_for(work_dir)
    engine = await LanceDBEngine.open(work_dir / "lance", policy=settings.engine.index_policy())
    runs: dict[str, dict[str, Replay]] = {"question": {}, "expanded": {}}
    try:
        for query_id, vector in zip(chosen, query_vectors, strict=True):
            arms = {"question": np.stack([vector])}
            arms["expanded"] = (
                np.stack([vector, next(expansion_vectors)])
                if passages[query_id]
                else arms["question"]
            )
            for arm, vectors in arms.items():
                # the expanded search's keyword side as the search tool has it (`keyword_text`)
                keywords = SearchRequest(
                    name,
                    texts[query_id],
                    keyword_expansion=passages[query_id] if arm == "expanded" else "",
                )
                query = EngineQuery(
                    Strategy.HYBRID, keyword_text(keywords), vectors, limit=CHUNKS_PER_QUERY
                )
                scored, chunks = await engine.scored_candidates(name, query)
                runs[arm][query_id] = Replay(scored, {a: c.document_id for a, c in chunks.items()})
    finally:
        await engine.close()
    out: dict[str, Any] = {
        "queries": len(chosen),
        "expansions_failed": sum(1 for q in chosen if not passages[q]),
        "seconds_per_expansion_p50": round(sorted(seconds)[len(seconds) // 2], 2),
        "passages": passages,
    }
    fusions = strategies(settings.fusion.to_fusion())
    out.update(paired_ndcg(runs["expanded"], runs["question"], fusions, data, arm="expanded"))
    note(f"{name}: {out}")
    return out


async def measure_all(
    args: argparse.Namespace, search_address: str, gateway: str, scratch: Path
) -> dict[str, Any]:
    result = await measure(args, search_address, gateway) if not args.skip_demo else {}
    if args.beir:
        result["held_out"] = {
            Path(spec.partition(":")[0]).name: await heldout(spec, args, gateway, scratch)
            for spec in args.beir
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "bench-answer-quality")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--max-tokens", type=int, default=LoopSettings().expand_max_tokens, help="a passage's"
    )
    add_question_set_argument(parser)
    parser.add_argument("--first", type=int, default=0, help="the set's first N only (0: all)")
    parser.add_argument("--skip-demo", action="store_true", help="held-out collections only")
    parser.add_argument(
        "--beir", action="append", default=[], metavar="DATASET:WORK_DIR", help="held out"
    )
    parser.add_argument("--queries", type=int, default=50, help="judged queries a collection")
    parser.add_argument("--seed", type=int, default=31, help="which queries")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "expand_questions.json")
    args = parser.parse_args(argv)
    for spec in args.beir:
        _, _, work = spec.partition(":")
        if not work or not (Path(work) / "vectors.npz").exists():
            raise SystemExit(f"--beir {spec}: no eval_beir.py build (vectors.npz) in {work!r}")
    if not (args.data_dir / f"{COLLECTION}.lance").exists():
        raise SystemExit(f"no demo collection in {args.data_dir}: run bench/answer_quality.py")
    with tempfile.TemporaryDirectory(prefix="expand-questions-") as scratch:
        root = Path(scratch)
        data = root / "data"
        shutil.copytree(args.data_dir, data)
        asyncio.run(settled(data))  # as the search tool serves it once writes pause
        with local_model_stack(root, threads=args.threads, data_dir=data) as stack:
            result = asyncio.run(measure_all(args, stack.search_tool, stack.gateway, root))
    emit(
        {
            "bench": "expand_questions",
            "command": "python bench/expand_questions.py " + " ".join(argv or sys.argv[1:]),
            "route": f"{ROUTE}: the local model, {args.threads} thread(s)",
            "max_tokens": args.max_tokens,
            **result,
            "machine": machine(),
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
