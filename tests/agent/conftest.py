"""A small fake collection and helpers shared by the agent tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from quarry.common.v1 import search_pb2

from services.agent import filter_wire
from services.agent.events import AgentEvent, Done
from services.agent.filters import CallerFilter
from services.agent.loop import AgentLoop
from services.agent.run import RunResult
from tests.agent.fake_search import FakeDocument, FakeSearch
from tests.search_tool.grpc_helpers import value as struct_value

DOCUMENTS = [
    FakeDocument(
        "tempfile__chunk_0",
        "tempfile — Generate temporary files and directories",
        "TemporaryDirectory() creates a temporary directory; it is removed automatically "
        "when the context manager exits.",
        source="stdlib",
        entity_type="module",
        url="https://docs.python.org/3/library/tempfile.html",
    ),
    FakeDocument(
        "tempfile__chunk_1",
        "tempfile — mkdtemp",
        "mkdtemp() creates a temporary directory; the user is responsible for deleting it.",
        source="stdlib",
        entity_type="module",
        url="https://docs.python.org/3/library/tempfile.html#mkdtemp",
    ),
    FakeDocument(
        "shutil__chunk_0",
        "shutil — High-level file operations",
        "shutil.rmtree() deletes an entire directory tree.",
        source="stdlib",
        entity_type="module",
        url="https://docs.python.org/3/library/shutil.html",
    ),
    FakeDocument(
        "tutorial__chunk_0",
        "Tutorial — Reading and writing files",
        "open() returns a file object; use the with statement so the file is closed.",
        source="tutorial",
        entity_type="page",
        url="https://docs.python.org/3/tutorial/inputoutput.html",
    ),
]


@pytest.fixture
def search() -> FakeSearch:
    return FakeSearch(DOCUMENTS, collection="python-docs")


async def collect(events: AsyncIterator[AgentEvent]) -> list[AgentEvent]:
    return [event async for event in events]


def result_of(events: list[AgentEvent]) -> RunResult:
    last = events[-1]
    assert isinstance(last, Done)
    return last.result


def caller_filter(*groups: list[tuple[str, str, Any]]) -> CallerFilter:
    """A caller's filter as the agent API's edge hands it on: built on the wire from groups of
    `(field, operator, value)`, then converted in (`filter_wire.caller_filter`)."""
    message = search_pb2.Filter()
    for conditions in groups:
        group = message.groups.add()
        for field, operator, value in conditions:
            number = search_pb2.FilterOperator.Value(f"FILTER_OPERATOR_{operator.upper()}")
            group.conditions.add(field=field, operator=number, value=struct_value(value))
    return filter_wire.caller_filter(message)


async def run_events(loop: AgentLoop, **kwargs: object) -> list[AgentEvent]:
    from services.agent.run import RunRequest

    request = RunRequest(**{"collection": "python-docs", "query": "temporary directory", **kwargs})  # type: ignore[arg-type]
    return await collect(loop.stream(request))
