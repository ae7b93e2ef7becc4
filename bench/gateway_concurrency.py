"""300 concurrent StreamGenerate calls through one gateway process (a subprocess) to the fake
OpenAI server: errors, throughput and the gateway's peak memory.

`python bench/gateway_concurrency.py [--concurrency 300] [--rounds 3]`
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time

import grpc
import psutil
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as pb_grpc

from bench.gateway_processes import REPLY_TEXT, fake_and_gateway, percentile, write_result


class PeakMemory:
    """Samples a process's RSS every few milliseconds in a thread; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self._stop = threading.Event()
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakMemory:
        self.peak_bytes = self._process.memory_info().rss
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak_bytes = max(self.peak_bytes, self._process.memory_info().rss)


async def _one(
    stub: pb_grpc.LlmGatewayServiceStub, request: pb.StreamGenerateRequest
) -> tuple[bool, float]:
    started = time.perf_counter()
    text, completed = "", None
    try:
        async for event in stub.StreamGenerate(request, timeout=120):
            if event.HasField("text_delta"):
                text += event.text_delta.text
            elif event.HasField("completed"):
                completed = event.completed
    except grpc.aio.AioRpcError:
        return False, 0.0
    ok = completed is not None and text == REPLY_TEXT == completed.message.text
    return ok, (time.perf_counter() - started) * 1000


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


async def run(concurrency: int, rounds: int) -> dict[str, object]:
    request = pb.StreamGenerateRequest(
        messages=[pb.Message(role=pb.ROLE_USER, text="When was the Royal Society founded?")]
    )
    with fake_and_gateway() as processes:
        rss_idle = psutil.Process(processes.gateway_pid).memory_info().rss
        async with grpc.aio.insecure_channel(processes.gateway_address) as channel:
            stub = pb_grpc.LlmGatewayServiceStub(channel)
            await asyncio.gather(*(_one(stub, request) for _ in range(10)))
            outcomes: list[tuple[bool, float]] = []
            gateway, fake = (
                psutil.Process(processes.gateway_pid),
                psutil.Process(processes.fake_pid),
            )
            cpu_before = _cpu_s(gateway), _cpu_s(fake)
            with PeakMemory(processes.gateway_pid) as memory:
                started = time.perf_counter()
                for _ in range(rounds):
                    outcomes += await asyncio.gather(
                        *(_one(stub, request) for _ in range(concurrency))
                    )
                elapsed = time.perf_counter() - started
            gateway_cpu, fake_cpu = _cpu_s(gateway) - cpu_before[0], _cpu_s(fake) - cpu_before[1]
    latencies = [ms for ok, ms in outcomes if ok]
    errors = sum(1 for ok, _ in outcomes if not ok)
    return {
        "concurrency": concurrency,
        "rounds": rounds,
        "calls": len(outcomes),
        "errors": errors,
        "throughput_calls_per_s": round(len(outcomes) / elapsed, 1),
        "stream_p50_ms": round(percentile(latencies, 0.5), 1) if latencies else None,
        "stream_p95_ms": round(percentile(latencies, 0.95), 1) if latencies else None,
        "gateway_rss_idle_mb": round(rss_idle / 2**20, 1),
        "gateway_rss_peak_mb": round(memory.peak_bytes / 2**20, 1),
        "gateway_cpu_ms_per_call": round(gateway_cpu * 1000 / len(outcomes), 2),
        "fake_server_cpu_ms_per_call": round(fake_cpu * 1000 / len(outcomes), 2),
        "load_average_1m": round(psutil.getloadavg()[0], 2),
        "no_errors": errors == 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--concurrency", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    write_result("gateway_concurrency", asyncio.run(run(args.concurrency, args.rounds)))


if __name__ == "__main__":
    main()
