"""Quarry's agent loop against openai-agents-python's `Runner`, interleaved in one run: loop
overhead per iteration (model turn), with a scripted model and a zero-latency search tool.

    pip install -e '.[dev,peers]'
    python bench/peers/agent.py [--runs N] [--searches S] [--out bench/results/peers_agent.json]

Both sides run the same conversation: the model calls `search` S times (one call per turn), then
answers; S + 1 model turns per run. Each side's model and search time are measured and
subtracted, leaving the loop's own time per turn:

* Quarry: `bench/agent_overhead.py`'s THINKING-mode run, search tool only (`AgentLoop` with a
  rule-based `FunctionModel` and the in-memory `FakeSearch`): pruning, tool-argument validation,
  filter merge, result formatting and bookkeeping are in Quarry's figure.
* openai-agents: `Runner.run` with a scripted `Model` returning the same tool calls and a
  `function_tool` search returning a pre-formatted result of the size Quarry formats (so the
  peer's figure carries no result formatting); tracing disabled (it would export to the network).

Runs alternate between the two sides. Prints one JSON object with both sides' p50/p95 and the
ratio (Quarry / peer; below 1: Quarry's loop is lighter). Exits 2 when the peer is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

try:
    from agents import (
        Agent,
        Model,
        ModelResponse,
        ModelSettings,
        RunConfig,
        Runner,
        Usage,
        function_tool,
        set_tracing_disabled,
    )
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )
except ImportError as missing:  # the peer is an optional extra
    print(f'{{"error": "peer not installed: {missing.name}; pip install -e .[peers]"}}')
    raise SystemExit(2) from None

from bench.agent_overhead import _measure as quarry_runs
from bench.harness import RESULTS_DIR, emit, machine, percentile

QUESTION = "How do I create a temporary directory that is removed automatically?"
WARMUP_RUNS = 10
RESULT_TEXT = "\n\n".join(
    f"### [{n}] Document {n} (doc{n}__chunk_0)\n"
    + " ".join(["temporary directory file path remove create context manager"] * 12)
    for n in range(1, 11)
)
"""A search result of about the size Quarry's loop formats for ten hits."""


class ScriptedModel(Model):  # type: ignore[misc]
    """Calls `search` `searches` times, one call per turn, then answers; records its own time."""

    def __init__(self, searches: int) -> None:
        self.searches = searches
        self.turns = 0
        self.spent_s = 0.0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        started = time.perf_counter()
        try:
            self.turns += 1
            if self.turns <= self.searches:
                call = ResponseFunctionToolCall(
                    id=f"fc_{self.turns}",
                    call_id=f"call_{self.turns}",
                    name="search",
                    arguments=json.dumps({"query": f"temporary directory {self.turns}"}),
                    type="function_call",
                    status="completed",
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(
                text="Use TemporaryDirectory [1].", type="output_text", annotations=[]
            )
            message = ResponseOutputMessage(
                id="msg_final", content=[text], role="assistant", status="completed", type="message"
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)
        finally:
            self.spent_s += time.perf_counter() - started

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the bench runs without streaming")


class SearchTime:
    spent_s = 0.0


def peer_agent(model: ScriptedModel, clock: type[SearchTime]) -> Agent[Any]:
    @function_tool  # type: ignore[untyped-decorator]
    async def search(query: str) -> str:
        """Search the document collection."""
        started = time.perf_counter()
        try:
            return RESULT_TEXT
        finally:
            clock.spent_s += time.perf_counter() - started

    return Agent(
        name="searcher",
        instructions="You answer questions by searching a document collection.",
        model=model,
        model_settings=ModelSettings(),
        tools=[search],
    )


async def peer_run(searches: int) -> float:
    """Loop time per model turn of one openai-agents run, model and search time subtracted."""
    model = ScriptedModel(searches)

    class Clock(SearchTime):
        spent_s = 0.0

    agent = peer_agent(model, Clock)
    started = time.perf_counter()
    result = await Runner.run(
        agent, QUESTION, max_turns=searches + 2, run_config=RunConfig(tracing_disabled=True)
    )
    total = time.perf_counter() - started
    assert "TemporaryDirectory" in str(result.final_output), result.final_output
    assert model.turns == searches + 1
    return (total - model.spent_s - Clock.spent_s) * 1000 / model.turns


async def run(runs: int, searches: int) -> dict[str, Any]:
    set_tracing_disabled(True)
    for _ in range(WARMUP_RUNS):
        await quarry_runs(1, searches, every_tool=False)
        await peer_run(searches)
    quarry: list[float] = []
    peer: list[float] = []
    for n in range(runs):
        order = [("quarry", quarry), ("peer", peer)]
        for side, samples in order if n % 2 == 0 else order[::-1]:
            if side == "quarry":
                samples.extend(await quarry_runs(1, searches, every_tool=False))
            else:
                samples.append(await peer_run(searches))
    q50, p50 = percentile(quarry, 50), percentile(peer, 50)
    return {
        "benchmark": "peers_agent",
        "peer": f"openai-agents {_version('openai-agents')} Runner.run, scripted Model",
        "runs_per_side": runs,
        "model_turns_per_run": searches + 1,
        "sample": "loop time per model turn of one run, model and search time subtracted",
        "quarry_p50_ms": round(q50, 3),
        "quarry_p95_ms": round(percentile(quarry, 95), 3),
        "peer_p50_ms": round(p50, 3),
        "peer_p95_ms": round(percentile(peer, 95), 3),
        "ratio_quarry_to_peer_p50": round(q50 / p50, 3),
        "machine": machine(),
    }


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--searches", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "peers_agent.json")
    args = parser.parse_args()
    if args.runs < 1 or args.searches < 1:
        parser.error("--runs and --searches must be at least 1")
    emit(asyncio.run(run(args.runs, args.searches)), args.out)


if __name__ == "__main__":
    main()
