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

from bench.ports import free_ports

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
    ports = [str(port) for port in free_ports(3)]
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


def test_quarry_run_on_custom_ports_reports_a_stopped_child_refuses_busy_ports_and_ends_on_sighup(
    tmp_path: Path,
) -> None:
    ports = [str(port) for port in free_ports(3)]
    command = [
        sys.executable, "-m", "quarry_cli.cli", "run", "--no-demo",
        "--search-tool-port", ports[0], "--llm-gateway-port", ports[1], "--agent-port", ports[2],
    ]  # fmt: skip
    process = subprocess.Popen(
        [*command, "--data-dir", str(tmp_path / "a")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        printed = _read_until(process, "Press Ctrl-C to stop.", 120)
        assert (
            f"--mode thinking --address 127.0.0.1:{ports[2]} --search-tool 127.0.0.1:{ports[0]}"
            in printed
        )
        children = {c.cmdline()[2]: c for c in psutil.Process(process.pid).children()}
        children["services.agent"].send_signal(signal.SIGTERM)
        reported = _read_until(process, "still serving", 60)
        assert "agent stopped cleanly (exit status 0); search_tool, llm_gateway still" in reported
        assert process.poll() is None

        second = subprocess.run(
            [*command, "--data-dir", str(tmp_path / "b")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 1
        assert f"port {ports[0]} for the search_tool is in use by the search tool" in second.stderr
        assert f"port {ports[1]} for the llm_gateway is in use by the LLM gateway" in second.stderr
        assert "Traceback" not in second.stderr

        process.send_signal(signal.SIGHUP)
        assert process.wait(timeout=60) == 0
        _, alive = psutil.wait_procs(list(children.values()), timeout=10)
        assert alive == []
    finally:
        if process.poll() is None:
            leftovers = psutil.Process(process.pid).children(recursive=True)
            process.kill()
            process.wait()
            for child in leftovers:
                child.kill()
            psutil.wait_procs(leftovers, timeout=10)


def test_quarry_run_takes_its_ports_from_the_address_variables_the_clients_read_and_gives_the_config_to_the_search_tool(  # noqa: E501
    tmp_path: Path,
) -> None:
    ports = free_ports(4)
    env = {
        **os.environ,
        "QUARRY_SEARCH_TOOL_ADDRESS": f"127.0.0.1:{ports[0]}",
        "QUARRY_LLM_GATEWAY_ADDRESS": f"127.0.0.1:{ports[1]}",
        "QUARRY_AGENT_ADDRESS": f"127.0.0.1:{ports[2]}",
    }
    config = tmp_path / "quarry.yaml"
    # a setting only the search tool reads: its health-only port answers when it got the file
    config.write_text(f"search_tool:\n  server: {{health_port: {ports[3]}}}\n")
    command = [sys.executable, "-m", "quarry_cli.cli", "run", "--no-demo", "--config", str(config)]
    process = subprocess.Popen(
        [*command, "--data-dir", str(tmp_path / "var")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        printed = _read_until(process, "Press Ctrl-C to stop.", 120)
        assert f"agent        127.0.0.1:{ports[2]}" in printed
        assert "--address" not in printed  # the clients read the same variables
        search_tool = next(
            c
            for c in psutil.Process(process.pid).children()
            if "services.search_tool" in c.cmdline()
        )
        assert ["--config", str(config)] == search_tool.cmdline()[-2:]
        status = subprocess.run(
            [sys.executable, "-m", "quarry_cli.cli", "status", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert status.returncode == 0, status.stderr
        health = subprocess.run(
            [sys.executable, "-m", "quarry_cli.cli", "status", "--json",
             "--search-tool", f"127.0.0.1:{ports[3]}"],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert f'"address": "127.0.0.1:{ports[3]}", "status": "SERVING"' in health.stdout
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            leftovers = psutil.Process(process.pid).children(recursive=True)
            process.kill()
            process.wait()
            for child in leftovers:
                child.kill()
            psutil.wait_procs(leftovers, timeout=10)
