"""Expanding a search's query with a passage a model writes to answer it (`loop.expand_queries`,
HyDE): the search also runs with the query followed by the passage as one more variation, and
the passage's words join the keyword query (`keyword_expansion`); the model's own variations are
untouched; a query is expanded once a run; a
failed expansion leaves the search as the model asked for it; the caller's deadline still ends
the run; off by default."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from services.agent import convert
from services.agent.config import LoopSettings
from services.agent.expand import EXPAND_SYSTEM, expand, expansion_text
from services.agent.loop import AgentLoop
from services.agent.messages import Role, ToolCall
from services.agent.ports import ModelRequest, ModelResponse, TokenUsage
from services.agent.run import Deadline, Mode, StopReason
from services.agent.testing import ScriptedModel, answer_call, raw_call, search_call, turn
from services.agent.tools.search import Searching
from services.common.errors import DeadlineExceeded, InvalidArgument, Unavailable
from tests.agent.conftest import DOCUMENTS, result_of, run_events
from tests.agent.fake_search import FakeSearch

QUESTION = "scratch folder that cleans itself"
PASSAGE = "TemporaryDirectory() creates a temporary directory,\n  removed automatically."


class _WritingModel(ScriptedModel):
    """The run's scripted model, with the passage requests answered apart by `write`."""

    def __init__(
        self, turns: list[ModelResponse], write: str | ModelResponse | BaseException = PASSAGE
    ) -> None:
        super().__init__(turns)
        self.write = write
        self.writes: list[ModelRequest] = []
        self.write_s = 0.0
        """How long a passage takes to write."""

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        if request.messages[0].text == EXPAND_SYSTEM:
            self.writes.append(request)
            await asyncio.sleep(self.write_s)
            if isinstance(self.write, BaseException):
                raise self.write
            if isinstance(self.write, ModelResponse):
                return self.write
            return ModelResponse(
                text=self.write, usage=TokenUsage(input_tokens=40, output_tokens=30)
            )
        return await super().generate(request, remaining_s=remaining_s)


def _run(
    *calls: ToolCall, write: str | ModelResponse | BaseException = PASSAGE, **settings: object
) -> tuple[_WritingModel, FakeSearch, AgentLoop]:
    answer = turn("", answer_call("TemporaryDirectory() [1].", ["tempfile__chunk_0"]))
    plain = turn("", answer_call("Nothing in the collection says."))
    model = _WritingModel([*(turn("", call) for call in calls), answer, plain, plain], write)
    search = FakeSearch(DOCUMENTS, collection="python-docs")
    options: dict[str, object] = {"expand_queries": True, **settings}
    return model, search, AgentLoop(model, search, settings=LoopSettings(**options))


def _shown_ids(model: ScriptedModel, request: int) -> list[str]:
    [result] = [m.text for m in model.requests[request].messages if m.role is Role.TOOL]
    return [line.split("]")[0][5:] for line in result.splitlines() if line.startswith("### [")]


def _searching(events: Sequence[object]) -> list[Searching]:
    return [e for e in events if isinstance(e, Searching)]


async def test_a_search_also_runs_with_the_query_and_the_models_passage_as_a_variation() -> None:
    model, search, loop = _run(search_call(QUESTION, call_id="q"))

    events = await run_events(loop, mode=Mode.THINKING)

    # the question's own words match no document; the passage's do
    [asked] = search.requests
    assert asked.primary == QUESTION
    passage = "TemporaryDirectory() creates a temporary directory, removed automatically."
    assert asked.variations == (f"{QUESTION}\n{passage}",)
    assert asked.keyword_expansion == passage
    assert _shown_ids(model, 1)[0] == "tempfile__chunk_0"
    [write] = model.writes
    assert write.route == model.requests[0].route  # no expand_route: the run's own
    assert (write.temperature, write.max_output_tokens, write.tools) == (0.0, 80, ())
    assert write.messages[-1].text == f"Query: {QUESTION}"
    [searching] = _searching(events)
    assert searching.variations == ()  # the event keeps the model's own variations apart
    assert searching.expansion is not None
    assert searching.expansion.passage == passage
    streamed = convert.event_message(searching).searching
    assert streamed.expansion.passage == passage
    assert not streamed.expansion.failed
    assert not streamed.expansion.reused
    result = result_of(events)
    assert result.stop_reason is StopReason.ANSWERED
    assert result.steps[0].usage.input_tokens == 100 + 40  # the passage counts as a model call
    assert result.steps[0].usage.output_tokens == 20 + 30


async def test_without_expand_queries_no_passage_is_asked_for_and_the_search_goes_as_is() -> None:
    model, search, loop = _run(search_call(QUESTION), expand_queries=False)

    events = await run_events(loop, mode=Mode.THINKING)

    assert model.writes == []
    assert search.requests[0].variations == ()
    assert search.requests[0].keyword_expansion == ""
    assert _shown_ids(model, 1) == []  # nothing found: the question's words are not the docs'
    [searching] = _searching(events)
    assert searching.expansion is None
    assert not convert.event_message(searching).searching.HasField("expansion")


def test_expansion_is_off_by_default() -> None:
    assert LoopSettings().expand_queries is False


async def test_an_expand_route_takes_the_passage_requests() -> None:
    model, _, loop = _run(search_call(QUESTION), expand_route="writer")

    await run_events(loop, mode=Mode.THINKING)

    assert [w.route for w in model.writes] == ["writer"]
    assert all(r.route != "writer" for r in model.requests)


async def test_the_models_variations_are_kept_and_the_passage_comes_after_them() -> None:
    _model, search, loop = _run(search_call(QUESTION, variations=["temp dir auto delete"]))

    await run_events(loop, mode=Mode.THINKING)

    variations = search.requests[0].variations
    assert variations[0] == "temp dir auto delete"
    assert variations[1].startswith(f"{QUESTION}\nTemporaryDirectory()")


# the offline extractive provider (e.g. the route's fallback) answers with its introduction
OFFLINE = ModelResponse(
    text="This is Quarry's offline extractive model, not a conversational language model.",
    provider="extractive",
    provider_kind="extractive",
)


@pytest.mark.parametrize(
    "failure",
    [Unavailable("the gateway is down"), "", "   \n  ", OFFLINE],
    ids=["down", "empty", "blank", "extractive"],
)
async def test_a_failed_expansion_leaves_the_search_as_the_model_asked(
    failure: str | ModelResponse | BaseException,
) -> None:
    model, search, loop = _run(search_call(QUESTION, variations=["x"]), write=failure)

    events = await run_events(loop, mode=Mode.THINKING)

    assert len(model.writes) == 1
    assert search.requests[0].variations == ("x",)
    [searching] = _searching(events)
    assert searching.error == ""
    assert searching.expansion is not None
    assert searching.expansion.failed
    assert convert.event_message(searching).searching.expansion.failed
    assert result_of(events).stop_reason is StopReason.ANSWERED


async def test_a_route_whose_first_provider_is_the_offline_extractive_one_is_not_asked() -> None:
    model, search, loop = _run(search_call(QUESTION))
    model.kind = "extractive"

    events = await run_events(loop, mode=Mode.THINKING)

    assert model.writes == []
    assert search.requests[0].variations == ()
    assert search.requests[0].keyword_expansion == ""
    assert _searching(events)[0].expansion is None


async def test_a_gateway_that_cannot_say_its_providers_fails_the_expansion_not_the_search() -> None:
    model, search, loop = _run(search_call(QUESTION), write=Unavailable("the gateway is down"))

    async def unknown(route: str, *, remaining_s: float | None) -> str:
        raise Unavailable("the gateway is down")

    model.provider_kind = unknown  # type: ignore[method-assign]

    events = await run_events(loop, mode=Mode.THINKING)

    assert search.requests[0].variations == ()
    [searching] = _searching(events)
    assert searching.error == ""
    assert searching.expansion is not None
    assert searching.expansion.failed


async def test_a_keyword_search_is_not_expanded() -> None:
    model, search, loop = _run(search_call(QUESTION, strategy="keyword"))

    events = await run_events(loop, mode=Mode.THINKING)

    assert model.writes == []
    assert search.requests[0].variations == ()
    assert search.requests[0].keyword_expansion == ""
    assert _searching(events)[0].expansion is None


async def test_a_search_with_nine_variations_gives_its_last_one_up_for_the_passage() -> None:
    nine = [f"rephrasing {i}" for i in range(9)]
    model, search, loop = _run(search_call(QUESTION, variations=nine))

    events = await run_events(loop, mode=Mode.THINKING)

    assert len(model.writes) == 1
    variations = search.requests[0].variations
    assert variations[:8] == tuple(nine[:8])
    assert len(variations) == 9  # the search tool's bound
    assert variations[8].startswith(f"{QUESTION}\nTemporaryDirectory()")
    assert _searching(events)[0].variations == tuple(nine)  # what the model asked for


async def test_a_query_is_expanded_once_a_run_and_its_next_page_uses_the_same_passage() -> None:
    second_page = {"query": {"primary": QUESTION}, "offset": 10, "limit": 10}
    model, search, loop = _run(search_call(QUESTION), raw_call("search", json.dumps(second_page)))

    events = await run_events(loop, mode=Mode.THINKING)

    assert len(model.writes) == 1
    first, second = search.requests
    assert second.offset == 10
    assert first.variations == second.variations != ()
    one, two = _searching(events)
    assert (one.expansion_reused, two.expansion_reused) == (False, True)
    streamed = convert.event_message(two).searching.expansion
    assert streamed.reused
    assert streamed.duration_ms == 0
    assert streamed.passage == one.expansion.passage  # type: ignore[union-attr]
    assert result_of(events).steps[1].usage.input_tokens == 100  # no second model call


async def test_the_expanded_variation_is_bounded_by_the_longest_query() -> None:
    long_question = "folder " * 60
    _model, search, loop = _run(search_call(long_question.strip()), max_query_chars=450)

    await run_events(loop, mode=Mode.THINKING)

    [variation] = search.requests[0].variations
    assert len(variation) == 450
    assert variation.startswith(long_question.strip())


async def test_an_expired_deadline_ends_the_expansion_with_deadline_exceeded() -> None:
    expired = _WritingModel([], write=DeadlineExceeded("the caller's deadline expired"))

    with pytest.raises(DeadlineExceeded):
        await expand(
            QUESTION, model=expired, route="r", max_output_tokens=80, deadline=Deadline(None)
        )


def test_the_variation_is_the_query_then_the_passage_on_one_line() -> None:
    assert expansion_text("q", " a\n b\t c ") == "q\na b c"


async def test_a_failed_search_still_counts_the_expansions_tokens() -> None:
    model, search, loop = _run(search_call(QUESTION))
    search.errors.append(InvalidArgument.for_field("filter", "unknown field `metadata.x`"))

    events = await run_events(loop, mode=Mode.THINKING)

    [searching] = _searching(events)
    assert searching.error != ""
    assert len(model.writes) == 1
    assert result_of(events).steps[0].usage.input_tokens == 100 + 40


async def test_a_search_tool_that_refuses_the_passage_gets_the_search_as_asked() -> None:
    """A search tool with a smaller bound on a query than the agent's refuses the variation the
    passage made: the search is sent again without it, and the query's next page goes as asked
    without asking the search tool again with the passage."""
    second_page = {"query": {"primary": QUESTION, "variations": ["x"]}, "offset": 10}
    model, search, loop = _run(
        search_call(QUESTION, variations=["x"]), raw_call("search", json.dumps(second_page))
    )
    search.errors.append(
        InvalidArgument.for_field("query.variations[1]", "longer than 200 characters")
    )

    events = await run_events(loop, mode=Mode.THINKING)

    refused, again, second = search.requests
    assert len(refused.variations) == 2
    assert refused.keyword_expansion
    assert (again.variations, again.keyword_expansion) == (("x",), "")
    assert (second.offset, second.variations, second.keyword_expansion) == (10, ("x",), "")
    assert len(model.writes) == 1
    one, two = _searching(events)
    assert one.error == ""
    assert one.expansion is not None
    assert one.expansion.failed
    assert one.expansion.passage  # what was written and refused, for whoever reads the event
    assert convert.event_message(one).searching.expansion.failed
    assert (two.expansion_reused, two.error) == (True, "")
    assert result_of(events).steps[0].usage.input_tokens == 100 + 40  # the passage still cost


async def test_a_search_tool_that_refuses_the_keyword_expansion_gets_the_search_as_asked() -> None:
    """The passage's words in the keyword query refused (a search tool with a smaller bound):
    the search goes again as the model asked for it, without the passage on either side."""
    _model, search, loop = _run(search_call(QUESTION))
    search.errors.append(
        InvalidArgument.for_field("query.keyword_expansion", "longer than 50 characters")
    )

    events = await run_events(loop, mode=Mode.THINKING)

    refused, again = search.requests
    assert refused.keyword_expansion
    assert len(refused.variations) == 1
    assert (again.variations, again.keyword_expansion) == ((), "")
    [searching] = _searching(events)
    assert searching.error == ""
    assert searching.expansion is not None
    assert searching.expansion.failed


async def test_a_refusal_of_another_field_fails_the_search_as_before() -> None:
    _model, search, loop = _run(search_call(QUESTION, variations=["x"]))
    search.errors.append(InvalidArgument.for_field("query.variations[0]", "must not be empty"))

    events = await run_events(loop, mode=Mode.THINKING)

    assert len(search.requests) == 1
    [searching] = _searching(events)
    assert "query.variations[0]" in searching.error


async def test_parallel_searches_of_one_query_in_a_turn_share_one_passage() -> None:
    """Two searches of one turn with the same query and other filters run side by side: the
    second waits for the passage the first asked for instead of asking again."""
    first = search_call(QUESTION, call_id="all")
    module = [{"conditions": [{"field": "source", "operator": "equals", "value": "docs"}]}]
    second = search_call(QUESTION, filter_groups=module, call_id="tempfile")
    answer = turn("", answer_call("TemporaryDirectory() [1].", ["tempfile__chunk_0"]))
    model = _WritingModel([turn("", first, second), answer])
    model.write_s = 0.05
    search = FakeSearch(DOCUMENTS, collection="python-docs")
    loop = AgentLoop(model, search, settings=LoopSettings(expand_queries=True))

    events = await run_events(loop, mode=Mode.THINKING)

    assert len(model.writes) == 1
    one, two = search.requests
    assert one.variations == two.variations != ()
    assert one.filter_groups != two.filter_groups
    a, b = _searching(events)
    assert (a.expansion_reused, b.expansion_reused) == (False, True)
    assert a.expansion == b.expansion
    assert result_of(events).steps[0].usage.input_tokens == 100 + 40  # one passage paid for
