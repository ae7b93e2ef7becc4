"""Start the fake OpenAI server and the gateway as subprocesses, for the gateway benchmarks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.ports import free_port

BENCH_KEY_ENV = "QUARRY_BENCH_OPENAI_KEY"
BENCH_KEY = "sk-bench-not-a-real-key-0000"
MODEL = "bench-model"
PROVIDER = f"openai/{MODEL}"
REPLY_TEXT = "The Royal Society was founded in 1660 and received its charter in 1662."


@dataclass
class Processes:
    fake_base_url: str
    gateway_address: str
    gateway_pid: int
    fake_pid: int


@contextmanager
def fake_and_gateway(chunk_size: int = 8) -> Iterator[Processes]:
    """A fake OpenAI server always answering `REPLY_TEXT`, and a gateway routing to it."""
    with tempfile.TemporaryDirectory() as workdir:
        script = Path(workdir) / "script.yaml"
        script.write_text(
            yaml.safe_dump(
                {"replies": [], "default": {"text": REPLY_TEXT, "chunk_size": chunk_size}}
            )
        )
        fake = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.llm_gateway.testing.fake_openai",
                "--script",
                str(script),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert fake.stdout is not None
            base_url = json.loads(fake.stdout.readline())["base_url"]
            port = free_port()
            config = Path(workdir) / "quarry.yaml"
            config.write_text(_gateway_config(base_url, port))
            env = {**os.environ, BENCH_KEY_ENV: BENCH_KEY}
            gateway = subprocess.Popen(
                [sys.executable, "-m", "services.llm_gateway", "--config", str(config)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                address = f"127.0.0.1:{port}"
                _wait_serving(address)
                yield Processes(base_url, address, gateway.pid, fake.pid)
            finally:
                gateway.terminate()
                gateway.wait(10)
        finally:
            fake.terminate()
            fake.wait(10)


def _gateway_config(base_url: str, port: int) -> str:
    section = {
        "server": {"port": port, "grace_s": 1},
        "log_level": "WARNING",
        "providers": [
            {
                "kind": "openai",
                "model": MODEL,
                "base_url": base_url,
                "api_key_env": BENCH_KEY_ENV,
                "context_window_tokens": 128_000,
                "timeout_s": 30,
            }
        ],
        "routes": {"agent": [PROVIDER], "offline": ["extractive"]},
    }
    return yaml.safe_dump({"llm_gateway": section})


def _wait_serving(address: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                time.sleep(0.1)
    raise TimeoutError(f"gateway at {address} did not become ready")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
    return ordered[index]


def write_result(name: str, result: dict[str, object]) -> None:
    text = json.dumps(result, indent=2)
    print(text)
    out = Path(__file__).parent / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
