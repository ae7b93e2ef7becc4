"""Decomposition: in THINKING mode the searches of one turn run concurrently (bounded), each with
its own `searching` event and its own result, in call order; FAST mode never runs two."""

from __future__ import annotations

import asyncio

from services.agent.config import LoopSettings
from services.agent.loop import AgentLoop
from services.agent.messages import Role
from services.agent.prompt import system_prompt
from services.agent.run import Mode, StopReason
from services.agent.search import SearchPage, SearchRequest
from services.agent.testing import ScriptedModel, answer_call, search_call, turn
from services.agent.tools import Searching
from tests.agent.conftest import DOCUMENTS, result_of, run_events
from tests.agent.fake_search import FakeSearch

TEMP, SHUTIL = "tempfile__chunk_0", "shutil__chunk_0"
QUESTION = "How do I create a temporary directory, and how do I delete a directory tree?"


class _Rendezvous(FakeSearch):
    """Each search waits until `expected` searches are in flight together, so searches run one
    after another never get there (they time out and the run fails)."""

    def __init__(self, expected: int) -> None:
        super().__init__(DOCUMENTS, collection="python-docs")
        self.expected = expected
        self.in_flight = 0
        self.most_in_flight = 0
        self.together = asyncio.Event()

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight >= self.expected:
            self.together.set()
        try:
            await asyncio.wait_for(self.together.wait(), timeout=10)
            return await super().search(request, remaining_s=remaining_s)
        finally:
            self.in_flight -= 1


async def test_a_two_part_question_runs_both_searches_at_once_each_with_its_event() -> None:
    search = _Rendezvous(expected=2)
    model = ScriptedModel(
        [
            turn(
                "Two parts: search each.",
                search_call("temporary directory", call_id="part1"),
                search_call("delete directory tree rmtree", call_id="part2"),
            ),
            turn("", answer_call("Use TemporaryDirectory [1]; shutil.rmtree [2].", [TEMP, SHUTIL])),
        ]
    )
    events = await run_events(AgentLoop(model, search), query=QUESTION, mode=Mode.THINKING)

    assert search.most_in_flight == 2
    searching = [e for e in events if isinstance(e, Searching)]
    assert [(e.iteration, e.primary) for e in searching] == [
        (1, "temporary directory"),
        (2, "delete directory tree rmtree"),
    ]
    results = [m for m in model.requests[1].messages if m.role is Role.TOOL]
    assert [m.tool_call_id for m in results] == ["part1", "part2"]
    assert f"[{TEMP}]" in results[0].text
    assert f"[{SHUTIL}]" in results[1].text
    result = result_of(events)
    assert [c.result_id for c in result.answer.citations] == [TEMP, SHUTIL]
    assert result.usage.searches == 2
    assert result.stop_reason is StopReason.ANSWERED


async def test_concurrency_is_bounded_and_the_cap_still_counts_every_search() -> None:
    search = _Rendezvous(expected=2)
    model = ScriptedModel(
        [
            turn("", *(search_call(f"directory {n}", call_id=f"s{n}") for n in range(5))),
            turn("", answer_call("Done.")),
        ]
    )
    settings = LoopSettings(parallel_searches=2, thinking_max_iterations=3)
    events = await run_events(AgentLoop(model, search, settings=settings), mode=Mode.THINKING)

    assert search.most_in_flight == 2
    assert [e.iteration for e in events if isinstance(e, Searching)] == [1, 2, 3]
    results = [m for m in model.requests[1].messages if m.role is Role.TOOL]
    assert [(m.tool_call_id, m.is_error) for m in results] == [
        ("s0", False),
        ("s1", False),
        ("s2", False),
        ("s3", True),
        ("s4", True),
    ]
    assert "No more searches are allowed in this run (limit 3)" in results[3].text


async def test_an_invalid_search_among_concurrent_ones_is_a_tool_error_in_its_place(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn(
                "",
                search_call("temporary", call_id="ok"),
                search_call("x", strategy="fuzzy", call_id="bad"),
                search_call("rmtree", call_id="ok2"),
            ),
            turn("", answer_call("Done.")),
        ]
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    results = [m for m in model.requests[1].messages if m.role is Role.TOOL]
    assert [(m.tool_call_id, m.is_error) for m in results] == [
        ("ok", False),
        ("bad", True),
        ("ok2", False),
    ]
    assert "retrieval_strategy" in results[1].text
    searching = [e for e in events if isinstance(e, Searching)]
    assert [(e.iteration, bool(e.error)) for e in searching] == [(1, False), (2, True), (2, False)]
    assert result_of(events).iterations == 2  # the invalid search was no iteration


def test_the_prompt_guides_splitting_multi_part_questions() -> None:
    assert "### Questions with several parts" in system_prompt()
