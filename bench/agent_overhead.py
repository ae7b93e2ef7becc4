"""Agent overhead per iteration, model and search excluded.

Runs THINKING-mode conversations in process against a rule-based model and the in-memory search
tool, both at zero latency, and times every model turn of the loop: the time the loop spends
between one model call and the next (pruning, tool-argument validation, filter merge, result
formatting, bookkeeping), with the fakes' own time measured and subtracted.

    python bench/agent_overhead.py [--runs 200] [--searches 5]

Prints JSON (p50/p95/p99 ms per iteration, target p50 <= 5 ms) and writes bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from pathlib import Path

from services.agent.loop import AgentLoop
from services.agent.ports import ModelRequest, ModelResponse
from services.agent.run import Mode, RunRequest
from services.agent.search import SearchPage, SearchRequest
from services.agent.testing import FunctionModel, search_then_answer
from tests.agent.fake_search import FakeDocument, FakeSearch

RESULTS = Path(__file__).parent / "results" / "agent_overhead.json"


class _TimedModel(FunctionModel):
    """Records the time spent inside the model so it can be subtracted."""

    def __init__(self, searches: int) -> None:
        super().__init__(search_then_answer(searches), context_window_tokens=128_000)
        self.spent_s = 0.0

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        started = time.perf_counter()
        try:
            return await super().generate(request, remaining_s=remaining_s)
        finally:
            self.spent_s += time.perf_counter() - started


class _TimedSearch(FakeSearch):
    def __init__(self, documents: list[FakeDocument]) -> None:
        super().__init__(documents, collection="bench")
        self.spent_s = 0.0

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        started = time.perf_counter()
        try:
            return await super().search(request, remaining_s=remaining_s)
        finally:
            self.spent_s += time.perf_counter() - started


def _documents() -> list[FakeDocument]:
    words = [
        "temporary",
        "directory",
        "file",
        "path",
        "remove",
        "create",
        "context",
        "manager",
        "automatically",
    ]
    return [
        FakeDocument(
            f"doc{i}__chunk_0",
            f"Document {i}",
            " ".join(words[(i + j) % len(words)] for j in range(120)),
            source=f"source{i % 3}",
        )
        for i in range(50)
    ]


async def _measure(runs: int, searches: int) -> list[float]:
    per_iteration_ms: list[float] = []
    documents = _documents()
    for _ in range(runs):
        model, search = _TimedModel(searches), _TimedSearch(documents)
        loop = AgentLoop(model, search)
        request = RunRequest(
            collection="bench",
            query="How do I create a temporary directory that is removed automatically?",
            mode=Mode.THINKING,
        )
        started = time.perf_counter()
        result = await loop.run(request)
        total = time.perf_counter() - started
        overhead = total - model.spent_s - search.spent_s
        per_iteration_ms.append(overhead * 1000 / result.usage.model_calls)
    return per_iteration_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--searches", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(_measure(10, args.searches))
    samples = sorted(asyncio.run(_measure(args.runs, args.searches)))
    quantiles = statistics.quantiles(samples, n=100)
    report = {
        "bench": "agent_overhead_per_iteration",
        "runs": args.runs,
        "searches_per_run": args.searches,
        "iterations_measured": args.runs * (args.searches + 1),
        "sample": "mean loop time per model turn of one run, model and search time subtracted",
        "p50_ms": round(statistics.median(samples), 3),
        "p95_ms": round(quantiles[94], 3),
        "p99_ms": round(quantiles[98], 3),
        "target_p50_ms": 5.0,
        "meets_target": statistics.median(samples) <= 5.0,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
