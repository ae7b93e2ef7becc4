"""Agent overhead per iteration, model and search excluded.

Runs THINKING-mode conversations in process against a rule-based model and the in-memory search
tool, both at zero latency, and times every model turn of the loop: the time the loop spends
between one model call and the next (pruning, tool-argument validation, filter merge, result
formatting, bookkeeping), with the fakes' own time measured and subtracted.

    python -m bench.agent_overhead [--runs 200] [--searches 5] [--tools search|all]
    python -m bench.agent_overhead --against DIR [--rounds 8] [--runs 100] [--tools all]

`--tools all`: every turn after the first also reads the best result's document, counts by
source and calculates, so the time of the read, count and calculate tools is in the figure.

Prints JSON (p50/p95/p99 ms per iteration, target p50 <= 5 ms; also the p50 per run and the model
turns of a run: compare versions per run when their turn counts differ — a version that saves a
model turn spreads the same work over fewer turns) and writes bench/results/.

`--against DIR` compares two versions on a shared machine: DIR is another source tree of Quarry
(e.g. `git worktree add /tmp/quarry-main main`, or `git archive` of a commit unpacked) whose
`bench/agent_overhead.py` prints the same report. Each round runs this bench once in DIR and once
here, as subprocesses with the same interpreter, in alternating order; it prints every round
with the load, then the medians of both sides and the ratios this / DIR (of the medians, and the
median of the rounds' own ratios) for p50 per turn and per run. Ratios survive a busy machine,
absolute milliseconds do not. The rounds rewrite DIR's `bench/results/agent_overhead.json` (use
a scratch tree); this tree's is left as it was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import subprocess
import sys
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


HERE = Path(__file__).resolve().parents[1]
"""This source tree (the repository root)."""
COMPARED = ("p50_ms", "p50_ms_per_run")


def _report_in(tree: Path, runs: int, searches: int, tools: str) -> dict[str, float]:
    """This bench's report, run once in `tree` (its own code) with this interpreter."""
    command = [sys.executable, "-m", "bench.agent_overhead", "--runs", str(runs)]
    command += ["--searches", str(searches), "--tools", tools]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    report: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def compare(against: Path, rounds: int, runs: int, searches: int, tools: str) -> dict[str, object]:
    """Rounds of one run in `against` and one here, alternating which goes first."""
    sides: dict[str, list[dict[str, float]]] = {"against": [], "here": []}
    loads = []
    for i in range(rounds):
        order = ("against", "here") if i % 2 == 0 else ("here", "against")
        for side in order:
            tree = against if side == "against" else HERE
            sides[side].append(_report_in(tree, runs, searches, tools))
        loads.append(round(os.getloadavg()[0], 2))
        figures = {s: {k: sides[s][-1][k] for k in COMPARED} for s in sides}
        print(json.dumps({"round": i, **figures, "load_1min": loads[-1]}), flush=True)
    summary: dict[str, object] = {
        "bench": "agent_overhead_compared",
        "here": str(HERE),
        "against": str(against),
        "rounds": rounds,
        "runs": runs,
        "tools": tools,
        "load_1min_min_max": [min(loads), max(loads)],
        "model_turns_per_run": {s: sides[s][-1]["model_turns_per_run"] for s in sides},
    }
    for key in COMPARED:
        here = [r[key] for r in sides["here"]]
        there = [r[key] for r in sides["against"]]
        summary[key] = {
            "against_median": round(statistics.median(there), 3),
            "here_median": round(statistics.median(here), 3),
            "ratio_here_over_against": round(statistics.median(here) / statistics.median(there), 3),
            "median_of_round_ratios": round(
                statistics.median(h / t for h, t in zip(here, there, strict=True)), 3
            ),
        }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--searches", type=int, default=5)
    parser.add_argument("--tools", choices=["search", "all"], default="all")
    parser.add_argument("--against", type=Path, help="another source tree to compare with")
    parser.add_argument("--rounds", type=int, default=8, help="with --against")
    args = parser.parse_args()
    if args.against is not None:
        against = args.against.resolve()
        if not (against / "bench" / "agent_overhead.py").is_file():
            parser.error(f"--against {against}: no bench/agent_overhead.py there")
        kept = RESULTS.read_bytes() if RESULTS.exists() else None
        try:
            summary = compare(against, args.rounds, args.runs, args.searches, args.tools)
        finally:  # the rounds here rewrote this tree's report; DIR's are DIR's
            if kept is not None:
                RESULTS.write_bytes(kept)
        print(json.dumps(summary))
        return
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
