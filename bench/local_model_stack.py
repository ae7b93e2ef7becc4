"""The real local model and Quarry's three services as processes, for the CI proof
(`tests/real_model/`) and `bench/answer_quality.py`.

`local_model_stack()` starts `llama_cpp.server` from `var/llm-venv` (prepared by `make
local-model`: nothing is downloaded here), waits until it answers `/v1/models`, writes the `local`
route's config (`scripts/local_model.py config`: the model with `tool_calls: json_schema`,
falling back to `extractive`), starts the search tool, the gateway and the agent on free loopback
ports, and stops everything it started on exit. Logs go under `root`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.ports import free_ports

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCAL_MODEL = REPO_ROOT / "scripts" / "local_model.py"
SERVICES = {
    "search_tool": "quarry.searchtool.v1.SearchToolService",
    "llm_gateway": "quarry.llmgateway.v1.LlmGatewayService",
    "agent": "quarry.agent.v1.AgentService",
}
STARTUP_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class LocalStack:
    agent: str
    search_tool: str
    gateway: str
    model_url: str
    logs: Path
    pids: dict[str, int]


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _wait_model(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the model server at {url} did not come up:\n{_tail(log)}")


def _wait_serving(address: str, service: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    raise RuntimeError(f"{service} at {address} did not become SERVING:\n{_tail(log)}")


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in reversed(processes):
        process.terminate()
    for process in reversed(processes):
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def local_model_stack(
    root: Path,
    *,
    model_port: int | None = None,
    threads: int = 1,
    context: int = 4096,
    data_dir: Path | None = None,
    with_model: bool = True,
    port_base: int | None = None,
    call_timeout_s: float = 900.0,
    judge: bool = False,
    expand: bool = False,
) -> Iterator[LocalStack]:
    """The model server (unless `with_model` is false: only the `extractive` route then works)
    and the three services, running until the block ends: on `port_base` and the next three
    ports (four with `judge`, the last) when given (a shared machine's assigned range), else on
    free ports, picked together. `call_timeout_s` bounds one model call (the gateway's
    `timeout_s` of the local provider): a first call that evaluates the whole uncached prompt
    takes minutes of wall time on a busy machine. `judge` also starts the judge server (`serve
    --judge`) and configures the `rerank` route on it, the agent judging its search hits there.
    `expand`: the agent expands its searches' queries with a passage the model writes
    (`agent.loop.expand_queries`)."""
    root.mkdir(parents=True, exist_ok=True)
    # picked together: a port released by one pick can be handed out again by the next
    wanted = 1 + len(SERVICES) + int(judge)
    picked = list(range(port_base, port_base + wanted)) if port_base else free_ports(wanted)
    port = model_port or picked[0]
    judge_port = picked[-1] if judge else None
    model_url = f"http://127.0.0.1:{port}/v1"
    config = root / "quarry-local.yaml"
    subprocess.run(
        [
            *(sys.executable, str(LOCAL_MODEL), "config", "--port", str(port)),
            *("--context", str(context), "--out", str(config)),
            *("--timeout-s", str(call_timeout_s)),
            *(("--judge-port", str(judge_port)) if judge_port is not None else ()),
            *(("--expand",) if expand else ()),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    env = {
        **os.environ,
        "QUARRY_AGENT_HISTORY__PATH": str(root / "agent-runs.sqlite3"),
    }
    for key in [k for k in env if k.startswith(("QUARRY_AGENT_", "QUARRY_LLM_GATEWAY_"))]:
        if key != "QUARRY_AGENT_HISTORY__PATH":
            env.pop(key)
    env.pop("QUARRY_CONFIG", None)
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    ports = dict(zip(SERVICES, picked[1 : 1 + len(SERVICES)], strict=True))
    address = {name: f"127.0.0.1:{p}" for name, p in ports.items()}
    commands = {
        "search_tool": [
            "-m",
            "services.search_tool",
            "--data-dir",
            str(data_dir or root / "data"),
        ],
        "llm_gateway": ["-m", "services.llm_gateway", "--config", str(config)],
        "agent": [
            "-m",
            "services.agent",
            "--config",
            str(config),
            "--search-tool",
            address["search_tool"],
            "--llm-gateway",
            address["llm_gateway"],
        ],
    }
    processes: list[subprocess.Popen[bytes]] = []
    pids: dict[str, int] = {}
    try:
        model_log = root / "model.log"
        model: subprocess.Popen[bytes] | None = None
        if with_model:
            with model_log.open("wb") as out:
                serve = [sys.executable, str(LOCAL_MODEL), "serve", "--port", str(port)]
                serve += ["--threads", str(threads), "--context", str(context)]
                model = subprocess.Popen(serve, stdout=out, stderr=subprocess.STDOUT, env=env)
            processes.append(model)
            pids["model"] = model.pid
        judge_server: subprocess.Popen[bytes] | None = None
        if judge_port is not None:
            with (root / "judge.log").open("wb") as out:
                serve = [sys.executable, str(LOCAL_MODEL), "serve", "--judge"]
                serve += ["--port", str(judge_port), "--threads", str(threads)]  # its own window
                judge_server = subprocess.Popen(
                    serve, stdout=out, stderr=subprocess.STDOUT, env=env
                )
            processes.append(judge_server)
            pids["judge"] = judge_server.pid
        services: list[subprocess.Popen[bytes]] = []
        for name, args in commands.items():
            log = root / f"{name}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [sys.executable, *args, "--port", str(ports[name])],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=REPO_ROOT,
                )
            processes.append(process)
            services.append(process)
            pids[name] = process.pid
        if model is not None:
            _wait_model(model_url, model, model_log)
        if judge_server is not None:
            judge_url = f"http://127.0.0.1:{judge_port}/v1"
            _wait_model(judge_url, judge_server, root / "judge.log")
        for name, process in zip(commands, services, strict=True):
            _wait_serving(address[name], SERVICES[name], process, root / f"{name}.log")
        yield LocalStack(
            agent=address["agent"],
            search_tool=address["search_tool"],
            gateway=address["llm_gateway"],
            model_url=model_url,
            logs=root,
            pids=pids,
        )
    finally:
        _stop(processes)


def model_rss_mb(pid: int) -> float:
    """Resident memory of the model server (the exec'd process keeps the pid)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux `/proc/<pid>/stat`)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dump(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
