"""k8s/README.md steps 2 and 4, as written, against the three services on 127.0.0.1.

Step 2's `quarry keygen` lines run through the real CLI (in a scratch directory, `>> keys.yaml`
appended as the shell would); the three services start from the rendered embedded overlay's
ConfigMap (keys file moved to that directory, listening on 127.0.0.1 port 0, the agent pointed at
the other two, its gateway key from `agent.key` as the Secret passes it); then step 4's grpcurl
commands run with the real grpcurl, the port-forwarded addresses replaced by the local ones.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from quarry_cli.cli import main as quarry
from services.agent.config import AgentSettings
from services.agent.server import build_agent_server
from services.common.server import LIVENESS_SERVICE, QuarryServer
from services.common.settings import load_settings
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.server import build_gateway_server
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import EmbeddingSettings, build_embedder
from services.search_tool.server import build_search_tool_server
from tests.common.certs import issue, make_ca
from tests.deploy.test_manifests import rendered
from tests.grpcurl.test_grpcurl import GRPCURL

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "k8s" / "README.md"
FORWARDED = {"search_tool": "127.0.0.1:50051", "agent": "127.0.0.1:50053"}
LOCAL = {"host": "127.0.0.1", "port": 0, "health_port": 0}
GRPCURL_TIMEOUT_S = 120.0
TLS_MOUNT = "/etc/quarry-tls"

pytestmark = pytest.mark.slow


def _section(title: str) -> list[str]:
    """The shell lines (continuations joined) of the `sh` blocks under the heading `title`."""
    text = README.read_text()
    body = text.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", body, flags=re.S)
    commands, pending = [], ""
    for line in "\n".join(blocks).replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line.split("  #", 1)[0].strip()
        try:
            shlex.split(pending)
        except ValueError:  # a quoted argument goes on over the next line, as in the shell
            continue
        if pending:
            commands.append(pending)
        pending = ""
    assert not pending, f"unclosed quote in {title}: {pending}"
    return commands


def _keygen_from_step_2(directory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [line for line in _section("2.") if line.startswith(".venv/bin/quarry keygen")]
    assert len(lines) == 3
    for line in lines:
        words = shlex.split(line)
        assert words[-2:] == [">>", "keys.yaml"]
        with pytest.raises(SystemExit) as exited:
            quarry(words[1:-2])
        assert exited.value.code == 0
        with (directory / "keys.yaml").open("a") as keys:
            keys.write(capsys.readouterr().out)


@dataclass
class Cluster:
    directory: Path
    addresses: dict[str, str]
    health: dict[str, str]


def _pod_env(overlay: str, tls_dir: Path | None) -> dict[str, str]:
    """The literal env of the rendered Quarry containers (TLS paths moved to `tls_dir`)."""
    env = {}
    for doc in rendered(overlay):
        if doc["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for variable in container.get("env", []):
                if variable["name"].startswith("QUARRY_") and "value" in variable:
                    value = variable["value"]
                    if tls_dir is not None:
                        value = value.replace(TLS_MOUNT, str(tls_dir))
                    env[variable["name"]] = value
    return env


async def _start(
    overlay: str,
    directory: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    *,
    host: str = "127.0.0.1",
    tls_dir: Path | None = None,
) -> AsyncIterator[Cluster]:
    monkeypatch.chdir(directory)
    _keygen_from_step_2(directory, capsys)
    (config_map,) = [d for d in rendered(overlay) if d["kind"] == "ConfigMap"]
    text = config_map["data"]["quarry.yaml"]
    mounted = yaml.safe_load(text)["agent"]["server"]["auth"]["keys_file"]
    config = directory / "quarry.yaml"
    config.write_text(text.replace(mounted, str(directory / "keys.yaml")))
    for name, value in _pod_env(overlay, tls_dir).items():
        monkeypatch.setenv(name, value)
    # the Secret quarry-api-keys (agent-gateway-key from agent.key) as the Deployment passes it
    monkeypatch.setenv("QUARRY_AGENT_GATEWAY_KEY", (directory / "agent.key").read_text())
    embedder = build_embedder(EmbeddingSettings())
    search = build_search_tool_server(
        load_settings(SearchToolSettings, config, server=LOCAL, data_dir=directory / "data"),
        embedder_factory=lambda: embedder,
    )
    gateway = build_gateway_server(load_settings(GatewaySettings, config, server=LOCAL))
    servers: list[QuarryServer] = [search, gateway]
    for server in servers:
        await server.start()
    agent = build_agent_server(
        load_settings(
            AgentSettings,
            config,
            server=LOCAL,
            search_tool_address=f"{host}:{search.port}",
            llm_gateway_address=f"{host}:{gateway.port}",
        )
    )
    await agent.start()
    servers.append(agent)
    yield Cluster(
        directory,
        {"search_tool": f"{host}:{search.port}", "agent": f"{host}:{agent.port}"},
        {"agent": f"127.0.0.1:{agent.health_port}"},
    )
    for server in reversed(servers):
        await server.stop(0)


@pytest.fixture
async def cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    async for started in _start("embedded", tmp_path, capsys, monkeypatch):
        yield started


@pytest.fixture
async def tls_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    """embedded-tls: the Secret quarry-tls holds one certificate (server and client) for
    `localhost`, signed by ca.crt, made here."""
    tls_dir = tmp_path / "quarry-tls"
    tls_dir.mkdir()
    ca = make_ca(tls_dir, "ca")
    pem = issue(ca, tls_dir, "tls", server_and_client=True)
    assert (ca.cert_file, pem.cert_file, pem.key_file) == tuple(
        tls_dir / n for n in ("ca.crt", "tls.crt", "tls.key")
    )
    async for started in _start(
        "embedded-tls", tmp_path, capsys, monkeypatch, host="localhost", tls_dir=tls_dir
    ):
        yield started


async def _run(words: list[str]) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *words, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), GRPCURL_TIMEOUT_S)
    return process.returncode or 0, out.decode(), err.decode()


def _messages(out: str) -> list[dict[str, Any]]:
    """grpcurl prints a stream as JSON objects one after the other (proto field names)."""
    decoder, messages, at = json.JSONDecoder(), [], 0
    while out[at:].strip():
        message, at = decoder.raw_decode(out, at + len(out[at:]) - len(out[at:].lstrip()))
        messages.append(message)
    return messages


def _grpcurl_lines(cluster: Cluster) -> list[list[str]]:
    """Step 4's grpcurl commands, with its shell variables and forwarded ports resolved."""
    variables: dict[str, str] = {}
    commands = []
    for line in _section("4."):
        if line.startswith("INGEST_KEY="):
            assignments = re.findall(r"(\w+)=\$\(cat (\S+?)\)", line)
            assert len(assignments) == 2, line
            for name, key_file in assignments:
                variables[name] = (cluster.directory / key_file).read_text()
        if line.startswith(".venv/bin/grpcurl"):
            words = shlex.split(line)
            words[0] = GRPCURL
            for name, value in variables.items():
                words = [w.replace(f"${name}", value) for w in words]
            for service, forwarded in FORWARDED.items():
                words = [cluster.addresses[service] if w == forwarded else w for w in words]
            commands.append(words)
    return commands


async def test_the_readmes_grpcurl_steps_ingest_and_stream_a_run_with_api_keys(
    cluster: Cluster,
) -> None:
    await _ingest_and_stream(*_grpcurl_lines(cluster))


async def test_with_the_tls_component_the_steps_run_over_mtls_and_probes_stay_plaintext(
    tls_cluster: Cluster,
) -> None:
    """What k8s/README.md's TLS section says: grpcurl takes `-cacert ca.crt` instead of
    `-plaintext` (and the client certificate for the search tool, which requires mTLS)."""
    tls = str(tls_cluster.directory / "quarry-tls")
    upsert, stream_run = _grpcurl_lines(tls_cluster)
    client = ["-cacert", f"{tls}/ca.crt", "-cert", f"{tls}/tls.crt", "-key", f"{tls}/tls.key"]
    upsert = [upsert[0], *client, *upsert[2:]]
    stream_run = [stream_run[0], "-cacert", f"{tls}/ca.crt", *stream_run[2:]]
    await _ingest_and_stream(upsert, stream_run)
    # the agent's main port refuses plaintext; its health port answers in plaintext, and only health
    plaintext = [GRPCURL, "-plaintext", tls_cluster.addresses["agent"], "list"]
    code, _, _ = await _run(plaintext)
    assert code != 0
    async with grpc.aio.insecure_channel(tls_cluster.health["agent"]) as channel:
        probe = health_pb2_grpc.HealthStub(channel)
        for name in ("quarry.agent.v1.AgentService", LIVENESS_SERVICE):
            reply = await probe.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    code, _, err = await _run([GRPCURL, "-plaintext", tls_cluster.health["agent"], "list"])
    assert code != 0
    assert "does not support the reflection API" in err


async def _ingest_and_stream(upsert: list[str], stream_run: list[str]) -> None:
    assert upsert[-1] == "quarry.searchtool.v1.SearchToolService/UpsertDocuments"
    assert stream_run[-1] == "quarry.agent.v1.AgentService/StreamRun"
    code, out, err = await _run(upsert)
    assert code == 0, err
    assert json.loads(out)["documents_upserted"] == 1, out
    code, out, err = await _run(stream_run)
    assert code == 0, err
    events = _messages(out)
    assert "started" in events[0]
    done = events[-1]["done"]["response"]
    assert "Kubernetes" in done["answer"]["text"]
    assert [r["chunk"]["document_id"] for r in done["results"]] == ["a"]
    # the same call without the caller's key, and with it on a collection it may not read
    anonymous = [w for w in stream_run if not w.startswith("authorization:") and w != "-H"]
    code, _, err = await _run(anonymous)
    assert code != 0
    assert "Unauthenticated" in err
    elsewhere = [w.replace('"collection": "docs"', '"collection": "payroll"') for w in stream_run]
    code, _, err = await _run(elsewhere)
    assert code != 0
    assert "PermissionDenied" in err
    assert "'payroll'" in err
