"""Run history through gRPC (port 0): every run recorded, GetRun / ListRuns, auth, retention,
and runs left `running` by a dead process marked `interrupted`."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import timestamp_pb2
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent.client import AgentClient, RunOptions
from services.agent.config import AgentSettings, HistorySettings
from services.agent.history import RunQuery, RunStore
from services.agent.history_postgres import PostgresRunHistory
from services.agent.loop import AgentLoop
from services.agent.ports import ModelClient
from services.agent.run_history import RunHistory
from services.agent.server import SERVICE_NAME, access_rules, open_history
from services.agent.servicer import AgentServicer
from services.agent.testing import (
    FunctionModel,
    ScriptedModel,
    search_call,
    search_then_answer,
    turn,
)
from services.common.auth import ApiKey, AuthSettings, key_digest
from services.common.errors import InvalidArgument, QuarryError, Unavailable
from services.common.postgres import PostgresSettings
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from tests.agent.fake_search import FakeSearch

TEMP = "tempfile__chunk_0"
DOCS_READER = "docs-reader-key-0123456789"
ADMIN = "admin-key-0123456789abcdef"
KEYS = [
    ApiKey(name="docs-reader", sha256=key_digest(DOCS_READER), read=["python-docs"]),
    ApiKey(name="admin", sha256=key_digest(ADMIN), read=["*"]),
]


class Agent:
    """One in-process agent with a run store; `client(key)` opens a client."""

    def __init__(self, server: QuarryServer, store: RunHistory | None) -> None:
        self.server = server
        self.store = store
        self.clients: list[AgentClient] = []

    def client(self, key: str = "") -> AgentClient:
        client = AgentClient(self.server.address, api_key=key)
        self.clients.append(client)
        return client


Start = Callable[..., Awaitable[Agent]]


@pytest.fixture(params=["sqlite", "postgres"])
async def serve(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Start]:
    """Agents over either history: the embedded SQLite file, or PostgreSQL (a database of the
    test's own, `tests/postgres_server.py`): the same RPCs must answer the same."""
    agents: list[Agent] = []
    default_history = HistorySettings(path=tmp_path / "runs.sqlite3")
    if request.param == "postgres":
        request.applymarker(pytest.mark.postgres)
        dsn = request.getfixturevalue("postgres_dsn")
        request.getfixturevalue("monkeypatch").setenv("QUARRY_TEST_AGENT_HISTORY_DSN", dsn)
        default_history = HistorySettings(
            kind="postgres",
            postgres=PostgresSettings(dsn_env="QUARRY_TEST_AGENT_HISTORY_DSN"),
        )

    async def start(
        model: ModelClient,
        search: FakeSearch,
        *,
        auth: bool = False,
        history: HistorySettings | None = None,
    ) -> Agent:
        server_settings = ServerSettings(
            port=0, grace_s=0, auth=AuthSettings(enabled=auth, keys=KEYS if auth else [])
        )
        settings = AgentSettings(
            server=server_settings,
            history=history or default_history,
        )
        store = open_history(settings.history)
        if isinstance(store, PostgresRunHistory):
            assert await store.wait_ready(30), "the run history database never became ready"
        servicer = AgentServicer(AgentLoop(model, search), settings, store)

        def register(server: grpc.aio.Server) -> None:
            agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)

        registration = ServiceRegistration(SERVICE_NAME, register, access_rules(settings))
        server = build_server([registration], settings.server)
        await server.start()
        agent = Agent(server, store)
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        for client in agent.clients:
            await client.close()
        await agent.server.stop(0)
        if agent.store is not None:
            await agent.store.close()


def _model() -> FunctionModel:
    return FunctionModel(search_then_answer(1))


async def _stream(
    client: AgentClient, query: str = "temporary directory", **options: Any
) -> list[agent_pb2.StreamRunResponse]:
    options.setdefault("collection", "python-docs")
    return [e async for e in client.stream_run(query, RunOptions(**options))]


async def test_a_streamed_run_is_recorded_with_request_steps_events_and_response(
    serve: Start, search: FakeSearch
) -> None:
    agent = await serve(_model(), search)
    client = agent.client()
    events = await _stream(client, mode="thinking", limit=5, temperature=0.3, seed=11)
    run_id = events[0].started.run_id

    run = await client.get_run(run_id)

    assert run.status == agent_pb2.RUN_STATUS_COMPLETED
    assert (run.run_id, run.collection, run.route) == (run_id, "python-docs", "agent")
    assert run.request.query == "temporary directory"
    assert (run.request.limit, run.request.temperature, run.request.seed) == (5, 0.3, 11)
    assert list(run.events) == events
    assert [s.index for s in run.steps] == [1, 2]
    search_call_record = run.steps[0].tool_calls[0]
    assert search_call_record.name == "search"
    assert search_call_record.output.startswith("")
    assert "### [" in search_call_record.output
    assert search_call_record.results[0].chunk.id == search_call_record.result_ids[0]
    assert run.response.answer.text == events[-1].done.response.answer.text
    assert [s.index for s in run.response.steps] == [1, 2]
    assert run.response.steps[0].tool_calls[0].output == search_call_record.output
    assert run.ended_at.ToNanoseconds() >= run.started_at.ToNanoseconds() > 0
    assert '"thinking_max_iterations":20' in run.loop_settings_json
    assert run.context_window_tokens == 32_000


async def test_the_unary_run_is_recorded_and_its_response_names_the_run(
    serve: Start, search: FakeSearch
) -> None:
    agent = await serve(_model(), search)
    client = agent.client()
    response = await client.run("temporary directory", RunOptions(collection="python-docs"))

    run = await client.get_run(response.run_id)
    assert run.status == agent_pb2.RUN_STATUS_COMPLETED
    assert run.response.answer.text == response.answer.text
    assert [s.index for s in response.steps] == [1, 2]
    assert response.steps[0].tool_calls[0].result_ids
    assert not response.steps[0].tool_calls[0].output  # full records only through GetRun
    assert [e.WhichOneof("event") for e in run.events] == [
        "started",
        "thinking",
        "searching",
        "thinking",
        "done",
    ]


async def test_get_run_of_an_unknown_id_is_not_found_and_an_empty_id_invalid(
    serve: Start, search: FakeSearch
) -> None:
    client = (await serve(_model(), search)).client()
    with pytest.raises(QuarryError) as missing:
        await client.get_run("0123456789abcdef")
    assert missing.value.code == "NOT_FOUND"
    assert "0123456789abcdef" in missing.value.message
    with pytest.raises(InvalidArgument) as empty:
        await client.get_run("")
    assert empty.value.code == "INVALID_ARGUMENT"
    assert [v.field for v in empty.value.violations] == ["run_id"]


async def test_a_run_that_fails_is_recorded_failed_with_its_error_and_steps_so_far(
    serve: Start, search: FakeSearch
) -> None:
    search.errors.append(Unavailable("search tool down"))
    model = ScriptedModel([turn("Searching.", search_call("tempfile"))])
    client = (await serve(model, search)).client()
    events = await _stream(client)
    assert events[-1].WhichOneof("event") == "error"

    run = await client.get_run(events[0].started.run_id)
    assert run.status == agent_pb2.RUN_STATUS_FAILED
    assert run.error_code == "UNAVAILABLE"
    assert "search tool down" in run.error_message
    assert [s.index for s in run.steps] == [1]
    assert run.steps[0].text == "Searching."
    assert run.events[-1].error.code == "UNAVAILABLE"
    assert not run.HasField("response")


async def test_a_cancelled_stream_is_recorded_cancelled(serve: Start, search: FakeSearch) -> None:
    gate = asyncio.Event()
    model = ScriptedModel([turn("", search_call("tempfile"))], gate=gate)
    agent = await serve(model, search)
    client = agent.client()
    channel = grpc.aio.insecure_channel(agent.server.address)
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    call = stub.StreamRun(agent_pb2.StreamRunRequest(query="q", collection="python-docs"))
    started = await call.read()
    await model.called.wait()
    call.cancel()
    await model.cancelled.wait()

    run_id = started.started.run_id
    run = await _when(client, run_id, lambda r: r.status != agent_pb2.RUN_STATUS_RUNNING)
    assert run.status == agent_pb2.RUN_STATUS_CANCELLED
    assert run.error_code == "CANCELLED"
    await channel.close(None)


async def _when(
    client: AgentClient, run_id: str, done: Callable[[agent_pb2.RunRecord], bool]
) -> agent_pb2.RunRecord:
    """The record once `done` holds (the server notices a cancellation on its own time)."""
    for _ in range(400):
        run = await client.get_run(run_id)
        if done(run):
            return run
        await asyncio.sleep(0.025)
    raise AssertionError(f"run {run_id} never reached the expected state: {run}")


async def test_list_runs_filters_by_collection_status_and_time_newest_first(
    serve: Start, search: FakeSearch
) -> None:
    agent = await serve(_model(), search)
    client = agent.client()
    first = (await _stream(client, "first question"))[0].started.run_id
    search.collection = "other"
    second = (await _stream(client, "second question", collection="other"))[0].started.run_id
    failed = (await _stream(client, "third question", collection="missing"))[0].started.run_id

    every = await client.list_runs()
    assert [r.run_id for r in every.runs] == [failed, second, first]
    assert every.next_page_token == ""
    assert every.runs[1].query == "second question"
    assert every.runs[1].steps == 2
    assert every.runs[1].stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert every.runs[0].error_code == "NOT_FOUND"

    other = await client.list_runs(agent_pb2.ListRunsRequest(collection="other"))
    assert [r.run_id for r in other.runs] == [second]
    failures = await client.list_runs(agent_pb2.ListRunsRequest(status=agent_pb2.RUN_STATUS_FAILED))
    assert [r.run_id for r in failures.runs] == [failed]
    second_started = other.runs[0].started_at
    since = await client.list_runs(agent_pb2.ListRunsRequest(started_after=second_started))
    assert [r.run_id for r in since.runs] == [failed, second]
    before = await client.list_runs(agent_pb2.ListRunsRequest(started_before=second_started))
    assert [r.run_id for r in before.runs] == [first]


async def test_list_runs_pages_through_every_run_once(serve: Start, search: FakeSearch) -> None:
    client = (await serve(_model(), search)).client()
    ids = [(await _stream(client, f"question {n}"))[0].started.run_id for n in range(5)]

    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await client.list_runs(agent_pb2.ListRunsRequest(page_size=2, page_token=token))
        seen += [r.run_id for r in page.runs]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == list(reversed(ids))
    assert pages == 3


async def test_list_runs_rejects_bad_tokens_sizes_and_ranges_naming_the_field(
    serve: Start, search: FakeSearch
) -> None:
    client = (await serve(_model(), search)).client()
    later, earlier = timestamp_pb2.Timestamp(seconds=2_000), timestamp_pb2.Timestamp(seconds=1_000)
    cases = {
        "page_token": agent_pb2.ListRunsRequest(page_token="not-a-token"),
        "page_size": agent_pb2.ListRunsRequest(page_size=501),
        "started_before": agent_pb2.ListRunsRequest(started_after=later, started_before=earlier),
        "status": agent_pb2.ListRunsRequest(status=99),  # type: ignore[arg-type]
        "started_after": agent_pb2.ListRunsRequest(
            started_after=timestamp_pb2.Timestamp(seconds=-62_135_596_801)  # before year 1
        ),
    }
    for field, request in cases.items():
        with pytest.raises(InvalidArgument) as refused:
            await client.list_runs(request)
        assert refused.value.code == "INVALID_ARGUMENT", field
        assert [v.field for v in refused.value.violations] == [field]


async def test_with_auth_a_caller_sees_only_runs_on_collections_its_key_may_read(
    serve: Start, search: FakeSearch
) -> None:
    agent = await serve(_model(), search, auth=True)
    admin, reader = agent.client(ADMIN), agent.client(DOCS_READER)
    mine = (await _stream(reader))[0].started.run_id
    search.collection = "secret"
    secret = (await _stream(admin, collection="secret"))[0].started.run_id

    assert [r.run_id for r in (await reader.list_runs()).runs] == [mine]
    assert [r.run_id for r in (await admin.list_runs()).runs] == [secret, mine]
    assert (await reader.get_run(mine)).caller == "docs-reader"
    with pytest.raises(QuarryError) as denied:
        await reader.get_run(secret)
    assert denied.value.code == "PERMISSION_DENIED"
    assert "secret" in denied.value.message
    with pytest.raises(QuarryError) as listing:
        await reader.list_runs(agent_pb2.ListRunsRequest(collection="secret"))
    assert listing.value.code == "PERMISSION_DENIED"
    with pytest.raises(QuarryError) as anonymous:
        await agent.client().list_runs()
    assert anonymous.value.code == "UNAUTHENTICATED"


async def test_with_history_off_runs_work_and_the_history_rpcs_say_it_is_off(
    serve: Start, search: FakeSearch, tmp_path: Path
) -> None:
    agent = await serve(_model(), search, history=HistorySettings(enabled=False))
    client = agent.client()
    events = await _stream(client)
    assert events[-1].WhichOneof("event") == "done"
    with pytest.raises(QuarryError) as off:
        await client.get_run(events[0].started.run_id)
    assert off.value.code == "FAILED_PRECONDITION"
    assert "history" in off.value.message
    assert not (tmp_path / "runs.sqlite3").exists()


# --- the store itself ------------------------------------------------------------------------


def _record(run_id: str, started_at: float, collection: str = "docs") -> agent_pb2.RunRecord:
    record = agent_pb2.RunRecord(
        run_id=run_id,
        collection=collection,
        status=agent_pb2.RUN_STATUS_RUNNING,
        request=agent_pb2.RunRequest(query=f"q {run_id}", collection=collection),
    )
    record.started_at.FromNanoseconds(int(started_at * 1e9))
    return record


async def _finish(store: RunStore, record: agent_pb2.RunRecord, ended_at: float) -> None:
    record.status = agent_pb2.RUN_STATUS_COMPLETED
    record.ended_at.FromNanoseconds(int(ended_at * 1e9))
    await store.finish(record, 0, [], [])


async def test_runs_left_running_by_a_dead_process_are_interrupted_when_the_store_opens(
    tmp_path: Path,
) -> None:
    settings = HistorySettings(path=tmp_path / "runs.sqlite3")
    crashed = RunStore(settings)
    crashed.open()
    now = time.time()
    crashed.begin(_record("alive-when-killed", now))
    done = _record("finished", now + 1)
    crashed.begin(done)
    step = agent_pb2.StepRecord(index=1, text="searching")
    crashed.append("alive-when-killed", 0, [agent_pb2.StreamRunResponse()], [step])
    await _finish(crashed, done, now + 2)
    await crashed.close()

    restarted = RunStore(settings)
    assert restarted.open() == 1
    interrupted = await restarted.get("alive-when-killed")
    assert interrupted is not None
    assert interrupted.status == agent_pb2.RUN_STATUS_INTERRUPTED
    assert "stopped" in interrupted.error_message
    assert [s.text for s in interrupted.steps] == ["searching"]
    finished = await restarted.get("finished")
    assert finished is not None
    assert finished.status == agent_pb2.RUN_STATUS_COMPLETED
    await restarted.close()


async def test_retention_deletes_runs_past_the_age_and_the_oldest_past_the_count(
    tmp_path: Path,
) -> None:
    now = [100_000.0]
    settings = HistorySettings(
        path=tmp_path / "runs.sqlite3", max_age_days=1, max_runs=2, sweep_interval_s=10_000
    )
    store = RunStore(settings, clock=lambda: now[0])
    store.open()
    ages_in_days = {"ancient": 3, "old": 0.5, "newer": 0.2, "newest": 0.1}
    for run_id, days in ages_in_days.items():
        record = _record(run_id, now[0] - days * 86_400)
        store.begin(record)
        await _finish(store, record, now[0])

    assert await store.sweep() == 2
    runs, _ = await store.list_runs(RunQuery())
    assert [r.run_id for r in runs] == ["newest", "newer"]
    assert await store.get("ancient") is None
    await store.close()


async def test_retention_runs_after_a_run_ends_once_the_sweep_interval_passed(
    tmp_path: Path,
) -> None:
    now = [100_000.0]
    settings = HistorySettings(path=tmp_path / "runs.sqlite3", max_runs=1, sweep_interval_s=60)
    store = RunStore(settings, clock=lambda: now[0])
    store.open()
    for n in range(3):
        record = _record(f"run-{n}", now[0] + n)
        store.begin(record)
        await _finish(store, record, now[0] + n)
    assert len((await store.list_runs(RunQuery()))[0]) == 3  # within the interval: kept
    now[0] += 61
    record = _record("run-3", now[0])
    store.begin(record)
    await _finish(store, record, now[0])
    assert [r.run_id for r in (await store.list_runs(RunQuery()))[0]] == ["run-3"]
    await store.close()


def test_an_agent_whose_history_cannot_be_opened_refuses_to_start_naming_the_path(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env = {**os.environ, "QUARRY_AGENT_HISTORY__PATH": str(blocker / "runs.sqlite3")}
    done = subprocess.run(
        [sys.executable, "-m", "services.agent", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert f"run history at {blocker / 'runs.sqlite3'}" in done.stderr
