"""`bench/accept_burst.py` compares the refusal latency of two server interpreters (or two event
loops) in one run: a small run must report both sides, every call refused, and their ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[2]


def test_the_accept_burst_bench_reports_both_interleaved_sides_and_their_ratio() -> None:
    done = subprocess.run(
        [sys.executable, "bench/accept_burst.py", "--calls", "16", "--clients", "2",
         "--trials", "2", "--busy-tasks", "0", "--spread-s", "0.05",
         "--compare-python", sys.executable],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [side["grpcio"] for side in result["sides"]] == [grpc.__version__] * 2
    for side in result["sides"]:
        assert side["refusals"] == 32  # 2 trials x 16 calls, every one RESOURCE_EXHAUSTED
        assert 0 < side["p50_ms"] <= side["p95_ms"] <= side["max_ms"]
        assert side["server_cpu_ms_per_call"] > 0
    assert result["p95_ratio_this_over_other"] > 0


def test_the_accept_burst_bench_compares_the_server_on_uvloop_with_asyncios_loop() -> None:
    done = subprocess.run(
        [sys.executable, "bench/accept_burst.py", "--calls", "16", "--clients", "2",
         "--trials", "1", "--busy-tasks", "0", "--spread-s", "0.05",
         "--loop", "uvloop", "--compare-loop", "asyncio"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [side["loop"] for side in result["sides"]] == ["uvloop", "asyncio"]
    assert [side["refusals"] for side in result["sides"]] == [16, 16]
    assert result["cpu_per_call_ratio_this_over_other"] > 0
