"""The image's entry commands start each service from the built wheel, not from this tree.

The wheel (the `installed` fixture, tests/deploy/conftest.py) is installed into a fresh
virtualenv. Each service is then started exactly as the image starts it (`python -m
services.<name> --host ...`), from a directory outside the repository, and must become SERVING on
its readiness name and on `quarry.liveness`, on its main port and on its plaintext health port
(`server.health_port`, what the probes use).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.ports import free_ports
from services.common.server import LIVENESS_SERVICE

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 120.0
SERVICES = {
    "services.search_tool": "quarry.searchtool.v1.SearchToolService",
    "services.llm_gateway": "quarry.llmgateway.v1.LlmGatewayService",
    "services.agent": "quarry.agent.v1.AgentService",
}

pytestmark = pytest.mark.slow


def test_the_wheel_carries_the_services_and_their_data_not_the_tree(installed: Path) -> None:
    probe = (
        "import services, quarry, services.search_tool.embedding.minilm as m, pathlib;"
        "print(services.__file__); print(quarry.__file__);"
        "print(sorted(p.name for p in pathlib.Path(services.__file__).parent.glob('*/prompts/*')))"
    )
    out = subprocess.run(
        [str(installed), "-c", probe], check=True, capture_output=True, text=True, cwd="/"
    ).stdout.splitlines()
    venv = str(installed.parents[1])
    assert out[0].startswith(venv)
    assert out[1].startswith(venv)
    assert not out[0].startswith(str(ROOT))
    assert out[2] != "[]", "the agent's prompt files must be in the wheel"


def test_the_wheel_carries_the_vespa_package_the_deploy_job_sends(installed: Path) -> None:
    probe = (
        "from quarry_cli.vespa_deploy import installed_package, zip_package;"
        "import io, zipfile; package = installed_package(); print(package);"
        "print(sorted(zipfile.ZipFile(io.BytesIO(zip_package(package))).namelist()))"
    )
    out = subprocess.run(
        [str(installed), "-c", probe], check=True, capture_output=True, text=True, cwd="/"
    ).stdout.splitlines()
    assert out[0].startswith(str(installed.parents[1]))
    checked_in = ROOT / "services" / "search_tool" / "vespa" / "app"
    expected = sorted(
        p.relative_to(checked_in).as_posix() for p in checked_in.rglob("*") if p.is_file()
    )
    assert out[1] == str(expected)


def _wait_serving(address: str, names: tuple[str, ...], process: subprocess.Popen[bytes]) -> None:
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=STARTUP_TIMEOUT_S)
        health = health_pb2_grpc.HealthStub(channel)
        for name in names:
            watch = health.Watch(
                health_pb2.HealthCheckRequest(service=name), timeout=STARTUP_TIMEOUT_S
            )
            for reply in watch:
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    watch.cancel()
                    break
        assert process.poll() is None


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
    for process in started:
        assert process.wait(timeout=30) == 0, "a service must exit 0 after SIGTERM"


@pytest.mark.parametrize("module", list(SERVICES))
def test_each_image_entry_command_starts_a_service_from_the_wheel(
    module: str, installed: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    port, health_port = free_ports(2)
    log = tmp_path / "service.log"
    env = {"PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1", "HOME": str(tmp_path)}
    env["QUARRY_SEARCH_TOOL_DATA_DIR"] = str(tmp_path / "data")
    # the probes' plaintext health port, set the way the k8s config sets it (a settings field)
    prefix = "QUARRY_" + module.removeprefix("services.").upper()
    env[f"{prefix}_SERVER__HEALTH_PORT"] = str(health_port)
    command = [str(installed), "-m", module, "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        processes.append(
            subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        )
    try:
        _wait_serving(f"127.0.0.1:{port}", (SERVICES[module], LIVENESS_SERVICE), processes[-1])
        _wait_serving(
            f"127.0.0.1:{health_port}", (SERVICES[module], LIVENESS_SERVICE), processes[-1]
        )
    except Exception as error:
        raise AssertionError(f"{module} did not start:\n{log.read_text()[-3000:]}") from error
