"""The opt-in `summarize` tool in the run loop: seen results condensed through GenerateStructured,
citations checked, the summary shown in place of the full texts, its tokens counted; unseen ids,
bad arguments and gateway faults back to the model; outages and cancellation end the run."""

from __future__ import annotations

import asyncio
import json

import pytest

from services.agent.config import LoopSettings
from services.agent.loop import AgentLoop
from services.agent.messages import Role, ToolCall
from services.agent.ports import (
    ContextWindowExceeded,
    ModelResponse,
    StructuredRequest,
    StructuredResponse,
    TokenUsage,
)
from services.agent.run import Mode, RunRequest, StopReason
from services.agent.testing import ScriptedModel, answer_call, raw_call, search_call, turn
from services.agent.tools import Summarizing
from services.common.errors import InvalidArgument, Unavailable
from tests.agent.conftest import DOCUMENTS, collect, result_of, run_events
from tests.agent.fake_search import FakeDocument, FakeSearch

SUMMARY = json.dumps(
    {
        "summary": "TemporaryDirectory() cleans up; mkdtemp() does not.",
        "points": [
            {
                "text": "TemporaryDirectory() is removed on exit.",
                "result_ids": ["tempfile__chunk_0"],
            },
            {
                "text": "mkdtemp() leaves deletion to you.",
                "result_ids": ["tempfile__chunk_1", "made_up__chunk_3"],
            },
        ],
    }
)
IDS = ["tempfile__chunk_0", "tempfile__chunk_1"]


def summarize_call(ids: list[str], focus: str = "cleanup", *, call_id: str = "s") -> ToolCall:
    return raw_call("summarize", json.dumps({"result_ids": ids, "focus": focus}), call_id=call_id)


def tool_messages(model: ScriptedModel, request: int) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error)
        for m in model.requests[request].messages
        if m.role is Role.TOOL
    ]


def summarizing_run(
    summaries: list[str | BaseException], *extra: ModelResponse
) -> tuple[ScriptedModel, FakeSearch]:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory", call_id="q")),
            turn("", summarize_call(IDS)),
            *extra,
            turn("", answer_call("TemporaryDirectory() cleans up [1].", ["tempfile__chunk_0"])),
        ],
        summaries=summaries,
    )
    return model, FakeSearch(DOCUMENTS, collection="python-docs")


async def test_a_summary_of_seen_results_replaces_their_texts_and_keeps_citations_checked() -> None:
    model, search = summarizing_run([SUMMARY])
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"summarize"})
    )

    [structured] = model.structured_requests
    assert structured.schema_name == "summary"
    assert structured.route == "agent"
    sent = structured.messages[-1].text
    assert sent.startswith("## Focus\ncleanup\n\n## Results\n### [tempfile__chunk_0]")
    assert "removed automatically" in sent
    search_result, summary_result = tool_messages(model, 2)
    assert search_result[0] == "q"
    assert "### [tempfile__chunk_0] tempfile" in search_result[1]
    assert "removed automatically" not in search_result[1]
    assert "(condensed: see the result of call s" in search_result[1]
    assert "shutil.rmtree()" in search_result[1]
    assert summary_result[0] == "s"
    assert not summary_result[2]
    assert "- mkdtemp() leaves deletion to you. [tempfile__chunk_1]" in summary_result[1]
    assert (
        "Ignored citations of results that were not summarised: made_up__chunk_3."
        in summary_result[1]
    )
    [event] = [e for e in events if isinstance(e, Summarizing)]
    assert event.result_ids == tuple(IDS)
    assert event.cited_ids == tuple(IDS)
    assert event.point_count == 2
    assert 0 < event.input_chars <= LoopSettings().summarize_max_chars
    result = result_of(events)
    assert result.stop_reason is StopReason.ANSWERED
    assert result.usage.model_calls == 4
    summarise_step = result.steps[1]
    assert summarise_step.usage.input_tokens == 100 + 50
    assert summarise_step.usage.output_tokens == 20 + 30
    [record] = summarise_step.tool_calls
    assert record.result_ids == tuple(IDS)
    assert record.total_count == 2


async def test_the_summary_input_names_the_language_the_collection_is_keyword_searched_in() -> None:
    model, _ = summarizing_run([SUMMARY])
    search = FakeSearch(DOCUMENTS, collection="python-docs", keyword_language="german")
    await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"summarize"})
    )
    [structured] = model.structured_requests
    assert "\n\n## Collection\nkeyword language: german\n\n## Results\n" in (
        structured.messages[-1].text
    )


class _CostlySummaries(ScriptedModel):
    """Summaries that cost 40,000 input tokens each."""

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse:
        reply = await super().generate_structured(request, remaining_s=remaining_s)
        return StructuredResponse(reply.json_text, usage=TokenUsage(40_000, 10))


async def test_the_summarys_tokens_count_in_the_budget() -> None:
    model = _CostlySummaries(
        [
            turn("", search_call("temporary directory", call_id="q")),
            turn("", summarize_call(IDS)),
            turn("", search_call("more")),
            turn("", answer_call("TemporaryDirectory() cleans up [1].", ["tempfile__chunk_0"])),
        ],
        summaries=[SUMMARY],
    )
    search = FakeSearch(DOCUMENTS, collection="python-docs")
    events = await run_events(
        AgentLoop(model, search),
        mode=Mode.THINKING,
        allowed_tools=frozenset({"summarize"}),
        max_tokens=30_000,
    )
    result = result_of(events)
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert len(model.requests) == 2
    assert result.usage.input_tokens >= 40_000


async def test_the_input_is_bounded_and_what_does_not_fit_is_named() -> None:
    long = [
        FakeDocument(f"long{i}__chunk_0", f"Long {i}", "temporary directory " + "word " * 400)
        for i in range(3)
    ]
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory", call_id="q")),
            turn("", summarize_call([d.id for d in long])),
            turn("", answer_call("x")),
        ],
        summaries=[json.dumps({"summary": "s", "points": []})],
    )
    search = FakeSearch(long, collection="python-docs")
    settings = LoopSettings(summarize_max_chars=3_000, preview_chars=0)
    events = await run_events(
        AgentLoop(model, search, settings=settings),
        mode=Mode.THINKING,
        allowed_tools=frozenset({"summarize"}),
    )
    sent = model.structured_requests[0].messages[-1].text
    assert "### [long0__chunk_0]" in sent
    assert "### [long2__chunk_0]" not in sent
    [event] = [e for e in events if isinstance(e, Summarizing)]
    assert event.input_chars <= 3_000
    summary_text = tool_messages(model, 2)[1][1]
    assert (
        "Not summarised (the input bound was reached): long1__chunk_0, long2__chunk_0."
        in summary_text
    )


async def test_ids_not_seen_are_refused_without_asking_the_gateway() -> None:
    model = ScriptedModel(
        [turn("", summarize_call(["tempfile__chunk_0"])), turn("", answer_call("x"))],
    )
    search = FakeSearch(DOCUMENTS, collection="python-docs")
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"summarize"})
    )
    [(_, text, is_error)] = tool_messages(model, 1)
    assert is_error
    assert "Not results you have seen in this conversation: tempfile__chunk_0" in text
    assert model.structured_requests == []
    [event] = [e for e in events if isinstance(e, Summarizing)]
    assert event.error == text


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"focus": "x"}', "result_ids: Field required"),
        ('{"result_ids": [], "focus": "x"}', "result_ids: List should have at least 1 item"),
        ('{"result_ids": ["a"], "focus": ""}', "focus: String should have at least 1 character"),
        ("[", "not valid JSON"),
    ],
)
async def test_bad_arguments_from_the_model_come_back_as_a_tool_error(
    arguments: str, problem: str
) -> None:
    model = ScriptedModel(
        [turn("", raw_call("summarize", arguments, call_id="s")), turn("", answer_call("x"))]
    )
    search = FakeSearch(DOCUMENTS, collection="python-docs")
    await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"summarize"})
    )
    [(_, text, is_error)] = tool_messages(model, 1)
    assert is_error
    assert problem in text
    assert model.structured_requests == []


@pytest.mark.parametrize(
    ("fault", "says"),
    [
        (
            InvalidArgument("no reply satisfied the schema"),
            "The summary failed: no reply satisfied",
        ),
        (ContextWindowExceeded("too long"), "too long for the model to summarise at once"),
    ],
)
async def test_a_gateway_fault_is_a_tool_error_and_the_texts_stay(
    fault: BaseException, says: str
) -> None:
    model, search = summarizing_run([fault])
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"summarize"})
    )
    search_result, (_, text, is_error) = tool_messages(model, 2)
    assert is_error
    assert says in text
    assert "removed automatically" in search_result[1]
    assert result_of(events).stop_reason is StopReason.ANSWERED


async def test_an_unavailable_gateway_ends_the_run() -> None:
    model, search = summarizing_run([Unavailable("llm gateway: not reachable")])
    with pytest.raises(Unavailable):
        await run_events(
            AgentLoop(model, search), mode=Mode.THINKING, allowed_tools=frozenset({"summarize"})
        )
    assert len(model.requests) == 2


class _HoldingSummaries(ScriptedModel):
    """Holds every summary until cancelled, and says so."""

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse:
        self.structured_requests.append(request)
        self.called.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


async def test_cancelling_the_run_cancels_the_summary_in_flight() -> None:
    model = _HoldingSummaries(
        [turn("", search_call("temporary directory")), turn("", summarize_call(IDS))]
    )
    search = FakeSearch(DOCUMENTS, collection="python-docs")
    request = RunRequest(
        collection="python-docs",
        query="q",
        mode=Mode.THINKING,
        allowed_tools=frozenset({"summarize"}),
    )
    task = asyncio.create_task(collect(AgentLoop(model, search).stream(request)))
    while not model.structured_requests:
        await asyncio.wait_for(model.called.wait(), 10)
        model.called.clear()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert model.cancelled.is_set()
    assert len(model.requests) == 2
