"""What judging a search's first hits with a model (`agent.loop.rerank_route`) does to the first
search on questions asked in other words than the documents use: the 48 paraphrased questions of
`bench/answer_quality_questions.py` over the demo collection, each with its answering documents.

    python bench/rerank_questions.py [--data-dir var/bench-answer-quality] [--threads 2]
                                     [--candidates 10] [--questions N]

It starts the real local model (`make local-model`: Qwen2.5-Coder-1.5B through llama-cpp-python)
and Quarry's services as processes (`bench/local_model_stack.py`), with the judge server: the
same model reporting the first token's log-probabilities, the `rerank` route. Each question is
sent to the search tool as a client sends it (`Search`, HYBRID, 10 hits) and the page is judged
as the agent's `search` tool judges it (`services.agent.rerank.rerank` through the LLM gateway's
`Generate`). Reported, before and after: answering document at rank 1, within the top 3, MRR@10,
each difference with its 95 % paired bootstrap interval (questions resampled); the judgments
(yes, no, failed); the seconds a judged search takes.

The collection is read from a copy of `--data-dir` (`bench/answer_quality.py` builds it there).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from bench.answer_quality_questions import QUESTIONS
from bench.first_search import COLLECTION, PAGE, paired, settled
from bench.harness import RESULTS_DIR, VAR_DIR, emit, machine, note
from bench.local_model_stack import local_model_stack
from services.agent.gateway_client import GatewayModelClient
from services.agent.rerank import Reranked, rerank
from services.agent.run import Deadline
from services.agent.search import SearchHit
from services.agent.search_tool_client import search_hit

RERANK_ROUTE = "rerank"
"""The judge server alone (`scripts/local_model.py config --judge-port`)."""


def first_answering(hits: list[SearchHit], answering: set[str]) -> int | None:
    """The rank (from 1) of the first hit whose document answers, within the page."""
    return next((i for i, h in enumerate(hits[:PAGE], 1) if h.document_id in answering), None)


def figures(rank: int | None) -> dict[str, float]:
    return {
        "rank1": float(rank == 1),
        "top3": float(rank is not None and rank <= 3),
        "mrr10": 1.0 / rank if rank else 0.0,
    }


async def measure(args: argparse.Namespace, search_address: str, gateway: str) -> dict[str, Any]:
    questions = QUESTIONS[: args.questions] if args.questions else QUESTIONS
    before: dict[str, dict[str, float]] = {}
    after: dict[str, dict[str, float]] = {}
    seconds: list[float] = []
    judgments = {"judged": 0, "answering": 0, "failed": 0}
    async with (
        grpc.aio.insecure_channel(search_address) as search_channel,
        grpc.aio.insecure_channel(gateway) as gateway_channel,
    ):
        stub = search_tool_pb2_grpc.SearchToolServiceStub(search_channel)
        model = GatewayModelClient(gateway_channel)
        for number, question in enumerate(questions, start=1):
            key = f"q{number:02d}"
            reply = await stub.Search(
                search_tool_pb2.SearchRequest(
                    collection=COLLECTION,
                    query=search_pb2.SearchQuery(primary=question.text),
                    strategy=search_pb2.RETRIEVAL_STRATEGY_HYBRID,
                    limit=PAGE,
                )
            )
            hits = [search_hit(r) for r in reply.results]
            started = time.perf_counter()
            judged: Reranked = await rerank(
                question.text,
                hits,
                model=model,
                route=RERANK_ROUTE,
                candidates=args.candidates,
                max_chars=args.max_chars,
                parallel=1,
                deadline=Deadline(None),
            )
            seconds.append(time.perf_counter() - started)
            answering = set(question.documents)
            rank_before = first_answering(hits, answering)
            rank_after = first_answering(list(judged.hits), answering)
            before[key], after[key] = figures(rank_before), figures(rank_after)
            for name in judgments:
                judgments[name] += getattr(judged, name)
            note(f"{key} rank {rank_before} -> {rank_after} ({seconds[-1]:.1f} s)")

    def mean(rows: dict[str, dict[str, float]], metric: str) -> float:
        return round(sum(r[metric] for r in rows.values()) / len(rows), 3)

    metrics = ("rank1", "top3", "mrr10")
    ordered = sorted(seconds)
    return {
        "questions": len(before),
        "engine": {m: mean(before, m) for m in metrics},
        "reranked": {m: mean(after, m) for m in metrics},
        "reranked_minus_engine": {
            m: paired({q: r[m] for q, r in after.items()}, {q: r[m] for q, r in before.items()})
            for m in metrics
        },
        "judgments": judgments,
        "seconds_per_search": {
            "p50": round(ordered[len(ordered) // 2], 2),
            "max": round(ordered[-1], 2),
            "mean": round(sum(ordered) / len(ordered), 2),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "bench-answer-quality")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--max-chars", type=int, default=300)
    parser.add_argument("--questions", type=int, default=0, help="the first N only (0: all)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "rerank_questions.json")
    args = parser.parse_args(argv)
    if not (args.data_dir / f"{COLLECTION}.lance").exists():
        raise SystemExit(f"no demo collection in {args.data_dir}: run bench/answer_quality.py")
    with tempfile.TemporaryDirectory(prefix="rerank-questions-") as scratch:
        root = Path(scratch)
        data = root / "data"
        shutil.copytree(args.data_dir, data)
        asyncio.run(settled(data))  # as the search tool serves it once writes pause
        with local_model_stack(
            root,
            threads=args.threads,
            data_dir=data,
            judge=True,
        ) as stack:
            result = asyncio.run(measure(args, stack.search_tool, stack.gateway))
    emit(
        {
            "bench": "rerank_questions",
            "command": "python bench/rerank_questions.py " + " ".join(argv or sys.argv[1:]),
            "route": f"{RERANK_ROUTE}: the local model, {args.threads} thread(s)",
            "candidates": args.candidates,
            "max_chars": args.max_chars,
            **result,
            "machine": machine(),
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
