"""`quarry run` (what `make run` calls): three service processes up, how to ask printed, and
Ctrl-C forwarded so every child stops."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import free_port

pytestmark = pytest.mark.slow


def _read_until(process: subprocess.Popen[bytes], marker: str, timeout_s: float) -> str:
    """Raw reads (no buffered readline, which would hide data from select)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    seen = ""
    deadline = time.monotonic() + timeout_s
    while marker not in seen:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0))
        if not ready:
            raise AssertionError(f"{marker!r} not printed in time; got:\n{seen}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"quarry run exited ({process.poll()}); got:\n{seen}")
        seen += chunk.decode(errors="replace")
    return seen


def test_quarry_run_starts_three_processes_and_stops_them_on_ctrl_c(tmp_path: Path) -> None:
    ports = [str(free_port()) for _ in range(3)]
    command = [
        sys.executable,
        "-m",
        "quarry_cli.cli",
        "run",
        "--no-demo",
        "--data-dir",
        str(tmp_path),
        "--search-tool-port",
        ports[0],
        "--llm-gateway-port",
        ports[1],
        "--agent-port",
        ports[2],
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        printed = _read_until(process, "Press Ctrl-C to stop.", 120)
        children = psutil.Process(process.pid).children()
        commands = sorted(" ".join(c.cmdline()[1:3]) for c in children)
        assert commands == [
            "-m services.agent",
            "-m services.llm_gateway",
            "-m services.search_tool",
        ]
        assert 'quarry ask "How do I create a temporary directory' in printed
        assert f"127.0.0.1:{ports[2]} quarry.agent.v1.AgentService/StreamRun" in printed
        assert "route: agent = extractive" in printed
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(children, timeout=10)
        assert alive == []
    finally:
        if process.poll() is None:
            # The services run in sessions of their own: a failed test must not leave them behind.
            leftovers = psutil.Process(process.pid).children(recursive=True)
            process.kill()
            process.wait()
            for child in leftovers:
                child.kill()
            psutil.wait_procs(leftovers, timeout=10)
