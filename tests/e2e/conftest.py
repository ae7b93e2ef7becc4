"""The three real services as separate processes, a small collection, and fake vendor APIs.

Started once per module: the search tool loads its embedding model, which takes seconds. Ports are
picked together by `bench.ports.free_ports` (processes cannot share port 0); each process logs to a
file under the temp directory, shown when a service does not come up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from bench.ports import free_ports
from services.llm_gateway.testing import FakeAnthropicServer, FakeOpenAIServer

COLLECTION = "e2e-docs"
DOCUMENTS = [
    (
        "tempfile-tempdir",
        "tempfile.TemporaryDirectory",
        "tempfile.TemporaryDirectory() creates a "
        "temporary directory. On completion of the context or destruction of the object the "
        "temporary directory and all its contents are removed automatically.",
    ),
    (
        "tempfile-mkdtemp",
        "tempfile.mkdtemp",
        "tempfile.mkdtemp() creates a temporary directory in "
        "the most secure manner possible. The user of mkdtemp() is responsible for deleting the "
        "temporary directory and its contents when done with it.",
    ),
    (
        "shutil-rmtree",
        "shutil.rmtree",
        "shutil.rmtree(path) deletes an entire directory tree; path must point to a directory.",
    ),
    (
        "pathlib-mkdir",
        "pathlib.Path.mkdir",
        "Path.mkdir() creates a new directory at this given "
        "path. If parents is true, any missing parents of this path are created as needed.",
    ),
    ("json-dumps", "json.dumps", "json.dumps(obj) serializes obj to a JSON formatted str."),
]
CHUNK_IDS = {f"{doc_id}__chunk_0" for doc_id, _, _ in DOCUMENTS}
GERMAN_COLLECTION = "e2e-handbuch"
"""A collection name the search tool keyword-searches in German (`keyword.collection_languages`);
a test fills it itself."""
STARTUP_TIMEOUT_S = 120.0


@dataclass
class Stack:
    agent: str
    search_tool: str
    gateway: str
    openai: FakeOpenAIServer
    anthropic: FakeAnthropicServer
    logs: Path
    pids: dict[str, int]
    """Process id of each service, by name (`search_tool`, `llm_gateway`, `agent`)."""


def _gateway_config(path: Path, openai_url: str, anthropic_url: str) -> None:
    single_try = {"max_attempts": 1}
    config = {
        "llm_gateway": {
            "providers": [
                {
                    "kind": "openai",
                    "model": "gpt-fake",
                    "base_url": openai_url,
                    "retry": single_try,
                },
                {
                    "kind": "openai",
                    "model": "gpt-text",
                    "base_url": openai_url,
                    "retry": single_try,
                    "tool_calls": "json_in_text",
                },
                {
                    "kind": "anthropic",
                    "model": "claude-fake",
                    "base_url": anthropic_url,
                    "retry": single_try,
                },
            ],
            "routes": {
                "agent": ["extractive"],
                "openai": ["openai/gpt-fake"],
                "openai-or-offline": ["openai/gpt-fake", "extractive"],
                "openai-text": ["openai/gpt-text"],
                "anthropic": ["anthropic/claude-fake"],
            },
            "default_route": "agent",
        }
    }
    path.write_text(yaml.safe_dump(config))


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
            time.sleep(0.2)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
    raise RuntimeError(f"{service} at {address} did not become SERVING:\n{tail}")


def _ingest(address: str) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection=COLLECTION,
                documents=[
                    search_tool_pb2.Document(
                        id=doc_id,
                        title=title,
                        text=text,
                        source="python-docs",
                        entity_type="api",
                        url=f"https://docs.python.org/3/{doc_id}.html",
                    )
                    for doc_id, title, text in DOCUMENTS
                ],
            ),
            timeout=60,
        )


def upsert(
    address: str, collection: str, documents: Sequence[tuple[str, str, str]], source: str
) -> None:
    """(id, title, text) documents from `source` into `collection` of the search tool at
    `address`."""
    with grpc.insecure_channel(address) as channel:
        search_tool_pb2_grpc.SearchToolServiceStub(channel).UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection=collection,
                documents=[
                    search_tool_pb2.Document(id=i, title=t, text=x, source=source)
                    for i, t, x in documents
                ],
            ),
            timeout=60,
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("e2e")) as started:
        yield started


@contextmanager
def running_stack(root: Path, extra_env: Mapping[str, str] | None = None) -> Iterator[Stack]:
    """The three services as processes (logs and data under `root`), the e2e collection loaded;
    `extra_env` (e.g. `QUARRY_AGENT_*` settings) reaches every process."""
    openai, anthropic = FakeOpenAIServer(), FakeAnthropicServer()
    openai.start()
    anthropic.start()
    config = root / "gateway.yaml"
    _gateway_config(config, openai.base_url, anthropic.base_url)
    ports = dict(zip(("search_tool", "llm_gateway", "agent"), free_ports(3), strict=True))
    address = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
    env = {
        **os.environ,
        "OPENAI_API_KEY": "sk-e2e-fake",
        "ANTHROPIC_API_KEY": "sk-ant-e2e-fake",
        "QUARRY_AGENT_ROUTE": "agent",
        "QUARRY_AGENT_HISTORY__PATH": str(root / "agent-runs.sqlite3"),
        "QUARRY_SEARCH_TOOL_KEYWORD__COLLECTION_LANGUAGES": json.dumps(
            {GERMAN_COLLECTION: "german"}
        ),
        **(extra_env or {}),
    }
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    commands = {
        "search_tool": ["-m", "services.search_tool", "--data-dir", str(root / "data")],
        "llm_gateway": ["-m", "services.llm_gateway", "--config", str(config)],
        "agent": [
            "-m",
            "services.agent",
            "--search-tool",
            address["search_tool"],
            "--llm-gateway",
            address["llm_gateway"],
        ],
    }
    services = {
        "search_tool": "quarry.searchtool.v1.SearchToolService",
        "llm_gateway": "quarry.llmgateway.v1.LlmGatewayService",
        "agent": "quarry.agent.v1.AgentService",
    }
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in commands.items():
            log = root / f"{name}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [sys.executable, *args, "--port", str(ports[name])],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            processes.append(process)
        for name, process in zip(commands, processes, strict=True):
            _wait_serving(address[name], services[name], process, root / f"{name}.log")
        _ingest(address["search_tool"])
        yield Stack(
            agent=address["agent"],
            search_tool=address["search_tool"],
            gateway=address["llm_gateway"],
            openai=openai,
            anthropic=anthropic,
            logs=root,
            pids={name: p.pid for name, p in zip(commands, processes, strict=True)},
        )
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in reversed(processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        openai.stop()
        anthropic.stop()
