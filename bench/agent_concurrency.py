"""200 concurrent StreamRun sessions through gRPC against a scripted model with 200 ms per turn,
with the run history (SQLite) on and off.

The agent runs as its own process (this script with `--serve`), with a rule-based model that
answers every turn after `--latency-ms` (search once, then submit an answer citing a result) and
the in-memory search tool. The parent opens `--sessions` StreamRun calls at once over one
channel and reports throughput, latency, errors and the agent process's peak RSS (VmHWM) and CPU
time. Each round runs the agent once without and once with the run history (alternating which
goes first), so the cost of persistence per run is measured side by side: the agent's CPU time
per run and the session latency, with vs without, and the runs found in the database.

    python -m bench.agent_concurrency [--sessions 200] [--latency-ms 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.ports import free_port
from services.agent.client import AgentClient, RunOptions

RESULTS = Path(__file__).parent / "results" / "agent_concurrency.json"
QUESTION = "How do I create a temporary directory that is removed automatically?"


def _documents() -> list[object]:
    from tests.agent.fake_search import FakeDocument

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
        )
        for i in range(50)
    ]


async def _serve(port: int, latency_s: float, history: str) -> None:
    import grpc
    from quarry.agent.v1 import agent_pb2_grpc

    from services.agent.config import AgentSettings, HistorySettings
    from services.agent.history import RunStore
    from services.agent.loop import AgentLoop
    from services.agent.server import SERVICE_NAME
    from services.agent.servicer import AgentServicer
    from services.agent.testing import FunctionModel, search_then_answer
    from services.common.server import ServiceRegistration, build_server, serve
    from services.common.settings import ServerSettings
    from tests.agent.fake_search import FakeSearch

    settings = AgentSettings(
        server=ServerSettings(port=port, grace_s=1),
        history=HistorySettings(enabled=bool(history), path=Path(history or "unused")),
    )
    model = FunctionModel(search_then_answer(1), latency_s=latency_s)
    search = FakeSearch(_documents(), collection="bench")  # type: ignore[arg-type]
    store = RunStore(settings.history) if history else None
    if store is not None:
        store.open()
    servicer = AgentServicer(AgentLoop(model, search), settings, store)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    await serve(build_server([ServiceRegistration(SERVICE_NAME, register)], settings.server))


async def _session(agent: AgentClient) -> tuple[float, str]:
    started = time.perf_counter()
    kinds: list[str] = []
    async for event in agent.stream_run(QUESTION, RunOptions(collection="bench", timeout_s=120)):
        kinds.append(str(event.WhichOneof("event")))
    return time.perf_counter() - started, kinds[-1] if kinds else "none"


async def _wait_ready(address: str) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from services.common.channels import open_channel

    async with open_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for _ in range(300):
            try:
                await stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                return
            except Exception:
                await asyncio.sleep(0.1)
    raise RuntimeError("the agent did not start")


async def _drive(
    address: str, sessions: int, pid: int
) -> tuple[float, float, list[tuple[float, str]]]:
    """Wall time, agent CPU seconds (after a warm-up run) and each session's outcome."""
    await _wait_ready(address)
    agent_process = psutil.Process(pid)
    async with AgentClient(address) as agent:
        await _session(agent)
        cpu = _cpu_s(agent_process)
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(_session(agent) for _ in range(sessions)))
        return time.perf_counter() - started, _cpu_s(agent_process) - cpu, list(outcomes)


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    rss: int = psutil.Process(pid).memory_info().rss
    return rss / 2**20


def _measure(args: argparse.Namespace, history: Path | None) -> dict[str, float | int]:
    """One agent process, `--sessions` concurrent runs; history on when `history` is a path."""
    port = free_port()
    child = subprocess.Popen(
        [
            *(sys.executable, "-m", "bench.agent_concurrency", "--serve", str(port)),
            *("--latency-ms", str(args.latency_ms), "--history", str(history or "")),
        ],
        cwd=Path(__file__).resolve().parent.parent,
        stderr=subprocess.DEVNULL,
    )
    try:
        wall, cpu, outcomes = asyncio.run(_drive(f"127.0.0.1:{port}", args.sessions, child.pid))
        peak = _peak_rss_mb(child.pid)
    finally:
        child.terminate()
        child.wait(timeout=15)
    latencies = sorted(t for t, _ in outcomes)
    return {
        "errors": sum(1 for _, last in outcomes if last != "done"),
        "wall_s": round(wall, 3),
        "throughput_runs_per_s": round(args.sessions / wall, 1),
        "session_p50_ms": round(statistics.median(latencies) * 1000, 1),
        "session_p95_ms": round(statistics.quantiles(latencies, n=100)[94] * 1000, 1),
        "agent_cpu_ms_per_run": round(cpu * 1000 / args.sessions, 2),
        "agent_peak_rss_mb": round(peak, 1),
        "runs_recorded": _recorded(history) if history else 0,
    }


def _recorded(path: Path) -> int:
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT COUNT(*) FROM runs WHERE status = 2").fetchone()
    return int(row[0])


def _mean(rows: list[dict[str, float | int]], key: str) -> float:
    return round(statistics.fmean(float(r[key]) for r in rows), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--rounds", type=int, default=2, help="pairs of (off, on) agent runs")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--history", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        asyncio.run(_serve(args.serve, args.latency_ms / 1000, args.history))
        return
    results: dict[str, list[dict[str, float | int]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="quarry-bench-history-") as folder:
        for round_ in range(args.rounds):
            order = ["off", "on"] if round_ % 2 == 0 else ["on", "off"]
            for mode in order:
                path = Path(folder) / f"runs-{round_}.sqlite3" if mode == "on" else None
                results[mode].append(_measure(args, path))
    off, on = results["off"], results["on"]
    report = {
        "bench": "agent_concurrent_stream_run",
        "sessions": args.sessions,
        "model_latency_ms_per_turn": args.latency_ms,
        "model_turns_per_session": 2,
        "rounds": args.rounds,
        "errors": sum(int(r["errors"]) for r in off + on),
        "history_off": off,
        "history_on": on,
        "persistence_cost": {
            "agent_cpu_ms_per_run_off": _mean(off, "agent_cpu_ms_per_run"),
            "agent_cpu_ms_per_run_on": _mean(on, "agent_cpu_ms_per_run"),
            "agent_cpu_ms_per_run_added": round(
                _mean(on, "agent_cpu_ms_per_run") - _mean(off, "agent_cpu_ms_per_run"), 2
            ),
            "session_p50_ms_ratio_on_off": round(
                _mean(on, "session_p50_ms") / _mean(off, "session_p50_ms"), 3
            ),
            "session_p95_ms_ratio_on_off": round(
                _mean(on, "session_p95_ms") / _mean(off, "session_p95_ms"), 3
            ),
            "runs_recorded_per_round": [r["runs_recorded"] for r in on],
        },
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
