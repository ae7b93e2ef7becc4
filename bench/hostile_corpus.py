"""The hostile-input corpus against the three real services as processes: how many requests, what
statuses they got, and the search tool's peak memory while it answered them.

The same corpus as `tests/e2e/test_hostile_input.py` (generated requests for every RPC, random and
undecodable bytes, the named regressions), more examples per RPC. Prints one JSON object and
writes `bench/results/hostile_corpus.json`.

    python -m bench.hostile_corpus [--examples 60]
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
from tests.e2e.hostile import REGRESSIONS, UNDECODABLE, Verdict, call, generated, methods

RESULTS = Path(__file__).parent / "results" / "hostile_corpus.json"


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


def run(examples: int) -> dict[str, object]:
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
            for service, method in methods():
                channel = channels[service]
                for _ in range(examples):
                    verdicts.append(call(channel, method, generated(method).example()))
                    verdicts.append(call(channel, method, st.binary(max_size=48).example()))
                for payload in UNDECODABLE.values():
                    verdicts.append(call(channel, method, payload))
            by_method = {(s, m.name): (s, m) for s, m in methods()}
            for regression in REGRESSIONS:
                service, method = by_method[(regression.service, regression.method)]
                request = regression.request().SerializeToString()
                verdicts.append(call(channels[service], method, request))
        wall = time.monotonic() - started
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
        "slowest_s": round(max(v.seconds for v in verdicts), 3),
        "wall_s": round(wall, 1),
        "search_tool_rss_before_mb": round(started_rss / 2**20, 1),
        "search_tool_peak_rss_mb": peak.peak_mb,
        "machine": {"cpus": psutil.cpu_count(), "python": platform.python_version()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=60, help="generated requests per RPC")
    args = parser.parse_args()
    report = run(args.examples)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
