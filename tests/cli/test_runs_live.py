"""`quarry runs` and `quarry ask` against a real agent with TLS on (a real gateway and search
tool behind it): the TLS flags, and the run id `ask` prints is the one `runs list` shows whole and
`runs show` takes."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.agent.config import AgentSettings, HistorySettings
from services.agent.server import build_agent_server
from services.common.settings import ServerSettings
from services.common.tls import ServerTls
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.server import build_gateway_server
from services.search_tool.server import SearchToolServer
from tests.cli.conftest import quarry
from tests.common.certs import issue, make_ca

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class TlsAgent:
    address: str
    tls_flags: list[str]


@pytest.fixture
async def tls_agent(search_tool: SearchToolServer, tmp_path: Path) -> AsyncIterator[TlsAgent]:
    """An agent that speaks only TLS (a private CA), with its real gateway and search tool."""
    ca = make_ca(tmp_path, "quarry-test-ca")
    pem = issue(ca, tmp_path, "agent")
    gateway = build_gateway_server(GatewaySettings(server=ServerSettings(port=0, grace_s=0)))
    await gateway.start()
    agent = build_agent_server(
        AgentSettings(
            server=ServerSettings(
                port=0, grace_s=0, tls=ServerTls(cert_file=pem.cert_file, key_file=pem.key_file)
            ),
            search_tool_address=search_tool.address,
            llm_gateway_address=gateway.address,
            history=HistorySettings(path=tmp_path / "runs.sqlite3"),
        )
    )
    await agent.start()
    try:
        yield TlsAgent(agent.address, ["--ca-file", str(ca.cert_file)])
    finally:
        await agent.stop(0)
        await gateway.stop(0)


async def test_runs_take_tls_flags_and_the_full_run_id_ask_prints_is_listed_whole_and_shown(
    tls_agent: TlsAgent, search_tool: SearchToolServer, tmp_path: Path
) -> None:
    (tmp_path / "kettle.txt").write_text("Descale the kettle with vinegar every month.\n")
    ingested = await quarry(
        "ingest", str(tmp_path / "kettle.txt"), "--collection", "mine",
        "--address", search_tool.address,
    )  # fmt: skip
    assert ingested.returncode == 0, ingested.stderr
    asked = await quarry(
        "ask", "How do I descale a kettle?", "--collection", "mine", "--no-questions",
        "--address", tls_agent.address, "--search-tool", search_tool.address, *tls_agent.tls_flags,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stdout + asked.stderr
    found = re.search(r"^run (\S+) · mine", asked.stdout, re.MULTILINE)
    assert found, asked.stdout
    run_id = found.group(1)
    assert len(run_id) >= 32

    listed = await quarry("runs", "list", "--address", tls_agent.address, *tls_agent.tls_flags)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    assert header.split() == [
        "run",
        "id",
        "started",
        "collection",
        "status",
        "steps",
        "tokens",
        "query",
    ]
    assert row.split()[0] == run_id

    shown = await quarry(
        "runs", "show", run_id, "--address", tls_agent.address, *tls_agent.tls_flags
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {run_id} · completed · collection mine")

    plaintext = await quarry("runs", "list", "--address", tls_agent.address, "--timeout", "10")
    assert plaintext.returncode == 1
    assert "if it speaks TLS, add --tls (--ca-file PEM for a private CA)" in plaintext.stderr
    untrusted = await quarry("runs", "show", run_id, "--address", tls_agent.address, "--tls")
    assert untrusted.returncode == 1
    assert "not signed by a CA this client trusts: pass --ca-file" in untrusted.stderr
