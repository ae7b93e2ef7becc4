"""Agent overhead per iteration, model and search excluded.

Runs THINKING-mode conversations in process against a rule-based model and the in-memory search
tool, both at zero latency, and times every model turn of the loop: the time the loop spends
between one model call and the next (pruning, tool-argument validation, filter merge, result
formatting, bookkeeping), with the fakes' own time measured and subtracted.

    python bench/agent_overhead.py [--runs 200] [--searches 5] [--tools search|all]

`--tools all`: every turn after the first also reads the best result's document, counts by
source and calculates, so the time of the read, count and calculate tools is in the figure.

Prints JSON (p50/p95/p99 ms per iteration, target p50 <= 5 ms; also the p50 per run and the model
turns of a run: compare versions per run when their turn counts differ — a version that saves a
model turn spreads the same work over fewer turns) and writes bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from services.agent.loop import AgentLoop
from services.agent.messages import Role
from services.agent.ports import ModelRequest, ModelResponse
from services.agent.run import Mode, RunRequest
from services.agent.search import (
    CountRequest,
    DocumentChunks,
    DocumentCount,
    ReadRequest,
    SearchPage,
    SearchRequest,
)
from services.agent.testing import (
    FunctionModel,
    answer_call,
    calculate_call,
    raw_call,
    read_call,
    search_call,
    search_then_answer,
    turn,
)
from tests.agent.fake_search import FakeDocument, FakeSearch

RESULTS = Path(__file__).parent / "results" / "agent_overhead.json"


_RESULT_ID = re.compile(r"^### \[([^\]]+)\]", re.MULTILINE)


def _every_tool(searches: int) -> Callable[[ModelRequest], ModelResponse]:
    """A rule: search `searches` times, each turn after the first also reading the best result
    of the last search, counting by source and calculating; then answer citing that result."""

    def respond(request: ModelRequest) -> ModelResponse:
        done = sum(c.name == "search" for m in request.messages for c in m.tool_calls)
        found = [m.text for m in request.messages if m.role is Role.TOOL and "### [" in m.text]
        best = _RESULT_ID.findall(found[-1])[:1] if found else []
        query = request.messages[1].text.split("\n", 2)[1]
        offered = {t.name for t in request.tools}
        if done >= searches or "search" not in offered:
            return turn("Answering.", answer_call("The answer [1].", best))
        calls = [search_call(f"{query} {done}")]
        if best:
            calls += [
                read_call(best[0], neighbours=1),
                raw_call("count", '{"group_by": ["source"]}'),
                calculate_call("(1250 - 980) / 980 * 100"),
            ]
        return turn(f"Searching ({done + 1}).", *calls)

    return respond


class _TimedModel(FunctionModel):
    """Records the time spent inside the model so it can be subtracted."""

    def __init__(self, searches: int, *, every_tool: bool) -> None:
        rule = _every_tool(searches) if every_tool else search_then_answer(searches)
        super().__init__(rule, context_window_tokens=128_000)
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

    async def read_document(
        self, request: ReadRequest, *, remaining_s: float | None
    ) -> DocumentChunks:
        started = time.perf_counter()
        try:
            return await super().read_document(request, remaining_s=remaining_s)
        finally:
            self.spent_s += time.perf_counter() - started

    async def count_documents(
        self, request: CountRequest, *, remaining_s: float | None
    ) -> DocumentCount:
        started = time.perf_counter()
        try:
            return await super().count_documents(request, remaining_s=remaining_s)
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


async def _measure(runs: int, searches: int, *, every_tool: bool) -> list[float]:
    return [
        per_turn for per_turn, _, _ in await _measure_runs(runs, searches, every_tool=every_tool)
    ]


async def _measure_runs(
    runs: int, searches: int, *, every_tool: bool
) -> list[tuple[float, float, int]]:
    """Per run: the loop's time per model turn (ms), per run (ms), and its model turns."""
    measured: list[tuple[float, float, int]] = []
    documents = _documents()
    for _ in range(runs):
        model, search = _TimedModel(searches, every_tool=every_tool), _TimedSearch(documents)
        loop = AgentLoop(model, search)
        request = RunRequest(
            collection="bench",
            query="How do I create a temporary directory that is removed automatically?",
            mode=Mode.THINKING,
        )
        started = time.perf_counter()
        result = await loop.run(request)
        total = time.perf_counter() - started
        overhead_ms = (total - model.spent_s - search.spent_s) * 1000
        turns = result.usage.model_calls
        measured.append((overhead_ms / turns, overhead_ms, turns))
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--searches", type=int, default=5)
    parser.add_argument("--tools", choices=["search", "all"], default="all")
    args = parser.parse_args()
    every_tool = args.tools == "all"
    asyncio.run(_measure(10, args.searches, every_tool=every_tool))
    measured = asyncio.run(_measure_runs(args.runs, args.searches, every_tool=every_tool))
    samples = sorted(per_turn for per_turn, _, _ in measured)
    quantiles = statistics.quantiles(samples, n=100)
    report = {
        "bench": "agent_overhead_per_iteration",
        "runs": args.runs,
        "searches_per_run": args.searches,
        "tools": "search, read, count, calculate each turn" if every_tool else "search only",
        "iterations_measured": args.runs * (args.searches + 1),
        "sample": "mean loop time per model turn of one run, model and search time subtracted",
        "p50_ms": round(statistics.median(samples), 3),
        "p95_ms": round(quantiles[94], 3),
        "p99_ms": round(quantiles[98], 3),
        "p50_ms_per_run": round(statistics.median(per_run for _, per_run, _ in measured), 3),
        "model_turns_per_run": statistics.median(turns for _, _, turns in measured),
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
