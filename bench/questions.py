"""Questions to the caller under concurrency: `--sessions` StreamRun calls at once, each model
asking one question (`ask_user`) that the client acknowledges and answers on the same channel.

The agent runs as its own process (this script with `--serve`): a rule-based model (ask, then
search, then answer; `--latency-ms` per turn) and the in-memory search tool. For each session the
client measures the answer round trip — from receiving the `question` event to receiving
`question_closed` (AcknowledgeQuestion + AnswerQuestion + the run resuming) — and the session.
Errors: sessions that did not end in `done` or whose question did not close ANSWERED.

    python -m bench.questions [--sessions 200] [--latency-ms 0]

Prints one JSON object and writes bench/results/questions.json.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

from quarry.agent.v1 import agent_pb2

from bench.agent_concurrency import _documents, _wait_ready
from bench.harness import emit, machine, percentile
from bench.ports import free_port
from services.agent.client import AgentClient, RunOptions

RESULTS = Path(__file__).parent / "results" / "questions.json"
Outcome = tuple[float, float | None, bool]
QUERY = "How do I create a temporary directory that is removed automatically?"


async def _serve(port: int, latency_s: float) -> None:
    import grpc
    from quarry.agent.v1 import agent_pb2_grpc

    from services.agent.config import AgentSettings
    from services.agent.loop import AgentLoop
    from services.agent.messages import Role
    from services.agent.ports import ModelRequest, ModelResponse
    from services.agent.server import SERVICE_NAME
    from services.agent.servicer import AgentServicer
    from services.agent.testing import FunctionModel, answer_call, ask_call, search_call, turn
    from services.common.server import ServiceRegistration, build_server, serve
    from services.common.settings import ServerSettings
    from tests.agent.fake_search import FakeSearch

    def ask_search_answer(request: ModelRequest) -> ModelResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        if not results:
            return turn("Which one?", ask_call("Which Python version?"))
        if len(results) == 1:
            return turn("", search_call("temporary directory"))
        return turn("", answer_call("TemporaryDirectory."))

    settings = AgentSettings(server=ServerSettings(port=port, grace_s=1), log_level="WARNING")
    model = FunctionModel(ask_search_answer, latency_s=latency_s)
    search = FakeSearch(_documents(), collection="bench")  # type: ignore[arg-type]
    servicer = AgentServicer(AgentLoop(model, search), settings)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    await serve(build_server([ServiceRegistration(SERVICE_NAME, register)], settings.server))


async def _session(agent: AgentClient) -> Outcome:
    """(session seconds, answer round trip seconds, whether it ended answered and done)."""
    options = RunOptions(collection="bench", mode="thinking", tools=["ask_user"], timeout_s=120)
    started = time.perf_counter()
    asked_at = round_trip = None
    answered = done = False
    async for event in agent.stream_run(QUERY, options):
        kind = event.WhichOneof("event")
        if kind == "question":
            asked_at = time.perf_counter()
            q = event.question
            await agent.acknowledge_question(q.run_id, q.question_id)
            await agent.answer_question(q.run_id, q.question_id, "Python 3.12")
        elif kind == "question_closed" and asked_at is not None:
            round_trip = time.perf_counter() - asked_at
            answered = event.question_closed.outcome == agent_pb2.QUESTION_OUTCOME_ANSWERED
        done = kind == "done"
    return time.perf_counter() - started, round_trip, answered and done


async def _drive(
    address: str, sessions: int
) -> tuple[float, list[tuple[float, float | None, bool]]]:
    await _wait_ready(address)
    async with AgentClient(address) as agent:
        await _session(agent)
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(_session(agent) for _ in range(sessions)))
        return time.perf_counter() - started, list(outcomes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        asyncio.run(_serve(args.serve, args.latency_ms / 1000))
        return
    port = free_port()
    child = subprocess.Popen(
        [
            *(sys.executable, "-m", "bench.questions", "--serve", str(port)),
            *("--latency-ms", str(args.latency_ms)),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stderr=subprocess.DEVNULL,
    )
    try:
        wall, outcomes = asyncio.run(_drive(f"127.0.0.1:{port}", args.sessions))
    finally:
        child.terminate()
        child.wait(timeout=15)
    sessions = [s for s, _, _ in outcomes]
    round_trips = [r for _, r, _ in outcomes if r is not None]
    emit(
        {
            "bench": "questions_concurrent",
            "command": f"python -m bench.questions --sessions {args.sessions} "
            f"--latency-ms {args.latency_ms:g}",
            "sessions": args.sessions,
            "model_latency_ms_per_turn": args.latency_ms,
            "errors": sum(1 for _, _, ok in outcomes if not ok),
            "wall_s": round(wall, 3),
            "answer_round_trip_p50_ms": round(percentile(round_trips, 50) * 1000, 1),
            "answer_round_trip_p95_ms": round(percentile(round_trips, 95) * 1000, 1),
            "session_p50_ms": round(percentile(sessions, 50) * 1000, 1),
            "session_p95_ms": round(percentile(sessions, 95) * 1000, 1),
            **machine(),
        },
        RESULTS,
    )


if __name__ == "__main__":
    main()
