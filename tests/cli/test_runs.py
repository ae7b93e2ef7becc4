"""`quarry runs`: argument errors before any call, and the replay's script and comparison."""

from __future__ import annotations

import json

import pytest
from quarry.agent.v1 import agent_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from quarry_cli.cli import main
from quarry_cli.replay import FrozenSearchTool, compare, script_of


def _step(index: int, *calls: agent_pb2.ToolCallRecord, text: str = "") -> agent_pb2.StepRecord:
    return agent_pb2.StepRecord(
        index=index,
        text=text,
        tool_calls=calls,
        input_tokens=120,
        cache_read_tokens=20,
        output_tokens=7,
    )


def _search(*ids: str, error: str = "") -> agent_pb2.ToolCallRecord:
    return agent_pb2.ToolCallRecord(
        call_id="c1",
        name="search",
        arguments_json='{"query": {"primary": "q"}}',
        result_ids=ids,
        error=error,
    )


def _record(*steps: agent_pb2.StepRecord, answer: str = "A [1]") -> agent_pb2.RunRecord:
    record = agent_pb2.RunRecord(run_id="r", status=agent_pb2.RUN_STATUS_COMPLETED)
    record.response.answer.text = answer
    record.response.steps.extend(steps)
    return record


def test_list_refuses_a_since_that_is_no_date_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["runs", "list", "--since", "yesterday", "--address", "127.0.0.1:9", "--json"])
    assert exit_.value.code == 1
    assert '"field": "--since"' in capsys.readouterr().out


def test_the_script_replays_each_step_after_one_placeholder_per_history_turn() -> None:
    record = _record(_step(1, _search("a"), text="Searching."), _step(2))
    record.request.history.add(question="earlier?", answer="earlier answer")

    replies = script_of(record)["replies"]
    assert [r["text"] for r in replies] == ["earlier answer", "Searching.", ""]
    assert replies[1]["tool_calls"] == [
        {"id": "c1", "name": "search", "arguments": '{"query": {"primary": "q"}}'}
    ]
    assert replies[1]["usage"]["input_tokens"] == 100  # the provider adds the cached 20 back
    assert replies[1]["usage"]["cache_read_tokens"] == 20


def test_an_identical_replay_has_no_difference() -> None:
    record = _record(_step(1, _search("a", "b")), _step(2))
    assert compare(record, _record(_step(1, _search("a", "b")), _step(2))) == []


def test_the_first_difference_names_the_step_and_what_differed() -> None:
    record = _record(_step(1, _search("a", "b")), _step(2))
    replayed = _record(_step(1, _search("a", "c")), answer="B [1]")

    differences = compare(record, replayed)
    first = differences[0]
    assert (first.step, first.what, first.recorded, first.replayed) == (
        1,
        "tool_calls[0] (search).result_ids",
        "a, b",
        "a, c",
    )
    assert [(d.step, d.what) for d in differences[1:]] == [(2, "step"), (0, "answer.text")]


def test_a_replay_that_failed_differs_in_its_outcome() -> None:
    replayed = agent_pb2.RunRecord(status=agent_pb2.RUN_STATUS_FAILED, error_code="INTERNAL")
    differences = compare(_record(), replayed)
    assert [(d.what, d.recorded, d.replayed) for d in differences] == [
        ("outcome", "completed", "failed INTERNAL")
    ]


class _Context:
    def __init__(self) -> None:
        self.aborted: tuple[object, str] | None = None

    async def abort(self, code: object, details: str) -> None:
        self.aborted = (code, details)
        raise RuntimeError(details)


def _web_call(query: str) -> agent_pb2.ToolCallRecord:
    call = agent_pb2.ToolCallRecord(
        call_id="w",
        name="web_search",
        arguments_json=json.dumps({"query": query}),
        validated_arguments_json=json.dumps({"query": query, "limit": 5}),
        web=True,
    )
    result = call.results.add()
    result.chunk.id = "web_00000000000000ff"
    result.chunk.title = "Zig"
    result.chunk.url = "https://example.org/zig"
    result.chunk.text = "Zig 0.14 was released."
    result.web.provider = "searxng"
    result.web.fetched_at.FromSeconds(1_790_000_000)
    return call


async def test_a_frozen_replay_answers_a_web_search_with_the_recorded_pages() -> None:
    frozen = FrozenSearchTool(_record(_step(1, _web_call("zig release"))))
    context = _Context()
    reply = await frozen.WebSearch(
        search_tool_pb2.WebSearchRequest(query="zig release", limit=5), context
    )
    assert reply.provider == "searxng"
    [page] = reply.results
    assert (page.id, page.title, page.url, page.snippet, page.provider) == (
        "web_00000000000000ff",
        "Zig",
        "https://example.org/zig",
        "Zig 0.14 was released.",
        "searxng",
    )
    assert page.fetched_at.seconds == 1_790_000_000
    with pytest.raises(RuntimeError, match="no such web search recorded"):
        await frozen.WebSearch(
            search_tool_pb2.WebSearchRequest(query="zig release", limit=5), context
        )


def test_a_replay_that_compacted_differently_differs_in_that_step() -> None:
    record = _record(_step(1, _search("a")), _step(2))
    compacted = _step(2)
    compacted.compacted = True
    differences = compare(record, _record(_step(1, _search("a")), compacted))
    assert [(d.step, d.what, d.recorded, d.replayed) for d in differences] == [
        (2, "compacted", "false", "true")
    ]


async def test_a_frozen_search_that_asked_for_fewer_than_the_run_limit_is_found() -> None:
    call = agent_pb2.ToolCallRecord(
        name="search",
        validated_arguments_json='{"query": {"primary": "q", "variations": []}, "limit": 3,'
        ' "offset": 0, "retrieval_strategy": "hybrid"}',
        total_count=7,
    )
    call.results.add().chunk.id = "doc__chunk_0"
    record = _record(_step(1, call))
    record.request.limit = 10
    frozen = FrozenSearchTool(record)
    request = search_tool_pb2.SearchRequest(limit=10)  # max(model 3, run 10): what the agent sends
    request.query.primary = "q"
    request.strategy = search_pb2.RETRIEVAL_STRATEGY_HYBRID
    reply = await frozen.Search(request, _Context())
    assert [r.chunk.id for r in reply.results] == ["doc__chunk_0"]
    assert reply.total_count == 7
