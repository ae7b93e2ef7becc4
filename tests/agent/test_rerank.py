"""Judging a search's first hits before the run's model sees them (`loop.rerank_route`): hits are
ordered by how much likelier the judge makes "yes" than "no" (by its reply alone when its
provider reports no log-probabilities); failed or unreadable judgments leave hits in place; only a
first page's first candidates are judged; the caller's deadline still ends the run; without a
route nothing is judged."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable

import pytest

from services.agent import convert
from services.agent.config import LoopSettings
from services.agent.loop import AgentLoop
from services.agent.messages import Role, ToolCall
from services.agent.ports import ModelRequest, ModelResponse, TokenUsage
from services.agent.rerank import judge_text, judgment_score, rerank, verdict
from services.agent.run import Deadline, Mode, StopReason
from services.agent.search import SearchHit
from services.agent.testing import ScriptedModel, answer_call, raw_call, search_call, turn
from services.agent.tools.search import Searching
from services.common.errors import DeadlineExceeded, Unavailable
from tests.agent.conftest import DOCUMENTS, result_of, run_events
from tests.agent.fake_search import FakeSearch

JUDGE_ROUTE = "judge"


def hit(i: int, title: str = "", text: str = "") -> SearchHit:
    return SearchHit(f"doc{i}__chunk_0", f"doc{i}", title or f"title {i}", text or f"text {i}", 1.0)


Answer = str | ModelResponse | BaseException


class Judge:
    """A `ModelClient` whose judgments come from `answer(hit title)`; records what it was asked."""

    def __init__(self, answer: Callable[[str], Answer]) -> None:
        self.answer = answer
        self.requests: list[ModelRequest] = []
        self.running = 0
        self.most_running = 0

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        self.requests.append(request)
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            await asyncio.sleep(0.01)
            passage = request.messages[-1].text.split("Passage: ", 1)[1]
            reply = self.answer(passage.split("\n", 1)[0])
            if isinstance(reply, BaseException):
                raise reply
            if isinstance(reply, ModelResponse):
                return reply
            return ModelResponse(text=reply, usage=TokenUsage(input_tokens=80, output_tokens=1))
        finally:
            self.running -= 1


async def reranked(judge: Judge, hits: list[SearchHit], **kwargs: object):  # type: ignore[no-untyped-def]
    options: dict[str, object] = {
        "model": judge,
        "route": JUDGE_ROUTE,
        "candidates": 10,
        "max_chars": 300,
        "parallel": 4,
        "deadline": Deadline(None),
        **kwargs,
    }
    return await rerank("make a temporary directory", hits, **options)  # type: ignore[arg-type]


async def test_hits_judged_to_answer_go_first_in_the_engines_order() -> None:
    hits = [hit(i) for i in range(6)]
    judge = Judge(lambda title: "Yes." if title in {"title 2", "title 4"} else "No")

    result = await reranked(judge, hits)

    assert [h.id for h in result.hits] == [hits[i].id for i in (2, 4, 0, 1, 3, 5)]
    assert (result.judged, result.answering, result.failed) == (6, 2, 0)
    assert result.usage.input_tokens == 6 * 80
    assert result.usage.output_tokens == 6
    [routes] = {r.route for r in judge.requests}
    assert routes == JUDGE_ROUTE
    assert all(r.tools == () and r.temperature == 0.0 for r in judge.requests)
    assert all(r.max_output_tokens == 1 for r in judge.requests)
    assert all(r.top_logprobs == 20 for r in judge.requests)


def judged(*logprobs: tuple[str, float], text: str = "") -> ModelResponse:
    return ModelResponse(text=text or logprobs[0][0], first_token_logprobs=logprobs)


async def test_with_logprobs_hits_are_ordered_by_how_much_likelier_yes_is_than_no() -> None:
    hits = [hit(i) for i in range(4)]
    replies = {
        # yes far likelier than no (both spellings of each summed)
        "title 0": judged(("yes", -0.1), ("Yes", -2.0), ("no", -3.0)),
        # a "yes" reply, but barely: ranks below a confident one
        "title 1": judged(("yes", -0.6), ("no", -0.8)),
        # "no", with no "yes" among the reported tokens: the least likely one stands in
        "title 2": judged(("no", -0.01), ("maybe", -5.0)),
        # "no", but "yes" close behind
        "title 3": judged(("no", -0.5), (" Yes", -0.9), ("NO", -4.0)),
    }

    result = await reranked(Judge(lambda title: replies[title]), hits)

    assert [h.id for h in result.hits] == [hits[i].id for i in (0, 1, 3, 2)]
    assert (result.judged, result.answering, result.failed) == (4, 2, 0)


def test_a_judgment_score_is_the_log_odds_of_yes_over_no() -> None:
    score = judgment_score(judged(("yes", math.log(0.6)), ("no", math.log(0.2))))
    assert score == pytest.approx(math.log(3))
    assert judgment_score(ModelResponse(text="Yes")) == 1.0
    assert judgment_score(ModelResponse(text="no")) == -1.0
    assert judgment_score(ModelResponse(text="perhaps")) is None
    # log-probabilities with neither answer among them: read the reply
    assert judgment_score(judged(("The", -0.1), text="The passage")) is None


async def test_a_judgment_reads_the_query_the_title_and_the_start_of_the_text() -> None:
    long = hit(1, "tempfile.mkdtemp", "Creates   a\ntemporary directory. " + "x" * 1000)

    text = judge_text("make a temporary directory", long, 40)

    assert text.startswith("Query: make a temporary directory\n\nPassage: tempfile.mkdtemp\n")
    assert "Creates a temporary directory. xxxxxxxx" in text
    assert "x" * 20 not in text  # cut at 40 characters of the collapsed text
    assert text.endswith("Does this passage answer the query? Reply yes or no.")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Yes", True),
        (" yes, it explains how.", True),
        ("NO.", False),
        ("no", False),
        ("Maybe", None),
        ("", None),
        ("The passage answers it", None),
    ],
)
def test_a_reply_is_read_as_yes_no_or_neither(reply: str, expected: bool | None) -> None:
    assert verdict(reply) is expected


async def test_failed_or_unreadable_judgments_leave_their_hits_in_place() -> None:
    hits = [hit(i) for i in range(4)]

    def answer(title: str) -> Answer:
        replies: dict[str, Answer] = {
            "title 0": Unavailable("the gateway is down"),
            "title 1": "I cannot tell",
            "title 2": "no",
            "title 3": "yes",
        }
        return replies[title]

    result = await reranked(Judge(answer), hits)

    # the two judged swap places; the other two stay where the engine put them
    assert [h.id for h in result.hits] == [hits[i].id for i in (0, 1, 3, 2)]
    assert (result.judged, result.answering, result.failed) == (2, 1, 2)


async def test_only_the_first_candidates_are_judged_and_the_rest_keep_their_order() -> None:
    hits = [hit(i) for i in range(5)]
    judge = Judge(lambda title: "yes")

    result = await reranked(judge, hits, candidates=2)

    assert len(judge.requests) == 2
    assert [h.id for h in result.hits] == [h.id for h in hits]
    assert result.answering == 2


async def test_judgments_run_at_most_parallel_at_once() -> None:
    judge = Judge(lambda title: "no")

    await reranked(judge, [hit(i) for i in range(10)], parallel=3)

    assert judge.most_running == 3
    assert len(judge.requests) == 10


async def test_an_expired_deadline_ends_the_judging_with_deadline_exceeded() -> None:
    clock = iter([0.0, 5.0, 5.0, 5.0, 5.0])
    deadline = Deadline(1.0, clock=lambda: next(clock))
    judge = Judge(lambda title: "yes")

    with pytest.raises(DeadlineExceeded):
        await reranked(judge, [hit(i) for i in range(3)], deadline=deadline)

    assert judge.requests == []


async def test_a_deadline_expiring_mid_judging_drops_the_judgments_still_running() -> None:
    hang = asyncio.Event()
    finished: list[str] = []

    class Slow(Judge):
        async def generate(
            self, request: ModelRequest, *, remaining_s: float | None
        ) -> ModelResponse:
            if "title 0" in request.messages[-1].text:
                raise DeadlineExceeded("the caller's deadline expired")
            await hang.wait()  # never set: only cancellation ends it
            finished.append(request.messages[-1].text)
            return ModelResponse(text="yes")

    judge = Slow(lambda title: "yes")
    before = len(asyncio.all_tasks())

    with pytest.raises(DeadlineExceeded):
        await reranked(judge, [hit(i) for i in range(4)])

    assert finished == []
    assert len(asyncio.all_tasks()) == before  # nothing left running


class _JudgingModel(ScriptedModel):
    """The run's scripted model, with judgments on the rerank route answered apart."""

    def __init__(self, turns: list[ModelResponse], answer: Callable[[str], Answer]) -> None:
        super().__init__(turns)
        self.judge = Judge(answer)

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        if request.route == JUDGE_ROUTE:
            return await self.judge.generate(request, remaining_s=remaining_s)
        return await super().generate(request, remaining_s=remaining_s)


def _shown_ids(model: ScriptedModel, request: int) -> list[str]:
    [result] = [m.text for m in model.requests[request].messages if m.role is Role.TOOL]
    return [line.split("]")[0][5:] for line in result.splitlines() if line.startswith("### [")]


def _judged_run(
    answer: Callable[[str], str], *calls: ToolCall, rerank_route: str = JUDGE_ROUTE
) -> tuple[_JudgingModel, AgentLoop]:
    model = _JudgingModel(
        [
            *(turn("", call) for call in calls),
            turn("", answer_call("mkdtemp() does not clean up [1].", ["tempfile__chunk_1"])),
        ],
        answer,
    )
    settings = LoopSettings(rerank_route=rerank_route)
    return model, AgentLoop(
        model, FakeSearch(DOCUMENTS, collection="python-docs"), settings=settings
    )


async def test_the_model_is_shown_the_hit_judged_to_answer_first() -> None:
    plain = FakeSearch(DOCUMENTS, collection="python-docs")
    engine_order = [h.id for h in (await _engine_page(plain)).hits]
    assert engine_order[0] != "tempfile__chunk_1"  # the judged hit is not the engine's first
    model, loop = _judged_run(
        lambda title: "yes" if title == "tempfile — mkdtemp" else "no",
        search_call("temporary directory", call_id="q"),
    )

    events = await run_events(loop, mode=Mode.THINKING)

    shown = _shown_ids(model, 1)
    assert shown[0] == "tempfile__chunk_1"
    assert sorted(shown) == sorted(engine_order)
    [searching] = [e for e in events if isinstance(e, Searching)]
    assert searching.reranked is not None
    assert searching.reranked.answering == 1
    assert searching.reranked.judged == len(engine_order)
    streamed = convert.event_message(searching).searching
    assert streamed.HasField("rerank")
    assert (streamed.rerank.judged, streamed.rerank.answering) == (len(engine_order), 1)
    assert streamed.rerank.failed == 0
    result = result_of(events)
    assert result.stop_reason is StopReason.ANSWERED
    assert result.steps[0].usage.input_tokens == 100 + 80 * len(engine_order)


async def test_without_a_rerank_route_nothing_is_judged_and_the_engine_order_stays() -> None:
    plain = FakeSearch(DOCUMENTS, collection="python-docs")
    engine_order = [h.id for h in (await _engine_page(plain)).hits]
    model, loop = _judged_run(
        lambda title: "yes", search_call("temporary directory"), rerank_route=""
    )

    events = await run_events(loop, mode=Mode.THINKING)

    assert model.judge.requests == []
    assert _shown_ids(model, 1) == engine_order
    [searching] = [e for e in events if isinstance(e, Searching)]
    assert searching.reranked is None
    assert not convert.event_message(searching).searching.HasField("rerank")


async def test_a_later_page_is_not_reordered() -> None:
    arguments = {"query": {"primary": "temporary directory"}, "offset": 1, "limit": 10}
    model, loop = _judged_run(lambda title: "yes", raw_call("search", json.dumps(arguments)))

    await run_events(loop, mode=Mode.THINKING)

    assert model.judge.requests == []


async def _engine_page(search: FakeSearch):  # type: ignore[no-untyped-def]
    from services.agent.search import SearchRequest

    return await search.search(
        SearchRequest(collection="python-docs", primary="temporary directory"), remaining_s=None
    )
