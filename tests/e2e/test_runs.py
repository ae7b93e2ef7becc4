"""Run history and replay through the real services as processes: `quarry runs list | show |
replay`, temperature and seed reaching the vendor, and a run killed with its agent (SIGKILL)
found `interrupted` by the restarted agent."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from quarry.agent.v1 import agent_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from bench.ports import free_port
from quarry_cli.cli import main
from services.agent.client import AgentClient, RunOptions
from services.common.errors import Unavailable
from services.llm_gateway.testing import Reply, ScriptedToolCall
from tests.e2e.conftest import DOCUMENTS, Stack, _wait_serving, upsert

pytestmark = pytest.mark.slow
REPLAY_COLLECTION = "e2e-replay"
QUESTION = "How do I create a temporary directory that is removed automatically?"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    return int(exit_.value.code or 0), capsys.readouterr().out


def _ask(address: str, options: RunOptions) -> list[agent_pb2.StreamRunResponse]:
    async def stream() -> list[agent_pb2.StreamRunResponse]:
        async with AgentClient(address) as agent:
            return [e async for e in agent.stream_run(QUESTION, options)]

    return asyncio.run(stream())


def _upsert(stack: Stack, documents: list[tuple[str, str, str]]) -> None:
    upsert(stack.search_tool, REPLAY_COLLECTION, documents, "python-docs")


def _delete(stack: Stack, document_id: str) -> None:
    with grpc.insecure_channel(stack.search_tool) as channel:
        search_tool_pb2_grpc.SearchToolServiceStub(channel).DeleteDocuments(
            search_tool_pb2.DeleteDocumentsRequest(
                collection=REPLAY_COLLECTION, document_ids=[document_id]
            ),
            timeout=60,
        )


def test_runs_list_and_show_print_the_recorded_run_in_protobuf_json(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    events = _ask(stack.agent, RunOptions(collection="e2e-docs", timeout_s=60))
    run_id = events[0].started.run_id

    code, out = _cli(capsys, "runs", "list", "--address", stack.agent, "--json")
    assert code == 0
    listed = json.loads(out)
    assert run_id in [r["run_id"] for r in listed["runs"]]
    mine = next(r for r in listed["runs"] if r["run_id"] == run_id)
    assert mine["status"] == "RUN_STATUS_COMPLETED"
    assert mine["query"] == QUESTION

    code, out = _cli(capsys, "runs", "show", run_id, "--address", stack.agent, "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["steps"][0]["tool_calls"][0]["name"] == "search"
    assert shown["steps"][0]["answered_by"]["provider"] == "extractive"
    assert shown["response"]["answer"]["text"] == events[-1].done.response.answer.text

    code, out = _cli(capsys, "runs", "show", run_id, "--address", stack.agent)
    assert code == 0
    assert f"run {run_id} · completed" in out
    assert "step 1 · extractive" in out

    code, out = _cli(capsys, "runs", "show", "no-such-run", "--address", stack.agent, "--json")
    assert code == 1
    assert json.loads(out)["error"]["code"] == "NOT_FOUND"


def test_replay_matches_the_record_and_names_the_step_where_the_collection_changed(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    _upsert(stack, DOCUMENTS)
    events = _ask(stack.agent, RunOptions(collection=REPLAY_COLLECTION, timeout_s=60))
    assert events[-1].WhichOneof("event") == "done"
    run_id = events[0].started.run_id
    live = ("--address", stack.agent, "--search-tool", stack.search_tool, "--json")

    code, out = _cli(capsys, "runs", "replay", run_id, *live)
    report = json.loads(out)
    assert (code, report["diverged"], report["error"]) == (0, False, ""), report
    assert report["replayed_steps"] == report["recorded_steps"] == 2

    cited = events[-1].done.response.answer.citations[0].result_id
    _delete(stack, cited.split("__chunk_")[0])

    code, out = _cli(capsys, "runs", "replay", run_id, *live)
    report = json.loads(out)
    assert code == 1
    first = report["first_divergence"]
    assert (first["step"], first["what"]) == (1, "tool_calls[0] (search).result_ids")
    assert cited in first["recorded"]
    assert cited not in first["replayed"]

    code, out = _cli(capsys, "runs", "replay", run_id, "--frozen", "--address", stack.agent)
    assert code == 0, out
    assert "identical to the record" in out


def test_temperature_and_seed_reach_the_vendor_and_the_record(stack: Stack) -> None:
    stack.openai.reset(
        [
            Reply(
                tool_calls=[
                    ScriptedToolCall(
                        "c1", "search", json.dumps({"query": {"primary": "temporary directory"}})
                    )
                ]
            ),
            Reply(
                tool_calls=[
                    ScriptedToolCall(
                        "c2",
                        "submit_answer",
                        json.dumps(
                            {
                                "text": "Use TemporaryDirectory [1].",
                                "citations": [{"result_id": "tempfile-tempdir__chunk_0"}],
                            }
                        ),
                    )
                ]
            ),
        ]
    )
    options = RunOptions(
        collection="e2e-docs", route="openai", temperature=0.25, seed=42, timeout_s=60
    )
    events = _ask(stack.agent, options)
    assert events[-1].WhichOneof("event") == "done", events[-1]
    bodies = [r.body for r in stack.openai.requests]
    assert [(b.get("temperature"), b.get("seed")) for b in bodies] == [(0.25, 42), (0.25, 42)]

    async def record() -> agent_pb2.RunRecord:
        async with AgentClient(stack.agent) as agent:
            return await agent.get_run(events[0].started.run_id)

    run = asyncio.run(record())
    assert (run.request.temperature, run.request.seed) == (0.25, 42)
    assert run.steps[0].answered_by.provider == "openai/gpt-fake"


@contextmanager
def _agent(stack: Stack, history: Path, log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    env: dict[str, Any] = {**os.environ, "QUARRY_AGENT_HISTORY__PATH": str(history)}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    command = [
        sys.executable,
        *("-m", "services.agent", "--port", str(port)),
        *("--search-tool", stack.search_tool, "--llm-gateway", stack.gateway),
    ]
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    address = f"127.0.0.1:{port}"
    try:
        _wait_serving(address, "quarry.agent.v1.AgentService", process, log)
        yield address, process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=15)


def test_a_run_killed_with_its_agent_is_interrupted_after_the_restart(
    stack: Stack, tmp_path: Path
) -> None:
    history, log = tmp_path / "runs.sqlite3", tmp_path / "agent.log"
    stack.openai.reset([Reply.hang(60)])
    with _agent(stack, history, log) as (address, process):

        async def start_and_kill() -> str:
            async with AgentClient(address) as agent:
                events = agent.stream_run(
                    QUESTION, RunOptions(collection="e2e-docs", route="openai", timeout_s=120)
                )
                started = await anext(events)
                run_id = started.started.run_id
                for _ in range(1200):  # until the run is inside its model call
                    if stack.openai.requests:
                        break
                    await asyncio.sleep(0.05)
                running = await agent.get_run(run_id)
                assert running.status == agent_pb2.RUN_STATUS_RUNNING
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=15)
                with pytest.raises(Unavailable):  # died with the process
                    await anext(events)
                return run_id

        run_id = asyncio.run(start_and_kill())
    assert process.returncode == -signal.SIGKILL

    with _agent(stack, history, log) as (address, _):

        async def record() -> agent_pb2.RunRecord:
            async with AgentClient(address) as agent:
                return await agent.get_run(run_id)

        run = asyncio.run(record())
    assert run.status == agent_pb2.RUN_STATUS_INTERRUPTED
    assert run.request.query == QUESTION
    assert run.ended_at.ToNanoseconds() > run.started_at.ToNanoseconds()
    assert "stopped" in run.error_message
    assert time.time() - run.started_at.seconds < 600
