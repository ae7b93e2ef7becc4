"""Questions to the caller (`ask_user`) through gRPC (port 0), with the scripted model and the
in-memory search tool: the two-phase timeout, and every way an answer can be refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent.client import AgentClient, RunOptions
from services.agent.config import AgentSettings, HistorySettings, QuestionSettings
from services.agent.history_postgres import PostgresRunHistory
from services.agent.loop import AgentLoop
from services.agent.messages import Role, ToolCall
from services.agent.ports import ModelResponse
from services.agent.questions import ClosedQuestion, QuestionOutcome
from services.agent.questions_postgres import PostgresQuestionBoard
from services.agent.run import Deadline, RunRequest
from services.agent.server import SERVICE_NAME, access_rules
from services.agent.servicer import AgentServicer
from services.agent.testing import (
    ScriptedModel,
    answer_call,
    ask_call,
    search_call,
    turn,
)
from services.agent.tools import ASK_USER, TOOL_NAMES
from services.agent.tools.ask_user import _answer_of
from services.common.auth import ApiKey, AuthSettings, key_digest
from services.common.errors import DeadlineExceeded, InvalidArgument, QuarryError
from services.common.postgres import PostgresSettings
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from tests.agent.fake_search import FakeSearch

OWNER_KEY, OTHER_KEY = "qk-owner-1a2b3c", "qk-other-4d5e6f"
KEYS = [
    ApiKey(name="owner", sha256=key_digest(OWNER_KEY), read=["python-docs"]),
    ApiKey(name="other", sha256=key_digest(OTHER_KEY), read=["python-docs"]),
]
ASKING = RunOptions(collection="python-docs", mode="thinking", tools=[ASK_USER], timeout_s=60)


@dataclass
class Agent:
    client: AgentClient
    servicer: AgentServicer
    server: QuarryServer

    def other(self, api_key: str) -> AgentClient:
        return AgentClient(self.server.address, api_key=api_key)


Start = Callable[..., Awaitable[Agent]]


@pytest.fixture(params=["memory", "postgres"])
async def serve(request: pytest.FixtureRequest) -> AsyncIterator[Start]:
    """Agents whose questions live in this process (`QuestionRegistry`) or in PostgreSQL
    (`PostgresQuestionBoard`, a database of the test's own): the same windows and statuses."""
    started: list[Agent] = []
    shared: list[tuple[PostgresQuestionBoard, PostgresRunHistory]] = []
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
        dsn = request.getfixturevalue("postgres_dsn")
        request.getfixturevalue("monkeypatch").setenv("QUARRY_TEST_AGENT_QUESTIONS_DSN", dsn)

    async def start(
        model: ScriptedModel,
        search: FakeSearch,
        *,
        questions: QuestionSettings | None = None,
        api_key: str = "",
    ) -> Agent:
        auth = AuthSettings(enabled=bool(api_key), keys=KEYS)
        settings = AgentSettings(
            server=ServerSettings(port=0, grace_s=0, auth=auth),
            questions=questions or QuestionSettings(),
        )
        board: PostgresQuestionBoard | None = None
        store: PostgresRunHistory | None = None
        if request.param == "postgres":
            store = PostgresRunHistory(
                HistorySettings(
                    kind="postgres",
                    postgres=PostgresSettings(dsn_env="QUARRY_TEST_AGENT_QUESTIONS_DSN"),
                )
            )
            store.open()
            assert await store.wait_ready(30)
            board = PostgresQuestionBoard(store, settings.questions)
            board.start()
            async with asyncio.timeout(30):
                await board.listening.wait()
            shared.append((board, store))
        servicer = AgentServicer(AgentLoop(model, search), settings, store, board)

        def register(server: grpc.aio.Server) -> None:
            agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

        registration = ServiceRegistration(SERVICE_NAME, register, access_rules(settings))
        server = build_server([registration], settings.server)
        await server.start()
        agent = Agent(AgentClient(server.address, api_key=api_key), servicer, server)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        await agent.client.close()
        await agent.server.stop(0)
    for board, store in shared:
        await board.close()
        await store.close()


def _asking_model(*after: ModelResponse) -> ScriptedModel:
    """Asks which version is meant, then follows `after` (default: search, then answer)."""
    rest = after or (
        turn("", search_call("temporary directory")),
        turn("", answer_call("TemporaryDirectory [1]", ["tempfile__chunk_0"])),
    )
    return ScriptedModel([turn("Ambiguous.", ask_call("Which Python version?")), *rest])


def _tool_results(model: ScriptedModel, call: int) -> list[str]:
    return [m.text for m in model.requests[call].messages if m.role is Role.TOOL]


async def _collect(
    stream: AsyncIterator[agent_pb2.StreamRunResponse], into: list[agent_pb2.StreamRunResponse]
) -> None:
    async for event in stream:
        into.append(event)


def _kinds(events: list[agent_pb2.StreamRunResponse]) -> list[str]:
    return [str(e.WhichOneof("event")) for e in events]


async def _until_no_live_runs(servicer: AgentServicer) -> None:
    async with asyncio.timeout(30):
        await servicer.questions.until_idle()


async def test_an_answered_question_reaches_the_model_and_the_stream_shows_both_ends(
    serve: Start, search: FakeSearch
) -> None:
    model = _asking_model()
    agent = await serve(model, search)
    events = []
    async for event in agent.client.stream_run("temporary directory", ASKING):
        events.append(event)
        if event.WhichOneof("event") == "question":
            q = event.question
            await agent.client.answer_question(q.run_id, q.question_id, "Python 3.12")

    assert _kinds(events) == [
        "started",
        "thinking",
        "question",
        "question_closed",
        "searching",
        "done",
    ]
    question, closed = events[2].question, events[3].question_closed
    assert (question.text, question.run_id) == ("Which Python version?", events[0].started.run_id)
    assert (question.step, closed.step, events[4].searching.step) == (1, 1, 2)
    assert question.acknowledge_within_ms == 10_000
    # 300 s configured; the run's deadline (60 s) caps it. gRPC sends a 10-100 s timeout in
    # 100 ms units, rounded up, so the server's deadline can be up to 0.1 s past the caller's.
    assert 0 < question.answer_within_ms <= 60_100
    assert (closed.question_id, closed.outcome, closed.answer) == (
        question.question_id,
        agent_pb2.QUESTION_OUTCOME_ANSWERED,
        "Python 3.12",
    )
    assert _tool_results(model, 1) == ["The caller answered: Python 3.12"]
    offered = [t.name for t in model.requests[0].callable_tools]
    assert offered == [*TOOL_NAMES[:-1], ASK_USER, "submit_answer"]
    assert events[-1].done.response.answer.text == "TemporaryDirectory [1]"


async def test_an_unacknowledged_question_expires_and_the_run_goes_on_without_an_answer(
    serve: Start, search: FakeSearch
) -> None:
    search.gate = asyncio.Event()
    model = _asking_model()
    agent = await serve(model, search)
    options = RunOptions(**{**ASKING.__dict__, "question_acknowledge_s": 0.05})
    events = []
    async for event in agent.client.stream_run("temporary directory", options):
        events.append(event)
        if event.WhichOneof("event") == "question_closed":
            await search.called.wait()  # the run went on: it searches, held at the gate
            question = events[-2].question
            with pytest.raises(QuarryError) as late:
                await agent.client.answer_question(question.run_id, question.question_id, "3.12")
            search.gate.set()

    closed = next(e.question_closed for e in events if e.WhichOneof("event") == "question_closed")
    assert closed.outcome == agent_pb2.QUESTION_OUTCOME_NOT_ACKNOWLEDGED
    assert closed.answer == ""
    assert (late.value.code, "not acknowledged in time" in late.value.message) == (
        "FAILED_PRECONDITION",
        True,
    )
    [tool_result] = _tool_results(model, 1)
    assert tool_result.startswith("No answer: the caller did not respond")
    assert events[-1].WhichOneof("event") == "done"


async def test_an_acknowledged_question_outlives_the_acknowledge_window(
    serve: Start, search: FakeSearch
) -> None:
    model = _asking_model()
    questions = QuestionSettings(acknowledge_timeout_s=1.0, answer_timeout_s=60)
    agent = await serve(model, search, questions=questions)
    events = []
    answer_window = None
    async for event in agent.client.stream_run("temporary directory", ASKING):
        events.append(event)
        if event.WhichOneof("event") == "question":
            q = event.question
            answer_window = await agent.client.acknowledge_question(q.run_id, q.question_id)
            await asyncio.sleep(1.5)  # past the acknowledge window: the run must still wait
            await agent.client.answer_question(q.run_id, q.question_id, "3.12")

    assert answer_window is not None
    assert 0 < answer_window <= 60
    closed = next(e.question_closed for e in events if e.WhichOneof("event") == "question_closed")
    assert (closed.outcome, closed.answer) == (agent_pb2.QUESTION_OUTCOME_ANSWERED, "3.12")
    assert _tool_results(model, 1) == ["The caller answered: 3.12"]


async def test_an_acknowledged_but_unanswered_question_expires_after_the_answer_window(
    serve: Start, search: FakeSearch
) -> None:
    model = _asking_model()
    agent = await serve(model, search)
    options = RunOptions(**{**ASKING.__dict__, "question_answer_s": 0.05})
    events = []
    async for event in agent.client.stream_run("temporary directory", options):
        events.append(event)
        if event.WhichOneof("event") == "question":
            await agent.client.acknowledge_question(
                event.question.run_id, event.question.question_id
            )

    closed = next(e.question_closed for e in events if e.WhichOneof("event") == "question_closed")
    assert closed.outcome == agent_pb2.QUESTION_OUTCOME_NOT_ANSWERED
    [tool_result] = _tool_results(model, 1)
    assert tool_result.startswith("No answer: the caller did not respond (the question was seen")
    assert events[-1].WhichOneof("event") == "done"


async def test_a_cancelled_stream_stops_waiting_and_forgets_the_run(
    serve: Start, search: FakeSearch
) -> None:
    model = _asking_model()
    agent = await serve(model, search)
    stub = agent_pb2_grpc.AgentServiceStub(agent.client._channel)
    request = agent_pb2.StreamRunRequest(collection="python-docs", query="q", tools=[ASK_USER])
    call = stub.StreamRun(request)
    async for event in call:
        if event.WhichOneof("event") == "question":
            question = event.question
            break
    call.cancel()
    await _until_no_live_runs(agent.servicer)

    with pytest.raises(QuarryError) as late:
        await agent.client.answer_question(question.run_id, question.question_id, "3.12")
    assert late.value.code == "NOT_FOUND"
    assert len(model.requests) == 1  # no model call after the cancel
    assert search.requests == []


async def test_answers_the_run_cannot_take_are_refused_with_a_clear_status(
    serve: Start, search: FakeSearch
) -> None:
    search.gate = asyncio.Event()  # keeps the run live after the answer
    model = _asking_model()
    agent = await serve(model, search, questions=QuestionSettings(max_answer_chars=20))
    client = agent.client
    refusals: dict[str, QuarryError] = {}

    async def refused(name: str, attempt: Awaitable[object]) -> None:
        with pytest.raises(QuarryError) as caught:
            await attempt
        refusals[name] = caught.value

    async for event in client.stream_run("temporary directory", ASKING):
        if event.WhichOneof("event") != "question":
            continue
        run_id, qid = event.question.run_id, event.question.question_id
        await refused("unknown run", client.answer_question("nope", qid, "3.12"))
        await refused("unknown question", client.answer_question(run_id, "nope", "3.12"))
        await refused("unknown run ack", client.acknowledge_question("nope", qid))
        await refused("too long", client.answer_question(run_id, qid, "x" * 21))
        await refused("empty", client.answer_question(run_id, qid, "  "))
        await refused("no ids", client.answer_question("", "", "3.12"))
        for _ in range(2):  # acknowledging an open question is idempotent
            assert await client.acknowledge_question(run_id, qid) is not None
        await client.answer_question(run_id, qid, "3.12")
        await refused("again", client.answer_question(run_id, qid, "3.13"))
        await refused("ack after answer", client.acknowledge_question(run_id, qid))
        search.gate.set()

    codes = {name: error.code for name, error in refusals.items()}
    assert codes == {
        "unknown run": "NOT_FOUND",
        "unknown question": "NOT_FOUND",
        "unknown run ack": "NOT_FOUND",
        "too long": "INVALID_ARGUMENT",
        "empty": "INVALID_ARGUMENT",
        "no ids": "INVALID_ARGUMENT",
        "again": "FAILED_PRECONDITION",
        "ack after answer": "FAILED_PRECONDITION",
    }
    too_long, no_ids = refusals["too long"], refusals["no ids"]
    assert isinstance(too_long, InvalidArgument)
    assert isinstance(no_ids, InvalidArgument)
    assert [(v.field, v.description) for v in too_long.violations] == [
        ("text", "is 21 characters; max_answer_chars is 20")
    ]
    assert [v.field for v in no_ids.violations] == ["run_id", "question_id"]
    assert "already answered" in refusals["again"].message
    assert "replica" in refusals["unknown run"].message  # another one, or one that stopped
    assert _tool_results(model, 1) == ["The caller answered: 3.12"]


async def test_with_auth_only_the_runs_own_key_may_answer(serve: Start, search: FakeSearch) -> None:
    model = _asking_model()
    agent = await serve(model, search, api_key=OWNER_KEY)
    other, anonymous = agent.other(OTHER_KEY), agent.other("")
    refusals: list[QuarryError] = []
    try:
        async for event in agent.client.stream_run("temporary directory", ASKING):
            if event.WhichOneof("event") != "question":
                continue
            run_id, qid = event.question.run_id, event.question.question_id
            for attempt in (
                other.answer_question(run_id, qid, "hijacked"),
                other.acknowledge_question(run_id, qid),
                anonymous.answer_question(run_id, qid, "anonymous"),
            ):
                with pytest.raises(QuarryError) as caught:
                    await attempt
                refusals.append(caught.value)
            await agent.client.answer_question(run_id, qid, "3.12")
    finally:
        await other.close()
        await anonymous.close()

    assert [e.code for e in refusals] == [
        "PERMISSION_DENIED",
        "PERMISSION_DENIED",
        "UNAUTHENTICATED",
    ]
    assert "another API key" in refusals[0].message
    assert _tool_results(model, 1) == ["The caller answered: 3.12"]


async def test_the_run_deadline_bounds_the_wait_for_an_answer(
    serve: Start, search: FakeSearch
) -> None:
    model = _asking_model()
    agent = await serve(model, search, questions=QuestionSettings(acknowledge_timeout_s=600))
    # a run deadline short enough to end the wait, long enough for a loaded machine to reach it
    options = RunOptions(**{**ASKING.__dict__, "timeout_s": 3.0})
    events: list[agent_pb2.StreamRunResponse] = []
    with pytest.raises(QuarryError) as ended:
        await _collect(agent.client.stream_run("temporary directory", options), events)

    assert ended.value.code == "DEADLINE_EXCEEDED"
    question = next(e.question for e in events if e.WhichOneof("event") == "question")
    assert 0 < question.acknowledge_within_ms <= 3_050  # the run's deadline, not the 600 s
    assert 0 < question.answer_within_ms <= 3_050
    assert len(model.requests) == 1  # the deadline ended the run, not another model call
    await _until_no_live_runs(agent.servicer)


async def test_ask_user_is_never_offered_unless_named_and_refused_when_not(
    serve: Start, search: FakeSearch
) -> None:
    model = _asking_model()
    agent = await serve(model, search)
    events = [
        e
        async for e in agent.client.stream_run(
            "temporary directory", RunOptions(collection="python-docs", mode="thinking")
        )
    ]

    assert [t.name for t in model.requests[0].callable_tools] == list(TOOL_NAMES)
    assert "question" not in _kinds(events)
    [refusal] = _tool_results(model, 1)
    assert refusal.startswith("The tool 'ask_user' is not available in this run.")
    assert agent.servicer.questions.live_runs == 0


async def test_a_unary_run_refuses_ask_user_naming_the_tool(
    serve: Start, search: FakeSearch
) -> None:
    agent = await serve(ScriptedModel(), search)
    stub = agent_pb2_grpc.AgentServiceStub(agent.client._channel)
    request = agent_pb2.RunRequest(collection="python-docs", query="q", tools=["search", ASK_USER])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Run(request)

    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    [violation] = details_of_rpc_error(caught.value).violations
    assert violation.field == "tools[1]"
    assert "StreamRun" in violation.description


async def test_question_windows_longer_than_the_agents_are_invalid_argument(
    serve: Start, search: FakeSearch
) -> None:
    agent = await serve(ScriptedModel(), search)
    options = RunOptions(**{**ASKING.__dict__, "question_acknowledge_s": 11.0})
    with pytest.raises(InvalidArgument) as caught:
        [e async for e in agent.client.stream_run("q", options)]

    assert caught.value.code == "INVALID_ARGUMENT"
    assert [(v.field, v.description) for v in caught.value.violations] == [
        ("question_windows.acknowledge_timeout_s", "is 11 s; the agent allows at most 10 s")
    ]


async def test_questions_beyond_the_per_run_limit_are_refused_back_to_the_model(
    serve: Start, search: FakeSearch
) -> None:
    model = ScriptedModel(
        [
            turn("", ask_call("First?")),
            turn("", ask_call("Second?")),
            turn("", answer_call("Done.")),
        ]
    )
    agent = await serve(model, search, questions=QuestionSettings(max_per_run=1))
    questions = 0
    async for event in agent.client.stream_run("q", ASKING):
        if event.WhichOneof("event") == "question":
            questions += 1
            await agent.client.answer_question(
                event.question.run_id, event.question.question_id, "yes"
            )

    assert questions == 1
    assert _tool_results(model, 2)[-1].startswith("You have asked 1 questions, the most")


async def test_a_run_without_a_question_channel_tells_the_model_it_cannot_ask(
    search: FakeSearch,
) -> None:
    model = ScriptedModel([turn("", ask_call("Which version?")), turn("", answer_call("Any."))])
    request = RunRequest(collection="python-docs", query="q", allowed_tools=frozenset({ASK_USER}))
    result = await AgentLoop(model, search).run(request)

    assert result.answer.text == "Any."
    assert _tool_results(model, 1) == ["The caller cannot be asked in this run: go on without it."]


class _ExpiringChannel:
    """A channel whose wait ends unanswered, as the run's deadline-capped window does."""

    async def wait(self, question_id: str) -> ClosedQuestion:
        return ClosedQuestion(question_id, QuestionOutcome.NOT_ACKNOWLEDGED, waited_ms=3000)


@pytest.mark.parametrize(("left_s", "ends_run"), [(0.01, True), (5.0, False)])
async def test_a_wait_that_ran_out_with_the_deadline_ends_the_run_instead_of_another_turn(
    left_s: float, ends_run: bool
) -> None:
    """The window's timer may wake a moment before the deadline itself: with next to no time
    left the run ends DEADLINE_EXCEEDED (a fast model had answered after the caller stopped
    waiting, under load); with time left the model hears the question went unanswered."""
    now = [0.0]
    context = cast(Any, SimpleNamespace(deadline=Deadline(left_s, clock=lambda: now[0])))
    context.log_fields, context.step = {}, 1
    call = ToolCall("c1", "ask_user", '{"question": "Which version?"}')
    channel = cast(Any, _ExpiringChannel())
    if ends_run:
        with pytest.raises(DeadlineExceeded):
            await _answer_of(call, channel, "q1", context)
    else:
        outcome = await _answer_of(call, channel, "q1", context)
        assert outcome.ran
        assert outcome.text
        assert not outcome.text.startswith("The caller answered")
