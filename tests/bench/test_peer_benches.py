"""The peer benchmarks (`bench/peers/`) need the optional `peers` extra; without it each one says
which peer is missing, as one JSON object, and exits 2 instead of failing with a traceback.

The peer is hidden from the child interpreter (`sys.modules[name] = None` makes its import fail),
so these tests prove the same thing whether or not the extra is installed where they run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _run_without(peer: str, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    hide_and_run = (
        "import runpy, sys\n"
        f"sys.modules[{peer!r}] = None\n"
        f"sys.argv = [{script!r}, *{list(args)!r}]\n"
        f"runpy.run_path({script!r}, run_name='__main__')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", hide_and_run],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize(
    ("script", "peer"),
    [
        ("bench/peers/gateway.py", "litellm"),
        ("bench/peers/agent.py", "agents"),
        ("bench/peers/search.py", "bm25s"),
    ],
)
def test_a_peer_bench_without_its_peer_names_it_and_exits_2(script: str, peer: str) -> None:
    finished = _run_without(peer, script, "--help")
    assert finished.returncode == 2, finished.stderr
    assert "Traceback" not in finished.stderr
    report = json.loads(finished.stdout)
    assert report == {"error": f"peer not installed: {peer}; pip install -e .[peers]"}
