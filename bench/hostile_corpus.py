"""The hostile-input corpus against the three real services as processes: how many requests, what
statuses they got, and the search tool's peak memory while it answered them.

The same corpus as `tests/e2e/test_hostile_input.py` (generated requests for every RPC, random and
undecodable bytes, the named regressions), more examples per RPC. Then the largest request each
limit accepts (`LARGEST_ACCEPTED`), one at a time with a 600 s deadline: the report gives the
slowest accepted request per RPC, over the corpus and these. Prints one JSON object and writes
`bench/results/hostile_corpus.json` (`hostile_corpus_largest.json` with `--largest-only`).

    python -m bench.hostile_corpus [--examples 60] [--largest-only]
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

import grpc
import psutil
from hypothesis import strategies as st
from hypothesis.errors import NonInteractiveExampleWarning

from tests.e2e.conftest import running_stack
from tests.e2e.hostile import (
    LARGEST_ACCEPTED,
    REGRESSIONS,
    UNDECODABLE,
    Verdict,
    call,
    generated,
    methods,
)

RESULTS = Path(__file__).parent / "results" / "hostile_corpus.json"
LARGEST_RESULTS = RESULTS.with_name("hostile_corpus_largest.json")


class PeakRss:
    """Samples a process's resident memory every 20 ms on a thread; `peak_mb` is the highest."""

    def __init__(self, pid: int) -> None:
        self._process = psutil.Process(pid)
        self._stop = threading.Event()
        self.peak_bytes = 0
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak_bytes = max(self.peak_bytes, self._process.memory_info().rss)

    @property
    def peak_mb(self) -> float:
        return round(self.peak_bytes / 2**20, 1)


LARGEST_DEADLINE_S = 600.0


def largest(channels: dict[str, grpc.Channel]) -> list[dict[str, object]]:
    """Each of `LARGEST_ACCEPTED`, timed: its status and seconds."""
    by_method = {(s, m.name): m for s, m in methods()}
    timed: list[dict[str, object]] = []
    for request in LARGEST_ACCEPTED:
        method = by_method[(request.service, request.method)]
        path = f"/{method.containing_service.full_name}/{method.name}"
        payload = request.request().SerializeToString()
        started = time.monotonic()
        try:
            channels[request.service].unary_unary(path, None, None)(
                payload, timeout=LARGEST_DEADLINE_S
            )
            code, detail = "OK", ""
        except grpc.RpcError as error:
            code, detail = error.code().name, (error.details() or "")[:200]
        seconds = round(time.monotonic() - started, 2)
        timed.append(
            {
                "rpc": request.method,
                "request": request.name,
                "status": code,
                "seconds": seconds,
                "load_1m": round(psutil.getloadavg()[0], 2),
            }
            | ({"detail": detail} if detail else {})
        )
        print(json.dumps(timed[-1]), flush=True)
    return timed


def slowest_accepted(verdicts: list[Verdict], timed: list[dict[str, object]]) -> dict[str, object]:
    """Per RPC, the slowest request answered OK: its seconds and which request it was."""
    slowest: dict[str, tuple[float, str]] = {}
    for v in verdicts:
        rpc = v.method.rsplit("/", 1)[-1]
        if v.code == grpc.StatusCode.OK and v.seconds > slowest.get(rpc, (-1.0, ""))[0]:
            slowest[rpc] = (v.seconds, "corpus")
    for t in timed:
        rpc, seconds = str(t["rpc"]), float(t["seconds"])  # type: ignore[arg-type]
        if t["status"] == "OK" and seconds > slowest.get(rpc, (-1.0, ""))[0]:
            slowest[rpc] = (seconds, str(t["request"]))
    return {rpc: {"seconds": round(s, 2), "request": r} for rpc, (s, r) in sorted(slowest.items())}


def run(examples: int, *, largest_only: bool = False) -> dict[str, object]:
    warnings.simplefilter("ignore", NonInteractiveExampleWarning)
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory() as root, running_stack(Path(root)) as stack:
        addresses = {
            "search_tool": stack.search_tool,
            "llm_gateway": stack.gateway,
            "agent": stack.agent,
        }
        channels = {name: grpc.insecure_channel(address) for name, address in addresses.items()}
        started_rss = psutil.Process(stack.pids["search_tool"]).memory_info().rss
        started = time.monotonic()
        with PeakRss(stack.pids["search_tool"]) as peak:
            for service, method in [] if largest_only else methods():
                channel = channels[service]
                for _ in range(examples):
                    verdicts.append(call(channel, method, generated(method).example()))
                    verdicts.append(call(channel, method, st.binary(max_size=48).example()))
                for payload in UNDECODABLE.values():
                    verdicts.append(call(channel, method, payload))
            by_method = {(s, m.name): (s, m) for s, m in methods()}
            for regression in () if largest_only else REGRESSIONS:
                service, method = by_method[(regression.service, regression.method)]
                request = regression.request().SerializeToString()
                verdicts.append(call(channels[service], method, request))
            wall = time.monotonic() - started
            timed = largest(channels)
        for channel in channels.values():
            channel.close()
    statuses = Counter(v.code.name for v in verdicts)
    unacceptable = [v for v in verdicts if not v.acceptable]
    return {
        "bench": "hostile_corpus",
        "requests": len(verdicts),
        "examples_per_rpc": examples,
        "rpcs": len(methods()),
        "statuses": dict(sorted(statuses.items())),
        "unacceptable": len(unacceptable),
        "unacceptable_examples": [
            f"{v.method} {v.code.name} {v.detail[:120]}" for v in unacceptable[:5]
        ],
        "slowest_s": round(max((v.seconds for v in verdicts), default=0.0), 3),
        "largest_accepted": timed,
        "slowest_accepted_by_rpc": slowest_accepted(verdicts, timed),
        "load_average": [round(x, 2) for x in psutil.getloadavg()],
        "wall_s": round(wall, 1),
        "search_tool_rss_before_mb": round(started_rss / 2**20, 1),
        "search_tool_peak_rss_mb": peak.peak_mb,
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60, help="generated requests per RPC")
    parser.add_argument(
        "--largest-only", action="store_true", help="only the largest accepted requests"
    )
    args = parser.parse_args()
    report = run(args.examples, largest_only=args.largest_only)
    results = LARGEST_RESULTS if args.largest_only else RESULTS
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
