"""End-to-end load: the three real services as processes, offered 10 → 500 concurrent StreamRuns.

Starts the search tool, the LLM gateway (default offline route: the extractive provider) and the
agent as `python -m services.<name>` processes, ingests part of the demo corpus (the Python standard
library's documentation) through UpsertDocuments, then offers each concurrency level for a bounded
time. Every simulated caller behaves like a backend: it opens a StreamRun with a deadline, reads it
to its end, and when refused (RESOURCE_EXHAUSTED, or a retryable `error` event) waits the RetryInfo
delay before asking again, backing off further after refusals in a row (`BACKOFF_MULTIPLIER`).
The callers live in `--client-processes` separate processes, so the client side is not what
saturates first.

    python -m bench.load_e2e [--levels 10,50,200,500] [--duration 30] [--documents 400]
                             [--gc-probe]

Prints one JSON object: per level the goodput (answered runs per second), refusals and how fast
they came (p50/p95/max ms; also only those of runs started after the arrival burst), errors by
code, p50/p95 latency of answered runs, runs lost to timeouts; how late each client process's
own event loop ran; a probe's view from an idle client process (health-check latency, refusal
latency); each service's RSS at start, after ingest, at peak and after `--idle` seconds; the
machine's load. With `--gc-probe`, per level each service's garbage collections while the level
was offered: how many were full (generation 2) and their longest pause, which stops the event
loop (`bench/gc_probe/`, loaded into the service processes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import grpc
import psutil
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from bench.harness import REPO_ROOT, RESULTS_DIR, emit, machine, note, percentile
from bench.ports import free_ports
from services.common.status import details_of_rpc_error

COLLECTION = "load-e2e"
RUN_TIMEOUT_S = 30.0
"""The deadline every run is sent with (what a backend in front of Quarry would set)."""
BACKOFF_MULTIPLIER = 1.6
PROBE_INTERVAL_S = 0.25
MAX_BACKOFF_S = 10.0
"""A refused caller waits the RetryInfo delay, longer after each refusal in a row (gRPC's retry
backoff: ×1.6 up to 10 s, with ±50 % jitter), as a well-behaved backend does."""
LAG_TICK_S = 0.01
ARRIVAL_S = 0.5
"""The callers of a level arrive over this long (500 callers: 1,000 new runs a second)."""
SETTLED_AFTER_S = 2.0
"""Refusals of runs started this long after a level began are also reported on their own: the
arrival burst is over by then (`refused_after_arrival`)."""
QUESTIONS = (
    "How do I create a temporary directory that is removed automatically?",
    "How can I serialize an object to a JSON string?",
    "How do I delete a whole directory tree?",
    "What does pathlib offer to create a directory with its parents?",
    "How do I read a CSV file row by row?",
    "How can I run a function later on a timer?",
    "How do I compute a SHA-256 digest of some bytes?",
    "How do I parse command-line arguments?",
)
SERVICES = {
    "search_tool": "quarry.searchtool.v1.SearchToolService",
    "llm_gateway": "quarry.llmgateway.v1.LlmGatewayService",
    "agent": "quarry.agent.v1.AgentService",
}
STARTUP_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Outcome:
    """One StreamRun as the caller saw it."""

    kind: str
    """`answered`, `refused` (RESOURCE_EXHAUSTED before any event) or `error`."""
    code: str
    """The status or `error` event code; `OK` when answered."""
    latency_s: float
    retry_after_s: float | None
    """The delay the refusal or retryable error asked for."""
    ended_at: float = 0.0
    """Wall-clock time the run ended (`time.time()`)."""


# --- the services ---------------------------------------------------------------------------


@dataclass
class Stack:
    agent: str
    search_tool: str
    processes: dict[str, subprocess.Popen[bytes]]
    logs: Path


@contextmanager
def running_services(root: Path, extra_env: dict[str, str]) -> Iterator[Stack]:
    """The three services as processes (logs and data under `root`); stopped with SIGTERM."""
    ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
    address = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    # the run history in the bench's own directory, not in the repository's var/ (a user's own)
    env = {
        **os.environ,
        "QUARRY_AGENT_HISTORY__PATH": str(root / "runs.sqlite3"),
        # the bulk load sends 64 SciFact abstracts per request (about 30,000 word pieces of model
        # work), a trusted load over the default bound of one untrusted call (16,384)
        "QUARRY_SEARCH_TOOL_LIMITS__UPSERT_TOTAL_WORD_PIECES": "1000000",
        **extra_env,
    }
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "QUARRY_CONFIG",
    ):
        env.pop(name, None)  # the offline route, the default configuration
    commands = {
        "search_tool": ["-m", "services.search_tool", "--data-dir", str(root / "data")],
        "llm_gateway": ["-m", "services.llm_gateway"],
        "agent": [
            *("-m", "services.agent"),
            *("--search-tool", address["search_tool"], "--llm-gateway", address["llm_gateway"]),
        ],
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, args in commands.items():
            with (root / f"{name}.log").open("wb") as out:
                processes[name] = subprocess.Popen(
                    [sys.executable, *args, "--port", str(ports[name])],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=REPO_ROOT,
                )
        for name, process in processes.items():
            _wait_serving(address[name], SERVICES[name], process, root / f"{name}.log")
        yield Stack(address["agent"], address["search_tool"], processes, root)
    finally:
        for process in reversed(processes.values()):
            process.terminate()
        for process in reversed(processes.values()):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_serving(address: str, service: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline and process.poll() is None:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise RuntimeError(f"{service} at {address} did not become SERVING:\n{tail}")


def ingest(address: str, documents: int) -> dict[str, Any]:
    """Part of the demo corpus into `COLLECTION`, through the public UpsertDocuments API."""
    from quarry_cli.demo import build_corpus, document_message

    corpus = build_corpus()[:documents]
    started = time.perf_counter()
    chunks = 0
    with grpc.insecure_channel(address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        for first in range(0, len(corpus), 64):
            batch = [document_message(d) for d in corpus[first : first + 64]]
            reply = stub.UpsertDocuments(
                search_tool_pb2.UpsertDocumentsRequest(collection=COLLECTION, documents=batch),
                timeout=300,
            )
            chunks += reply.chunks_upserted
    return {
        "documents": len(corpus),
        "chunks": chunks,
        "seconds": round(time.perf_counter() - started, 1),
    }


# --- the callers (in their own processes) --------------------------------------------------


def warm_up() -> None:
    """Nothing: submitted once per client process so it is spawned and imported before a level."""
    time.sleep(1.0)


def run_callers(
    address: str, callers: int, start_at: float, duration_s: float, seed: int
) -> tuple[list[Outcome], list[float]]:
    """`callers` concurrent callers from wall-clock `start_at` for `duration_s` (then their last
    runs finish); their outcomes and how late the process's own event loop ran (its lag)."""
    time.sleep(max(0.0, start_at - time.time()))
    return asyncio.run(_callers(address, callers, duration_s, seed))


async def _callers(
    address: str, callers: int, duration_s: float, seed: int
) -> tuple[list[Outcome], list[float]]:
    outcomes: list[Outcome] = []
    stop_at = time.monotonic() + duration_s
    options = [("grpc.max_receive_message_length", 32 * 2**20)]
    lags: list[float] = []
    lag = asyncio.create_task(_loop_lag(stop_at, lags))
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        rng = random.Random(seed)
        await asyncio.gather(
            *(_caller(stub, stop_at, random.Random(rng.random()), outcomes) for _ in range(callers))
        )
    await lag
    return outcomes, lags


async def _loop_lag(stop_at: float, lags: list[float]) -> None:
    """How late a 10 ms timer fires on this process's loop: the time any reply waits before its
    caller sees it (a refusal's latency as a caller measures it includes this)."""
    while time.monotonic() < stop_at:
        due = time.perf_counter() + LAG_TICK_S
        await asyncio.sleep(LAG_TICK_S)
        lags.append(max(0.0, time.perf_counter() - due))


async def _caller(
    stub: agent_pb2_grpc.AgentServiceStub,
    stop_at: float,
    rng: random.Random,
    outcomes: list[Outcome],
) -> None:
    await asyncio.sleep(rng.uniform(0, ARRIVAL_S))  # callers do not arrive in one instant
    refusals_in_a_row = 0
    while time.monotonic() < stop_at:
        outcome = await _one_run(stub, rng.choice(QUESTIONS))
        outcome = replace(outcome, ended_at=time.time())
        outcomes.append(outcome)
        if outcome.kind == "answered" or outcome.retry_after_s is None:
            refusals_in_a_row = 0
            continue
        refusals_in_a_row += 1
        backoff = outcome.retry_after_s * BACKOFF_MULTIPLIER ** (refusals_in_a_row - 1)
        await asyncio.sleep(min(backoff, MAX_BACKOFF_S) * rng.uniform(0.5, 1.5))


async def _one_run(stub: agent_pb2_grpc.AgentServiceStub, question: str) -> Outcome:
    request = agent_pb2.StreamRunRequest(query=question, collection=COLLECTION)
    started = time.perf_counter()
    events = 0
    try:
        async for message in stub.StreamRun(request, timeout=RUN_TIMEOUT_S):
            events += 1
            kind = message.WhichOneof("event")
            if kind == "done":
                return Outcome("answered", "OK", time.perf_counter() - started, None)
            if kind == "error":
                error = message.error
                delay = (
                    error.retry_after.ToMilliseconds() / 1000
                    if error.HasField("retry_after")
                    else None
                )
                return Outcome("error", error.code, time.perf_counter() - started, delay)
    except grpc.aio.AioRpcError as failure:
        details = details_of_rpc_error(failure)
        elapsed = time.perf_counter() - started
        kind = "refused" if events == 0 and details.code.name == "RESOURCE_EXHAUSTED" else "error"
        return Outcome(kind, details.code.name, elapsed, details.retry_after_s)
    return Outcome("error", "NO_RESULT", time.perf_counter() - started, None)


def run_probe(address: str, start_at: float, duration_s: float) -> dict[str, Any]:
    """From a process of its own, unburdened by the callers: every `PROBE_INTERVAL_S` one health
    check (never refused: how fast the agent answers at all) and one StreamRun (how fast a refusal
    comes to a client that is not itself busy)."""
    time.sleep(max(0.0, start_at - time.time()))
    return asyncio.run(_probe(address, duration_s))


async def _probe(address: str, duration_s: float) -> dict[str, Any]:
    health_s: list[float] = []
    refused_s: list[float] = []
    stop_at = time.monotonic() + duration_s
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        agent = agent_pb2_grpc.AgentServiceStub(channel)
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            await health.Check(health_pb2.HealthCheckRequest(), timeout=RUN_TIMEOUT_S)
            health_s.append(time.perf_counter() - started)
            outcome = await _one_run(agent, QUESTIONS[0])
            if outcome.kind == "refused":
                refused_s.append(outcome.latency_s)
            await asyncio.sleep(PROBE_INTERVAL_S)
    return {
        "health_checks": len(health_s),
        "health_p50_ms": _ms(percentile(health_s, 50)),
        "health_p95_ms": _ms(percentile(health_s, 95)),
        "health_max_ms": _ms(max(health_s, default=float("nan"))),
        "refused": len(refused_s),
        "refused_p50_ms": _ms(percentile(refused_s, 50)),
        "refused_p95_ms": _ms(percentile(refused_s, 95)),
    }


# --- measuring ------------------------------------------------------------------------------


class RssSampler:
    """Each service's RSS, sampled every `interval_s` on a thread, peak kept."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.5) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak_mb = dict.fromkeys(pids, 0.0)
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def now_mb(self) -> dict[str, float]:
        return {name: round(p.memory_info().rss / 2**20, 1) for name, p in self.processes.items()}

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self._interval_s):
            for name, mb in self.now_mb().items():
                self.peak_mb[name] = max(self.peak_mb[name], mb)


def offer(
    pool: ProcessPoolExecutor,
    address: str,
    callers: int,
    duration_s: float,
    processes: int,
    services: dict[str, psutil.Process],
) -> dict[str, Any]:
    """One level: `callers` concurrent callers spread over `processes` client processes, all
    starting at the same instant; goodput counts from then until the last run ended."""
    shares = [
        callers // processes + (1 if i < callers % processes else 0) for i in range(processes)
    ]
    shares = [s for s in shares if s]
    load_before = os.getloadavg()[0]
    start_at = time.time() + 1.0
    service_pids = {p.pid for p in services.values()}
    clients = [c for c in psutil.Process().children() if c.pid not in service_pids]
    cpu_before = {name: sum(p.cpu_times()[:2]) for name, p in services.items()}
    clients_before = sum(sum(p.cpu_times()[:2]) for p in clients)
    probe = pool.submit(run_probe, address, start_at, duration_s)
    futures = [
        pool.submit(run_callers, address, share, start_at, duration_s, seed)
        for seed, share in enumerate(shares)
    ]
    results = [f.result() for f in futures]
    outcomes = [o for caller_outcomes, _ in results for o in caller_outcomes]
    lags = [lag for _, caller_lags in results for lag in caller_lags]
    wall = max((o.ended_at for o in outcomes), default=start_at) - start_at
    cpu = {
        name: round((sum(p.cpu_times()[:2]) - cpu_before[name]) / wall, 2)
        for name, p in services.items()
    }
    cpu["client_processes"] = round(
        (sum(sum(p.cpu_times()[:2]) for p in clients) - clients_before) / wall, 2
    )
    return {
        **summarize(callers, outcomes, wall, load_before),
        "refused_after_arrival": _refusals_after(outcomes, start_at + SETTLED_AFTER_S),
        "client_loop_lag_ms": {
            "p50": _ms(percentile(lags, 50)),
            "p95": _ms(percentile(lags, 95)),
            "max": _ms(max(lags, default=float("nan"))),
        },
        "probe": probe.result(),
        "cpu_cores_used": cpu,
    }


def _refusals_after(outcomes: list[Outcome], settled_at: float) -> dict[str, Any]:
    """The refusals of runs started once the arrival burst was over: the steady state."""
    late = [
        o.latency_s
        for o in outcomes
        if o.kind == "refused" and o.ended_at - o.latency_s >= settled_at
    ]
    return {
        "refused": len(late),
        "p95_ms": _ms(percentile(late, 95)),
        "max_ms": _ms(max(late, default=float("nan"))),
        "over_100ms": sum(1 for r in late if r > 0.1),
    }


def summarize(
    callers: int, outcomes: list[Outcome], wall_s: float, load_before: float
) -> dict[str, Any]:
    answered = [o.latency_s for o in outcomes if o.kind == "answered"]
    refused = [o.latency_s for o in outcomes if o.kind == "refused"]
    errors = Counter(o.code for o in outcomes if o.kind == "error")
    return {
        "concurrent": callers,
        "wall_s": round(wall_s, 1),
        "runs": len(outcomes),
        "answered": len(answered),
        "goodput_runs_per_s": round(len(answered) / wall_s, 2),
        "answered_p50_ms": _ms(percentile(answered, 50)),
        "answered_p95_ms": _ms(percentile(answered, 95)),
        "refused": len(refused),
        "refused_p50_ms": _ms(percentile(refused, 50)),
        "refused_p95_ms": _ms(percentile(refused, 95)),
        "refused_max_ms": _ms(max(refused, default=float("nan"))),
        "refused_over_100ms": sum(1 for r in refused if r > 0.1),
        "errors_by_code": dict(errors.most_common()),
        "lost_to_timeouts": errors.get("DEADLINE_EXCEEDED", 0),
        "load_average_1m_before": round(load_before, 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }


def _gc_probe_env(root: Path, extra_env: dict[str, str]) -> dict[str, str]:
    """The services' environment additions that load `bench/gc_probe/sitecustomize.py`."""
    (root / "gc").mkdir()
    paths = [str(REPO_ROOT / "bench" / "gc_probe"), extra_env.get("PYTHONPATH", "")]
    return {
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
        "QUARRY_BENCH_GC_PROBE_DIR": str(root / "gc"),
    }


def gc_pauses(probe_dir: Path, began: float, ended: float) -> dict[str, dict[str, Any]]:
    """Per service, its collections that ended between `began` and `ended` (wall clock): how
    many, how many were full (generation 2), and the longest pause of each kind."""
    pauses: dict[str, dict[str, Any]] = {}
    for path in sorted(probe_dir.glob("*.json")):
        probe = json.loads(path.read_text())
        inside = [(g, ms) for g, ms, at in probe["collections"] if began <= at <= ended]
        full = [ms for g, ms in inside if g == 2]
        pauses[probe["service"]] = {
            "collections": len(inside),
            "full_collections": len(full),
            "longest_full_ms": round(max(full), 1) if full else None,
            "longest_young_ms": round(max((ms for g, ms in inside if g < 2), default=0.0), 1),
        }
    return pauses


def _grpcio_version(extra_env: dict[str, str]) -> str:
    """The grpcio the services import with `extra_env` (a `PYTHONPATH` in it can swap it)."""
    done = subprocess.run(
        [sys.executable, "-c", "import grpc; print(grpc.__version__)"],
        env={**os.environ, **extra_env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _ms(seconds: float) -> float | None:
    return None if seconds != seconds else round(seconds * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="10,50,200,500", help="concurrent callers per level")
    parser.add_argument(
        "--duration", type=float, default=30.0, help="seconds each level is offered"
    )
    parser.add_argument("--documents", type=int, default=400, help="demo documents to ingest")
    parser.add_argument(
        "--client-processes", type=int, default=8, help="processes the callers are spread over"
    )
    parser.add_argument("--idle", type=float, default=15.0, help="seconds before the after-RSS")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "load_e2e.json")
    parser.add_argument(
        "--gc-probe",
        action="store_true",
        help="record the services' garbage-collection pauses (bench/gc_probe/)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment of the services, e.g. QUARRY_AGENT_SERVER__MAX_CONCURRENT_RPCS=16",
    )
    args = parser.parse_args()
    levels = [int(level) for level in args.levels.split(",") if level]
    extra_env = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="quarry-load-") as workdir:
        root = Path(workdir)
        service_env = {**extra_env, **(_gc_probe_env(root, extra_env) if args.gc_probe else {})}
        spans: list[tuple[float, float]] = []
        note(f"starting the three services (logs under {root}) ...")
        with running_services(root, service_env) as stack:
            pids = {name: p.pid for name, p in stack.processes.items()}
            sampler = RssSampler(pids)
            rss_started = sampler.now_mb()
            note(f"ingesting {args.documents} demo documents ...")
            collection = ingest(stack.search_tool, args.documents)
            rss_before = sampler.now_mb()
            results = []
            processes = args.client_processes
            with (
                sampler,
                ProcessPoolExecutor(processes + 1, mp_context=get_context("spawn")) as pool,
            ):
                for done in [pool.submit(warm_up) for _ in range(processes + 1)]:
                    done.result()
                for callers in levels:
                    note(f"{callers} concurrent callers for {args.duration:g} s ...")
                    began = time.time()
                    results.append(
                        offer(
                            pool, stack.agent, callers, args.duration, processes, sampler.processes
                        )
                    )
                    spans.append((began, time.time()))
                    note(f"  {results[-1]}")
                note(f"idle for {args.idle:g} s ...")
                time.sleep(args.idle)
            rss_after = sampler.now_mb()
        if args.gc_probe:  # the services wrote their collections as they exited
            for result, (began, ended) in zip(results, spans, strict=True):
                result["gc_pauses"] = gc_pauses(root / "gc", began, ended)
    peak = max((r["goodput_runs_per_s"] for r in results), default=0.0)
    for result in results:
        result["share_of_peak_goodput"] = (
            round(result["goodput_runs_per_s"] / peak, 3) if peak else None
        )
    emit(
        {
            "bench": "load_e2e",
            "route": "extractive (default offline route)",
            "run_timeout_s": RUN_TIMEOUT_S,
            "duration_s_per_level": args.duration,
            "client_processes": args.client_processes,
            "collection": collection,
            "service_env": extra_env,
            "gc_probe": args.gc_probe,
            "service_grpcio": _grpcio_version(extra_env),
            "levels": results,
            "peak_goodput_runs_per_s": peak,
            "rss_mb": {
                name: {
                    "started": rss_started[name],
                    "before": rss_before[name],
                    "peak": sampler.peak_mb[name],
                    "after_idle": rss_after[name],
                }
                for name in SERVICES
            },
            "machine": machine(),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
