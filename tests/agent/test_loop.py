"""Every branch of the run loop, driven by a scripted model and the in-memory search tool."""

from __future__ import annotations

import json

import pytest

from services.agent.config import LoopSettings
from services.agent.events import Done, Started, Thinking
from services.agent.loop import AgentLoop
from services.agent.messages import Role, unpaired_calls
from services.agent.ports import ContextWindowExceeded
from services.agent.prompt import FORCE_ANSWER, SUMMARY_HEADING
from services.agent.run import Mode, StopReason
from services.agent.testing import (
    ScriptedModel,
    answer_call,
    raw_call,
    search_call,
    turn,
)
from services.agent.tools import TOOL_NAMES, Searching
from services.common.errors import Aborted, InvalidArgument, NotFound, Unavailable
from tests.agent.conftest import DOCUMENTS, caller_filter, result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP = "tempfile__chunk_0"
FULL_TEXT = LoopSettings(preview_chars=0)
"""Results always in full: for the tests of the Layer-1 budget and Layer-2 pruning."""
MKDTEMP = "tempfile__chunk_1"


def _tool_results(model: ScriptedModel, call: int) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_id, m.text, m.is_error)
        for m in model.requests[call].messages
        if m.role is Role.TOOL
    ]


async def test_fast_mode_searches_once_then_answers_with_real_citations(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("Look for tempfile.", search_call("temporary directory removed automatically")),
            turn("", answer_call("Use tempfile.TemporaryDirectory() [1].", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.FAST)

    assert [type(e) for e in events] == [Started, Thinking, Searching, Done]
    result = result_of(events)
    assert result.stop_reason is StopReason.ANSWERED
    assert result.answer.citations[0].result_id == TEMP
    assert result.answer.citations[0].url.endswith("tempfile.html")
    assert result.results[0].id == TEMP
    assert result.iterations == 1
    assert result.usage.model_calls == 2
    assert result.usage.searches == 1
    final = model.requests[1]
    assert [t.name for t in final.callable_tools] == ["submit_answer"]
    assert (final.tool_choice.mode, final.tool_choice.name) == ("named", "submit_answer")
    assert all(m.text != FORCE_ANSWER for m in final.messages)


async def test_first_user_message_follows_the_tool_contract(search: FakeSearch) -> None:
    model = ScriptedModel([turn("", answer_call("Nothing to say."))])
    caller = caller_filter([("source", "equals", "stdlib")])
    await run_events(AgentLoop(model, search), mode=Mode.THINKING, caller_filter=caller)

    system, task = model.requests[0].messages[:2]
    assert system.role is Role.SYSTEM
    assert "submit_answer" in system.text
    headings = [line for line in task.text.splitlines() if line.startswith("## ")]
    assert headings == ["## Query", "## Mode", "## Caller filter", "## Collection"]
    assert task.text.startswith("## Query\ntemporary directory\n")
    assert "THINKING — search as often as needed" in task.text
    assert '[{"conditions": [{"field": "source", "operator": "equals", "value": "stdlib"}]}]' in (
        task.text
    )
    assert "stdlib (2)" in task.text  # documents per source, as the search tool counts them


async def test_system_prompt_is_identical_across_runs_so_it_can_be_cached(
    search: FakeSearch,
) -> None:
    model = ScriptedModel([turn("", answer_call("a")), turn("", answer_call("b"))])
    loop = AgentLoop(model, search)
    await run_events(loop, query="one", mode=Mode.THINKING)
    await run_events(loop, query="two", mode=Mode.THINKING)
    assert model.requests[0].messages[0] == model.requests[1].messages[0]


async def test_prior_turns_come_before_the_first_user_message(search: FakeSearch) -> None:
    from services.agent.run import Turn

    model = ScriptedModel([turn("", answer_call("ok"))])
    await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, history=(Turn("earlier q", "earlier a"),)
    )
    roles = [(m.role, m.text[:9]) for m in model.requests[0].messages[1:]]
    assert roles == [
        (Role.USER, "earlier q"),
        (Role.ASSISTANT, "earlier a"),
        (Role.USER, "## Query\n"),
    ]


async def test_thinking_mode_lets_the_model_search_until_it_answers(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("First a broad search.", search_call("temporary")),
            turn("Now the exact function.", search_call("mkdtemp", strategy="keyword")),
            turn("Enough.", answer_call("TemporaryDirectory [1]; mkdtemp [2].", [TEMP, MKDTEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    searching = [e for e in events if isinstance(e, Searching)]
    assert [(s.iteration, s.primary, s.strategy) for s in searching] == [
        (1, "temporary", "hybrid"),
        (2, "mkdtemp", "keyword"),
    ]
    thinking = [(e.iteration, e.text) for e in events if isinstance(e, Thinking)]
    assert thinking[0] == (1, "First a broad search.")
    result = result_of(events)
    assert result.stop_reason is StopReason.ANSWERED
    assert [r.id for r in result.results[:2]] == [TEMP, MKDTEMP]
    assert all([t.name for t in r.callable_tools] == list(TOOL_NAMES) for r in model.requests)


async def test_iteration_cap_forces_one_last_call_offering_only_submit_answer(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary")),
            turn("", search_call("directory")),
            turn("", answer_call("Forced [1].", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING, max_iterations=2)

    result = result_of(events)
    assert result.stop_reason is StopReason.FORCED_ANSWER
    assert result.iterations == 2
    last = model.requests[-1]
    assert [t.name for t in last.callable_tools] == ["submit_answer"]
    assert last.tool_choice.name == "submit_answer"
    assert last.messages[-1].text == FORCE_ANSWER


async def test_thinking_safety_cap_is_twenty_searches(search: FakeSearch) -> None:
    script = [turn("", search_call(f"query {i}")) for i in range(20)]
    model = ScriptedModel([*script, turn("", answer_call("Done."))])
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    assert result.iterations == 20
    assert result.stop_reason is StopReason.FORCED_ANSWER
    assert len(model.requests) == 21


async def test_max_iterations_never_raises_the_mode_cap(search: FakeSearch) -> None:
    model = ScriptedModel([turn("", search_call("temporary")), turn("", answer_call("x"))])
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.FAST, max_iterations=5))
    assert result.iterations == 1
    assert [t.name for t in model.requests[1].callable_tools] == ["submit_answer"]


async def test_a_turn_without_tool_calls_is_followed_by_a_forced_answer(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("I think I know already."),
            turn("", answer_call("Honest answer.")),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)
    result = result_of(events)
    assert result.stop_reason is StopReason.FORCED_ANSWER
    assert result.answer.text == "Honest answer."
    assert model.requests[2].messages[-2].text == "I think I know already."
    assert model.requests[2].messages[-1].text == FORCE_ANSWER


async def test_fallback_answer_when_even_the_forced_call_does_not_answer(
    search: FakeSearch,
) -> None:
    model = ScriptedModel([turn("", search_call("temporary directory")), turn("")])
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.FAST))
    assert result.stop_reason is StopReason.FALLBACK_ANSWER
    assert "did not produce a conclusive answer" in result.answer.text
    seen = {r.id for r in result.results}
    assert result.answer.citations
    assert all(c.result_id in seen for c in result.answer.citations)


async def test_fallback_without_any_result_cites_nothing(search: FakeSearch) -> None:
    model = ScriptedModel([turn(""), turn(""), turn("")])  # the router's search finds nothing
    result = result_of(
        await run_events(AgentLoop(model, search), mode=Mode.THINKING, query="xyzzy quux")
    )
    assert result.stop_reason is StopReason.FALLBACK_ANSWER
    assert result.answer.citations == ()
    assert result.results == ()


async def test_invalid_json_arguments_go_back_as_a_tool_error_the_model_corrects(
    search: FakeSearch,
) -> None:
    bad = raw_call("search", '{"query": {"primary": "temp', call_id="bad")
    model = ScriptedModel(
        [
            turn("", bad),
            turn("Fixed.", search_call("temporary directory")),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    call_id, text, is_error = _tool_results(model, 1)[0]
    assert (call_id, is_error) == ("bad", True)
    assert "not valid JSON" in text
    assert result.stop_reason is StopReason.ANSWERED
    assert len(search.requests) == 1


async def test_an_offset_beyond_any_page_is_a_tool_error_not_the_end_of_the_run(
    search: FakeSearch,
) -> None:
    """Seen in the field: `offset` 3e9 overflowed the int32 on the wire; the run ended INTERNAL."""
    far = raw_call(
        "search", '{"query": {"primary": "temporary"}, "offset": 3000000000}', call_id="far"
    )
    model = ScriptedModel(
        [
            turn("", far),
            turn("", search_call("temporary directory")),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    call_id, text, is_error = _tool_results(model, 1)[0]
    assert (call_id, is_error) == ("far", True)
    assert "offset" in text
    assert result.stop_reason is StopReason.ANSWERED


async def test_arguments_failing_validation_name_the_field(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary", limit=500, call_id="big")),
            turn("", answer_call("none")),
        ]
    )
    await run_events(AgentLoop(model, search), mode=Mode.THINKING)
    _, text, is_error = _tool_results(model, 1)[0]
    assert is_error
    assert "limit" in text
    assert search.requests == []


async def test_a_filter_the_search_tool_rejects_goes_back_with_its_field(
    search: FakeSearch,
) -> None:
    rejection = InvalidArgument.for_field(
        "filter.groups[0].conditions[0].field", "unknown field 'colour'"
    )
    search.errors.append(rejection)
    colour = {"conditions": [{"field": "colour", "operator": "equals", "value": "red"}]}
    model = ScriptedModel(
        [
            turn("", search_call("temporary", filter_groups=[colour])),
            turn("", search_call("temporary")),
            turn("", answer_call("ok [1]", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    _, text, is_error = _tool_results(model, 1)[0]
    assert is_error
    assert "unknown field 'colour'" in text
    assert "filter.groups[0].conditions[0].field" in text
    assert result.stop_reason is StopReason.ANSWERED


async def test_unknown_citation_is_sent_back_once(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", answer_call("A [1] B [2]", ["made-up__chunk_9", TEMP], call_id="first")),
            turn("", answer_call("B [1]", [TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    call_id, text, is_error = _tool_results(model, 2)[-1]
    assert (call_id, is_error) == ("first", True)
    assert "made-up__chunk_9" in text
    assert [c.result_id for c in result.answer.citations] == [TEMP]
    assert result.stop_reason is StopReason.ANSWERED


async def test_unknown_citations_are_dropped_the_second_time_and_markers_renumbered(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", answer_call("A [1] B [2]", ["ghost__chunk_0", TEMP])),
            turn("", answer_call("A [1] B [2]", ["ghost__chunk_0", TEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    assert [c.result_id for c in result.answer.citations] == [TEMP]
    assert result.answer.text == "A  B [1]"
    assert len(model.requests) == 3


async def test_citations_of_results_dropped_by_the_budget_do_not_count_as_seen() -> None:
    from tests.agent.fake_search import FakeDocument

    big = [
        FakeDocument(f"d{i}__chunk_0", f"temporary {i}", "temporary " + "x" * 3000)
        for i in range(5)
    ]
    search = FakeSearch(big, collection="python-docs")
    model = ScriptedModel(
        [
            turn("", search_call("temporary")),
            turn("", answer_call("x [1]", ["d4__chunk_0"])),
            turn("", answer_call("x [1]", ["d4__chunk_0"])),
        ],
        context_window_tokens=8_000,
    )
    full = AgentLoop(model, search, settings=FULL_TEXT)
    result = result_of(await run_events(full, mode=Mode.THINKING))
    shown = _tool_results(model, 1)[0][1]
    assert shown.startswith("Found 5 results; showing 3.")
    assert result.answer.citations == ()


async def test_results_are_cited_first_then_the_rest_by_score_deduplicated(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", search_call("temporary directory deleting")),
            turn("", answer_call("mkdtemp [1]", [MKDTEMP])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING, limit=3))
    ids = [r.id for r in result.results]
    assert ids[0] == MKDTEMP
    assert len(ids) == len(set(ids)) == 3


async def test_several_tool_calls_in_one_turn_run_in_order_each_with_its_result(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn(
                "Two angles.",
                search_call("tempfile", call_id="a"),
                search_call("shutil", call_id="b"),
            ),
            turn("", answer_call("ok [1]", [TEMP])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)
    assert [e.primary for e in events if isinstance(e, Searching)] == ["tempfile", "shutil"]
    assert [r[0] for r in _tool_results(model, 1)] == ["a", "b"]
    assert unpaired_calls(model.requests[1].messages) == []


async def test_searches_beyond_the_cap_in_one_turn_get_an_error_result(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("tempfile", call_id="a"), search_call("shutil", call_id="b")),
            turn("", answer_call("ok [1]", [TEMP])),
        ]
    )
    await run_events(AgentLoop(model, search), mode=Mode.FAST)
    results = _tool_results(model, 1)
    assert [(r[0], r[2]) for r in results] == [("a", False), ("b", True)]
    assert len(search.requests) == 1


async def test_unknown_tool_names_get_an_error_result(search: FakeSearch) -> None:
    model = ScriptedModel(
        [turn("", raw_call("browse", "{}", call_id="x")), turn("", answer_call("ok"))]
    )
    await run_events(AgentLoop(model, search), mode=Mode.THINKING)
    assert _tool_results(model, 1) == [
        ("x", "Unknown tool 'browse'. The tools are " + ", ".join(TOOL_NAMES) + ".", True)
    ]


async def test_every_search_carries_the_callers_filter_so_the_model_only_narrows(
    search: FakeSearch,
) -> None:
    caller = caller_filter([("source", "equals", "stdlib")])
    widen = {"conditions": [{"field": "source", "operator": "equals", "value": "tutorial"}]}
    model = ScriptedModel(
        [
            turn("", search_call("file", filter_groups=[widen])),
            turn("", search_call("file")),
            turn("", answer_call("none")),
        ]
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.THINKING, caller_filter=caller, query="file"
    )
    first, second = search.requests
    assert (first.caller_filter, second.caller_filter) == (caller, caller)
    assert [[c.value for c in g.conditions] for g in first.filter_groups] == [["tutorial"]]
    assert second.filter_groups == ()
    searching = [e for e in events if isinstance(e, Searching)]
    assert [e.result_count for e in searching] == [0, 1]
    assert searching[0].filter_groups == first.filter_groups
    assert "shutil" in _tool_results(model, 2)[1][1]


async def test_filter_explosion_goes_back_to_the_model_emits_its_event_and_is_no_iteration(
    search: FakeSearch,
) -> None:
    caller = caller_filter(*[[("title", "contains", str(i))] for i in range(6)])
    groups = [
        {"conditions": [{"field": "source", "operator": "equals", "value": str(i)}]}
        for i in range(6)
    ]
    model = ScriptedModel(
        [turn("", search_call("x", filter_groups=groups)), turn("", answer_call("no"))]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING, caller_filter=caller)
    _, text, is_error = _tool_results(model, 1)[0]
    assert is_error
    assert "expand to 36 groups" in text
    [searching] = [e for e in events if isinstance(e, Searching)]
    assert searching.error == text
    assert searching.result_count == 0
    assert result_of(events).iterations == 0
    assert result_of(events).usage.searches == 0


async def test_context_overflow_compacts_older_exchanges_and_retries_once(
    search: FakeSearch,
) -> None:
    summary = json.dumps(
        {
            "summary": "Searched tempfile and shutil.",
            "queries_tried": ["tempfile", "shutil"],
            "relevant_result_ids": [TEMP],
            "still_missing": "",
        }
    )
    model = ScriptedModel(
        [
            turn("one", search_call("tempfile")),
            turn("two", search_call("shutil")),
            turn("three", search_call("mkdtemp")),
            ContextWindowExceeded("too long"),
            turn("", answer_call("TemporaryDirectory [1]", [TEMP])),
        ],
        summaries=[summary],
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))

    assert result.stop_reason is StopReason.ANSWERED
    assert result.answer.citations[0].result_id == TEMP
    retried = model.requests[-1].messages
    task = retried[1].text
    assert SUMMARY_HEADING in task
    assert "Queries tried: tempfile; shutil" in task
    assert [m.text for m in retried if m.role is Role.ASSISTANT] == ["two", "three"]
    assert unpaired_calls(retried) == []
    assert retried[2].role is Role.ASSISTANT
    assert len(model.structured_requests) == 1
    assert model.structured_requests[0].schema_name == "ConversationSummary"
    assert "tempfile" in model.structured_requests[0].messages[-1].text
    assert result.usage.model_calls == 5


async def test_overflow_after_compaction_ends_with_an_honest_fallback(search: FakeSearch) -> None:
    summary = json.dumps({"summary": "s"})
    model = ScriptedModel(
        [
            turn("", search_call("tempfile")),
            turn("", search_call("shutil")),
            turn("", search_call("mkdtemp")),
            ContextWindowExceeded("too long"),
            ContextWindowExceeded("still too long"),
        ],
        summaries=[summary],
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))
    assert result.stop_reason is StopReason.FALLBACK_ANSWER
    assert {c.result_id for c in result.answer.citations} <= {r.id for r in result.results}


async def test_token_budget_stops_searching_and_forces_an_answer(search: FakeSearch) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("tempfile"), input_tokens=5000, output_tokens=100),
            turn("", answer_call("Budget answer [1]", [TEMP])),
        ]
    )
    # The first turn's prompt (system prompt, five tool schemas) is estimated at ~4,100 tokens,
    # and the budget keeps room for the answer-only call after it (~3,600 + 500 for the answer).
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING, max_tokens=10_000)
    result = result_of(events)
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert len(model.requests) == 2
    assert [t.name for t in model.requests[1].callable_tools] == ["submit_answer"]
    assert result.answer.text == "Budget answer [1]"


async def test_a_spent_budget_says_the_budget_stopped_the_run_without_another_call(
    search: FakeSearch,
) -> None:
    model = ScriptedModel([turn("", search_call("tempfile"), input_tokens=9_500)])
    result = result_of(
        await run_events(AgentLoop(model, search), mode=Mode.THINKING, max_tokens=10_000)
    )
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert len(model.requests) == 1
    assert result.answer.text.startswith("The run stopped at its token budget (10000 tokens)")


async def test_a_budget_spent_before_any_search_never_claims_the_collection_lacks_the_answer(
    search: FakeSearch,
) -> None:
    model = ScriptedModel([turn("", answer_call("Not in the collection.", []))])
    result = result_of(
        await run_events(AgentLoop(model, search), mode=Mode.THINKING, max_tokens=100)
    )
    assert result.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert model.requests == []
    assert "says nothing about whether the collection holds the answer" in result.answer.text
    assert "no relevant results" not in result.answer.text


async def test_unknown_collection_is_not_found(search: FakeSearch) -> None:
    with pytest.raises(NotFound):
        await run_events(AgentLoop(ScriptedModel(), search), collection="nope")


async def test_caller_filter_on_an_unknown_field_is_rejected_naming_it(search: FakeSearch) -> None:
    model = ScriptedModel()
    with pytest.raises(InvalidArgument) as caught:
        await run_events(
            AgentLoop(model, search), caller_filter=caller_filter([("colour", "equals", "x")])
        )
    assert [v.field for v in caught.value.violations] == ["filter.groups[0].conditions[0].field"]
    assert model.requests == []
    assert search.requests == []


async def test_a_caller_filter_the_search_tool_refuses_ends_the_run_before_any_model_call(
    search: FakeSearch,
) -> None:
    """The reproduced bug: `title greater_than "a"` passed the agent's own checks, every search
    then failed, and the model was told to fix a filter it never wrote."""
    model = ScriptedModel([turn("", search_call("temporary")), turn("", answer_call("x"))])
    bad = caller_filter([("source", "equals", "stdlib"), ("title", "greater_than", "a")])
    with pytest.raises(InvalidArgument) as caught:
        await run_events(AgentLoop(model, search), caller_filter=bad)
    assert [v.field for v in caught.value.violations] == ["filter.groups[0].conditions[1].operator"]
    assert "title" in caught.value.violations[0].description
    assert model.requests == []
    assert search.requests == []
    assert search.collections == [bad], "refused by the first call that carries it"


async def test_an_unavailable_search_tool_ends_the_run(search: FakeSearch) -> None:
    search.errors.append(Unavailable("search tool down"))
    model = ScriptedModel([turn("", search_call("tempfile")), turn("", answer_call("x"))])
    with pytest.raises(Unavailable):
        await run_events(AgentLoop(model, search), mode=Mode.THINKING)
    assert len(model.requests) == 1


async def test_context_window_comes_from_the_route_unless_overridden(search: FakeSearch) -> None:
    from tests.agent.fake_search import FakeDocument

    docs = [
        FakeDocument(f"d{i}__chunk_0", "temporary", "temporary " + "y" * 2000) for i in range(10)
    ]
    wide = FakeSearch(docs, collection="python-docs")
    model = ScriptedModel(
        [turn("", search_call("temporary")), turn("", answer_call("x"))],
        context_window_tokens=100_000,
    )
    loop = AgentLoop(model, wide, context_window_tokens=4_000, settings=FULL_TEXT)
    await run_events(loop, mode=Mode.FAST)
    assert "showing 0." not in _tool_results(model, 1)[0][1]
    assert _tool_results(model, 1)[0][1].startswith("Found 10 results; showing 2.")


async def test_old_results_are_pruned_before_calls_while_assistant_text_stays() -> None:
    from services.agent.context import CLEARED
    from tests.agent.fake_search import FakeDocument

    docs = [
        FakeDocument(f"d{i}__chunk_0", f"topic{i} page", f"topic{i} " + "z" * 1_500)
        for i in range(12)
    ]
    search = FakeSearch(docs, collection="python-docs")
    script = [turn(f"reasoning {i}", search_call(f"topic{i}", limit=1)) for i in range(8)]
    # a window where the newest result fits beside the answer's reserve (Layer 1)
    model = ScriptedModel([*script, turn("", answer_call("done"))], context_window_tokens=3_800)
    loop = AgentLoop(model, search, settings=FULL_TEXT)
    await run_events(loop, mode=Mode.THINKING, max_iterations=8)

    last = model.requests[-1].messages
    results = [m for m in last if m.role is Role.TOOL]
    assert results[-1].text.endswith("z" * 1_500 + "\n")
    assert any(r.text == CLEARED or "trimmed" in r.text for r in results[:-1])
    assert [m.text for m in last if m.role is Role.ASSISTANT] == [
        f"reasoning {i}" for i in range(8)
    ]
    assert unpaired_calls(last) == []


async def test_a_search_repeated_word_for_word_is_not_run_again_and_a_second_repeat_ends_the_search(
    search: FakeSearch,
) -> None:
    """A small model looped on one search (10 times in a row on a real question): a repeat is
    answered with a tool error pointing at the first call, without searching; the second repeat
    moves the run to its answer-only call."""
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", search_call("temporary directory")),
            turn("", search_call("temporary directory")),
            turn("", answer_call("Use tempfile [1].", ["tempfile__chunk_0"])),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    result = result_of(events)
    assert len(search.requests) == 1
    refused = [m for m in model.requests[2].messages if m.role is Role.TOOL][-1]
    assert refused.is_error
    assert "already ran this exact search" in refused.text
    assert result.stop_reason is StopReason.FORCED_ANSWER
    assert [t.name for t in model.requests[3].callable_tools] == ["submit_answer"]
    assert result.answer.text == "Use tempfile [1]."
    assert result.iterations == 1


async def test_a_search_that_failed_may_be_tried_again_with_the_same_words() -> None:
    """Only a search that ran counts as done: after a failure the same search runs again."""
    search = FakeSearch(DOCUMENTS, collection="python-docs", errors=[Aborted("try again")])
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", search_call("temporary directory")),
            turn("", answer_call("Use tempfile [1].", ["tempfile__chunk_0"])),
        ]
    )
    result = result_of(await run_events(AgentLoop(model, search), mode=Mode.THINKING))

    assert len(search.requests) == 2
    assert result.stop_reason is StopReason.ANSWERED
    assert result.iterations == 1
