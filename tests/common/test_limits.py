"""Configured limits answer with a status that names the limit."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.agent.v1 import agent_pb2

from services.agent import convert
from services.common.errors import InvalidArgument
from services.common.server import build_server
from services.common.settings import ServerSettings


async def test_health_probes_are_never_refused_by_max_concurrent_rpcs() -> None:
    server = build_server([], ServerSettings(port=0, grace_s=0, max_concurrent_rpcs=1))
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            watch = health.Watch(health_pb2.HealthCheckRequest())
            first = await watch.read()  # an open Watch holds no admission slot
            checks = [await health.Check(health_pb2.HealthCheckRequest()) for _ in range(3)]
            watch.cancel()
    finally:
        await server.stop(0)
    assert first.status == health_pb2.HealthCheckResponse.SERVING
    assert {c.status for c in checks} == {health_pb2.HealthCheckResponse.SERVING}


def test_a_question_longer_than_max_query_chars_names_the_limit() -> None:
    request = agent_pb2.RunRequest(query="x" * 41, collection="docs")
    with pytest.raises(InvalidArgument) as caught:
        convert.run_request(request, max_query_chars=40)
    assert [v.field for v in caught.value.violations] == ["query"]
    assert "max_query_chars is 40" in caught.value.message
    assert convert.run_request(request, max_query_chars=41).query == "x" * 41


def test_more_prior_turns_than_max_history_turns_names_the_limit() -> None:
    turns = [agent_pb2.ConversationTurn(question="q", answer="a")] * 3
    request = agent_pb2.RunRequest(query="why?", collection="docs", history=turns)
    with pytest.raises(InvalidArgument) as caught:
        convert.run_request(request, max_history_turns=2)
    assert [v.field for v in caught.value.violations] == ["history"]
    assert "max_history_turns is 2" in caught.value.message
    assert len(convert.run_request(request, max_history_turns=3).history) == 3
