"""How fast a grpc.aio server refuses a burst of calls while its event loop is busy.

    python bench/accept_burst.py                                  # the installed grpcio
    python bench/accept_burst.py --compare-python /tmp/g185/bin/python
        # the same trials, interleaved, with the server under another interpreter (another
        # grpcio): python -m venv /tmp/g185 && /tmp/g185/bin/pip install grpcio==1.85.1
    python bench/accept_burst.py --loop uvloop --compare-loop asyncio --busy-tasks 0
        # the same interpreter, the server on uvloop vs asyncio's own loop (`server.event_loop`)

Why it exists: Quarry's agent refuses the excess of an arrival burst (issue 17: every refused run
refused within 100 ms), and each refusal first has to be *accepted* by grpc.aio's accept loop.
grpcio 1.84.0 changed that loop (grpc/grpc#41796, registered methods): every incoming call now
costs a task, an `asyncio.wait` and two more event-loop hops before the next call is requested
from gRPC core (the regression grpc/grpc#43461 fixes). On an idle loop that is cheap; on a loop
busy with admitted runs each hop waits a whole turn of the loop, so a burst's last refusals wait
seconds. This bench is why `pyproject.toml` pins grpcio 1.83.2.

What it does: a server process (only grpcio: any interpreter with grpcio can run it) refuses every
call of a streaming method at once, the way Quarry's `admission.refusing_handler` does, while
`--busy-tasks` coroutines keep its loop busy (each runs `--busy-ms` of CPU, then yields: the
admitted runs' work). `--clients` client processes start `--calls` calls spread evenly over
`--spread-s` seconds and time each until its status arrives. Printed: one JSON object with, per
server interpreter, the grpcio version, the refusal latency p50/p95/max over all trials, how many
took longer than 100 ms, the server's CPU per call (with `--busy-tasks 0`: otherwise it is
mostly the busy tasks'), and the ratios of the p95s and of the CPU per call (this over other).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from typing import Any

import grpc

SERVICE, METHOD = "bench.Burst", "Run"
LOOPS = ("asyncio", "uvloop")


def _loop_factory(loop: str) -> Any:
    """The server's event loop: asyncio's own (None) or uvloop's (imported only when asked for,
    so an interpreter without uvloop can still serve the asyncio side)."""
    if loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


async def _serve(busy_tasks: int, busy_ms: float) -> None:
    async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        context.set_code(grpc.StatusCode.RESOURCE_EXHAUSTED)
        context.set_details("full")
        nothing: tuple[Any, ...] = ()
        for item in nothing:
            yield item

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                SERVICE, {METHOD: grpc.stream_stream_rpc_method_handler(refuse)}
            ),
        )
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def busy() -> None:
        while True:
            until = time.perf_counter() + busy_ms / 1000
            while time.perf_counter() < until:
                pass
            await asyncio.sleep(0)

    workers = [asyncio.create_task(busy()) for _ in range(busy_tasks)]
    loop = asyncio.get_running_loop()
    print(
        json.dumps(
            {"port": port, "grpcio": grpc.__version__, "loop": type(loop).__module__.split(".")[0]}
        ),
        flush=True,
    )
    # each line on stdin asks for the process's CPU time (every thread, nanosecond clock: /proc's
    # ticks are 10 ms, too coarse for a few dozen calls); end of stdin stops the server
    while await loop.run_in_executor(None, sys.stdin.readline):
        print(json.dumps({"cpu_s": time.process_time()}), flush=True)
    for worker in workers:
        worker.cancel()
    await server.stop(None)


def _client(port: int, calls: int, spread_s: float, out: Any) -> None:
    async def main() -> list[float]:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await channel.channel_ready()
            method = channel.unary_stream(f"/{SERVICE}/{METHOD}", None, None)
            latencies: list[float] = []

            async def one(delay: float) -> None:
                await asyncio.sleep(delay)
                started = time.perf_counter()
                call = method(b"")
                code = await call.code()
                if code != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise RuntimeError(
                        f"expected RESOURCE_EXHAUSTED, got {code}: {await call.details()}"
                    )
                latencies.append((time.perf_counter() - started) * 1000)

            await asyncio.gather(*(one(spread_s * i / calls) for i in range(calls)))
            return latencies

    out.put(asyncio.run(main()))


def _cpu_s(server: subprocess.Popen[str]) -> float:
    """The server process's CPU time so far, as it reports it."""
    assert server.stdin is not None
    assert server.stdout is not None
    server.stdin.write("cpu\n")
    server.stdin.flush()
    return float(json.loads(server.stdout.readline())["cpu_s"])


def trial(python: str, loop: str, args: argparse.Namespace) -> dict[str, Any]:
    server = subprocess.Popen(
        [python, __file__, "--serve", "--loop", loop, "--busy-tasks", str(args.busy_tasks),
         "--busy-ms", str(args.busy_ms)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        hello = json.loads(server.stdout.readline())
        time.sleep(0.5)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        per_client = args.calls // args.clients
        clients = [
            ctx.Process(target=_client, args=(hello["port"], per_client, args.spread_s, out))
            for _ in range(args.clients)
        ]
        cpu_before = _cpu_s(server)
        for client in clients:
            client.start()
        latencies: list[float] = []
        for _ in clients:
            latencies += out.get(timeout=120)
        for client in clients:
            client.join()
        cpu_ms = (_cpu_s(server) - cpu_before) * 1000
    finally:
        server.terminate()
        server.wait()
    return {
        "grpcio": hello["grpcio"],
        "loop": hello["loop"],
        "latencies": latencies,
        "cpu_ms": cpu_ms,
    }


def summary(trials: list[dict[str, Any]], busy: bool) -> dict[str, Any]:
    latencies = sorted(x for t in trials for x in t["latencies"])

    def pct(q: float) -> float:
        return round(float(latencies[int(q * (len(latencies) - 1))]), 1)

    result = {
        "grpcio": trials[0]["grpcio"],
        "loop": trials[0]["loop"],
        "refusals": len(latencies),
        "p50_ms": pct(0.5),
        "p95_ms": pct(0.95),
        "max_ms": round(latencies[-1], 1),
        "slower_than_100ms": sum(x > 100 for x in latencies),
    }
    if not busy:  # with busy tasks the server's CPU is mostly theirs
        result["server_cpu_ms_per_call"] = round(
            sum(t["cpu_ms"] for t in trials) / len(latencies), 3
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--busy-tasks", type=int, default=4)
    parser.add_argument("--busy-ms", type=float, default=0.25)
    parser.add_argument("--calls", type=int, default=496)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--spread-s", type=float, default=0.5)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--loop", choices=LOOPS, default="asyncio", help="the server's loop")
    parser.add_argument("--compare-python", help="a second interpreter for the server side")
    parser.add_argument("--compare-loop", choices=LOOPS, help="a second loop for the server side")
    args = parser.parse_args()
    if args.serve:
        with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
            runner.run(_serve(args.busy_tasks, args.busy_ms))
        return
    sides = [(sys.executable, args.loop)]
    if args.compare_python or args.compare_loop:
        sides.append((args.compare_python or sys.executable, args.compare_loop or args.loop))
    runs: list[list[dict[str, Any]]] = [[] for _ in sides]
    for _ in range(args.trials):
        for side, (python, loop) in enumerate(sides):  # interleaved: both see the same machine
            runs[side].append(trial(python, loop, args))
    result: dict[str, Any] = {
        "bench": "accept_burst",
        "calls_per_trial": args.calls,
        "spread_s": args.spread_s,
        "clients": args.clients,
        "busy_tasks": args.busy_tasks,
        "busy_ms": args.busy_ms,
        "trials": args.trials,
        "load_avg": os.getloadavg()[0],
        "sides": [summary(side, args.busy_tasks > 0) for side in runs],
    }
    if len(sides) == 2:
        this, other = result["sides"]
        result["p95_ratio_this_over_other"] = round(this["p95_ms"] / other["p95_ms"], 3)
        if "server_cpu_ms_per_call" in this:
            result["cpu_per_call_ratio_this_over_other"] = round(
                this["server_cpu_ms_per_call"] / other["server_cpu_ms_per_call"], 3
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
