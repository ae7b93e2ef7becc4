"""`quarry ask` renders the event stream: thinking, each search, the answer with its sources."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from quarry_cli import cli
from quarry_cli.cli import ask, source_lines
from services.agent.config import AgentSettings
from services.agent.loop import AgentLoop
from services.agent.server import SERVICE_NAME
from services.agent.servicer import AgentServicer
from services.agent.testing import (
    ScriptedModel,
    answer_call,
    calculate_call,
    raw_call,
    read_call,
    search_call,
    turn,
)
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.search_tool.web.base import web_result_id
from tests.agent.conftest import DOCUMENTS
from tests.agent.fake_search import FakeSearch, FakeWebPage


@pytest.fixture
def search() -> FakeSearch:
    return FakeSearch(DOCUMENTS, collection="python-docs")


@pytest.fixture
async def agent(search: FakeSearch) -> AsyncIterator[QuarryServer]:
    model = ScriptedModel(
        [
            turn("Looking for tempfile.", search_call("temporary directory")),
            turn("", answer_call("Use TemporaryDirectory [1].", ["tempfile__chunk_0"])),
        ]
    )
    async with _serving(model, search) as server:
        yield server


@asynccontextmanager
async def _serving(model: ScriptedModel, search: FakeSearch) -> AsyncIterator[QuarryServer]:
    settings = AgentSettings(server=ServerSettings(port=0, grace_s=0))
    servicer = AgentServicer(AgentLoop(model, search), settings)

    def register(server: grpc.aio.Server) -> None:
        agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

    server = build_server([ServiceRegistration(SERVICE_NAME, register)], settings.server)
    await server.start()
    yield server
    await server.stop(0)


def _args(address: str, **overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "question": "temporary directory",
        "collection": "python-docs",
        "mode": "fast",
        "address": address,
        "search_tool": "127.0.0.1:1",
        "filter": None,
        "limit": 0,
        "route": "",
        "max_iterations": 0,
        "max_tokens": 0,
        "timeout": 10.0,
        "json": False,
        "tls": False,
        "ca_file": None,
        "cert_file": None,
        "key_file": None,
        "tools": "",
        "no_questions": False,
    }
    values.update(overrides)
    return argparse.Namespace(**values)


async def test_ask_shows_thinking_searches_and_numbered_sources(
    agent: QuarryServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await ask(_args(agent.address)) == 0
    out = capsys.readouterr().out
    assert "thinking Looking for tempfile." in out
    assert "search 1 temporary directory (hybrid)" in out
    assert "Use TemporaryDirectory [1]." in out
    assert "[1] tempfile — Generate temporary files and directories" in out
    assert "https://docs.python.org/3/library/tempfile.html" in out
    assert "answered · 1 searches" in out


async def test_ask_shows_each_read_count_and_calculation(
    search: FakeSearch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory", limit=1)),
            turn(
                "",
                read_call("tempfile__chunk_0", neighbours=1),
                raw_call("count", '{"group_by": ["source"]}'),
                calculate_call("1250 - 980"),
                calculate_call("1 / 0"),
            ),
            turn("", answer_call("270 more.")),
        ]
    )
    async with _serving(model, search) as server:
        assert await ask(_args(server.address, mode="thinking")) == 0
    out = capsys.readouterr().out
    assert "read tempfile chunks 0-1 of 2" in out
    assert "count by source → 3 documents" in out
    assert "calculate 1250 - 980 = 270" in out
    assert "calculate 1 / 0 refused: division by zero" in out


async def test_ask_shows_a_failed_search_and_read_with_their_errors(
    search: FakeSearch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = ScriptedModel(
        [
            turn("", raw_call("search", '{"query": {}}'), read_call("never-seen__chunk_0")),
            turn("", answer_call("No idea.")),
        ]
    )
    async with _serving(model, search) as server:
        assert await ask(_args(server.address, mode="thinking")) == 0
    out = capsys.readouterr().out
    assert "search refused: The arguments do not match the schema: query.primary" in out
    assert "read refused: 'never-seen__chunk_0' is not a result you have seen" in out


async def test_ask_passes_its_tools(search: FakeSearch, capsys: pytest.CaptureFixture[str]) -> None:
    model = ScriptedModel([turn("", answer_call("Nothing to compute."))])
    async with _serving(model, search) as server:
        assert await ask(_args(server.address, mode="thinking", tools="calculate, read")) == 0
    assert [t.name for t in model.requests[0].tools] == [
        "read",
        "calculate",
        "ask_user",
        "submit_answer",
    ]


async def test_ask_json_prints_one_event_per_line(
    agent: QuarryServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await ask(_args(agent.address, json=True)) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [next(iter(line)) for line in lines] == ["started", "thinking", "searching", "done"]


async def test_ask_reports_a_bad_filter_without_calling(capsys: pytest.CaptureFixture[str]) -> None:
    assert await ask(_args("127.0.0.1:1", filter='[{"conditions": "nope"}]')) == 2
    assert (
        capsys.readouterr().out == "--filter: groups[0].conditions: Input should be a valid list\n"
    )


async def test_ask_explains_an_unreachable_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert await ask(_args("127.0.0.1:1")) == 1
    out = capsys.readouterr().out
    assert "UNAVAILABLE" in out
    assert "make run" in out


def test_citations_of_one_source_share_a_line() -> None:
    citations = [
        agent_pb2.Citation(result_id="a__chunk_0", title="tempfile", url="u1"),
        agent_pb2.Citation(result_id="b__chunk_0", title="shutil", url="u2"),
        agent_pb2.Citation(result_id="a__chunk_1", title="tempfile", url="u1"),
    ]
    assert source_lines(citations) == [("[1][3]", "tempfile", "u1"), ("[2]", "shutil", "u2")]


def test_web_citations_are_marked_on_their_source_line() -> None:
    citations = [
        agent_pb2.Citation(result_id="tempfile__chunk_0", title="tempfile", url="u1"),
        agent_pb2.Citation(result_id="web_00ff", title="Zig", url="https://z", web=True),
    ]
    assert source_lines(citations) == [("[1]", "tempfile", "u1"), ("[2]", "Zig (web)", "https://z")]


async def test_ask_shows_web_searches_and_summaries(capsys: pytest.CaptureFixture[str]) -> None:
    page = FakeWebPage("https://example.org/tmp", "Temp dirs", "Use TemporaryDirectory.")
    search = FakeSearch(DOCUMENTS, collection="python-docs", web_pages=[page])
    web_id = web_result_id(page.url)
    summary = json.dumps(
        {"summary": "s", "points": [{"text": "cleans up", "result_ids": ["tempfile__chunk_0"]}]}
    )
    model = ScriptedModel(
        [
            turn("", raw_call("web_search", '{"query": "temp dirs"}')),
            turn("", raw_call("web_search", '{"query": ""}')),
            turn("", search_call("temporary directory", limit=2)),
            turn(
                "",
                raw_call("summarize", '{"result_ids": ["tempfile__chunk_0"], "focus": "cleanup"}'),
            ),
            turn("", answer_call("Use it [1][2].", ["tempfile__chunk_0", web_id])),
        ],
        summaries=[summary],
    )
    async with _serving(model, search) as server:
        args = _args(server.address, mode="thinking", tools="web_search,summarize")
        assert await ask(args) == 0
    out = capsys.readouterr().out
    assert "web search 1 temp dirs → 1 web results (memory)" in out
    assert 'web search 2 {"query": ""} failed: The arguments do not match the schema' in out
    assert "summarize 1 results cleanup → 1 points citing 1" in out
    assert "[2] Temp dirs (web) https://example.org/tmp" in out


async def test_ask_shows_a_tool_event_it_has_no_line_for_with_its_fields_and_error(
    search: FakeSearch, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool added after this CLI was written (here: `count` and `calculate` with their lines
    taken away) still shows each call, its fields, and its error when it failed."""
    monkeypatch.delitem(cli.LINES, "counting")
    monkeypatch.delitem(cli.LINES, "calculating")
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory", limit=1)),
            turn(
                "",
                raw_call("count", '{"group_by": ["source"]}'),
                calculate_call("1 / 0"),
            ),
            turn("", answer_call("Three sources.")),
        ]
    )
    async with _serving(model, search) as server:
        assert await ask(_args(server.address, mode="thinking")) == 0
    out = capsys.readouterr().out
    counted = next(line for line in out.splitlines() if line.startswith("counting "))
    assert 'group_by=["source"]' in counted
    assert 'document_count="3"' in counted or "document_count=3" in counted
    assert "refused" not in counted
    assert 'calculating iteration=1 expression="1 / 0" refused: division by zero' in out
