"""A route whose every reply is a forced tool call (a grammar the model server enforces, the
gateway's `tool_calls: json_schema`): a FAST run's first turn offers `search` alone, named, so the
model searches before it answers instead of answering from memory; a THINKING run's first turn
offers every tool but the answer, so it looks (searches, counts, plans) before it answers; the
turns after it offer what they always do (the answer with the citable ids as an enum). Routes that
do not force calls keep every tool on every turn."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import grpc
import jsonschema
import pytest
from quarry.agent.v1 import agent_pb2
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as gw_grpc

from services.agent.conversation import ANSWER_OUTPUT_TOKENS
from services.agent.gateway_client import GatewayModelClient
from services.agent.loop import AgentLoop
from services.agent.messages import CHARS_PER_TOKEN
from services.agent.ports import ToolChoice
from services.agent.run import Mode, StopReason
from services.agent.testing import ScriptedModel, answer_call, calculate_call, search_call, turn
from services.agent.tools import DEFAULT_TOOLS
from services.common.telemetry import Telemetry, setup_telemetry
from services.llm_gateway.config import GatewaySettings, ProviderSettings
from services.llm_gateway.server import build_gateway_server
from services.llm_gateway.testing import FakeOpenAIServer, Reply
from tests.agent.conftest import DOCUMENTS, result_of, run_events
from tests.agent.fake_search import FakeDocument, FakeSearch
from tests.agent.test_cancellation import SERVER, _servers
from tests.agent.test_dependency_clients import FakeSearchService
from tests.llm_gateway.gateway_fixtures import gateway_settings

TEMP = "tempfile__chunk_0"
ANSWER = "Use tempfile.TemporaryDirectory [1]."


def _offered(model: ScriptedModel, call: int) -> tuple[list[str], ToolChoice]:
    """The tools call `call` may make and its choice (mode and name)."""
    request = model.requests[call]
    return [t.name for t in request.callable_tools], replace(request.tool_choice, allowed=())


async def test_a_fast_run_on_a_forcing_route_first_offers_only_search_then_the_answer(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [turn("", search_call("temporary directory")), turn("", answer_call(ANSWER, [TEMP]))],
        constrained=True,
        forced_calls=True,
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.FAST)

    result = result_of(events)
    assert result.stop_reason is StopReason.ANSWERED
    assert [c.result_id for c in result.answer.citations] == [TEMP]
    assert _offered(model, 0) == (["search"], ToolChoice("named", "search"))
    assert _offered(model, 1) == (["submit_answer"], ToolChoice("named", "submit_answer"))
    answer = model.requests[1].callable_tools[0].parameters
    assert TEMP in answer["$defs"]["CitableResultId"]["enum"]
    with pytest.raises(jsonschema.ValidationError):  # results were seen: an answer cites one
        jsonschema.validate({"text": "t", "citations": []}, answer)
    assert [s.offered_tools for s in result.steps][:1] == [("search",)]


async def test_a_thinking_run_on_a_forcing_route_must_look_before_it_may_answer(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", search_call("tempfile cleanup")),
            turn("", answer_call(ANSWER, [TEMP])),
        ],
        constrained=True,
        forced_calls=True,
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)

    assert result_of(events).stop_reason is StopReason.ANSWERED
    first, choice = _offered(model, 0)
    assert "submit_answer" not in first
    assert {"search", "calculate", "count"} <= set(first), "it may plan or count, not only search"
    assert choice == ToolChoice("required")
    later, choice = _offered(model, 1)
    assert {"search", "submit_answer"} <= set(later), "after one look it may answer"
    assert choice == ToolChoice()
    sent = {tuple(t.name for t in r.tools) for r in model.requests}
    assert len(sent) == 1, "every turn describes every tool: the prompt keeps its prefix"


async def test_a_route_that_does_not_force_calls_keeps_every_tool_on_a_fast_first_turn(
    search: FakeSearch,
) -> None:
    """A strict-schema vendor holds arguments to their schemas but may still answer in text or
    pick its tool: its first FAST turn is unchanged."""
    model = ScriptedModel(
        [turn("", search_call("temporary directory")), turn("", answer_call(ANSWER, [TEMP]))],
        constrained=True,
    )
    await run_events(AgentLoop(model, search), mode=Mode.FAST)

    names, choice = _offered(model, 0)
    assert {"search", "submit_answer"} <= set(names)
    assert choice == ToolChoice()


async def test_a_fast_run_whose_tools_exclude_search_is_offered_its_tools_on_a_forcing_route(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [turn("", calculate_call("6*7")), turn("", answer_call("42"))],
        constrained=True,
        forced_calls=True,
    )
    events = await run_events(
        AgentLoop(model, search), mode=Mode.FAST, allowed_tools=frozenset({"calculate"})
    )

    assert result_of(events).stop_reason is StopReason.ANSWERED
    assert _offered(model, 0) == (["calculate", "submit_answer"], ToolChoice())


def test_the_registry_opens_a_forced_run_with_the_tool_that_opens_and_else_offers_every_tool() -> (
    None
):
    every = DEFAULT_TOOLS.offered(frozenset())
    assert DEFAULT_TOOLS.turn(every, opening_forced=True) == (
        (DEFAULT_TOOLS.get("search"),),
        ToolChoice("named", "search"),
    )
    assert DEFAULT_TOOLS.turn(every, opening_forced=False) == (every, ToolChoice())
    no_search = DEFAULT_TOOLS.offered(frozenset({"calculate"}))
    assert [t.name for t in no_search] == ["calculate", "submit_answer"]
    assert DEFAULT_TOOLS.turn(no_search, opening_forced=True) == (no_search, ToolChoice())
    looking = tuple(t for t in every if t.name != "submit_answer")
    assert DEFAULT_TOOLS.turn(every, opening_forced=True, deliberate=True) == (
        looking,
        ToolChoice("required"),
    )
    answer_only = (DEFAULT_TOOLS.answer_tool,)
    assert DEFAULT_TOOLS.turn(answer_only, opening_forced=True, deliberate=True) == (
        answer_only,
        ToolChoice(),
    )
    assert DEFAULT_TOOLS.turn(every, opening_forced=False, deliberate=True) == (
        every,
        ToolChoice(),
    )
    assert [t.name for t in DEFAULT_TOOLS if t.opens] == ["search"]


async def test_the_gateway_says_which_routes_force_tool_calls() -> None:
    """GetStatus marks a `tool_calls: json_schema` provider as forcing calls; the same server
    with native tool calls does not, nor does `extractive`; the agent's client reads the flag
    for a route's first provider."""
    base = {
        "kind": "openai",
        "endpoint": "llama-cpp-python",
        "model": "qwen",
        "base_url": "http://127.0.0.1:9/v1",
    }
    local = ProviderSettings.model_validate({**base, "name": "local", "tool_calls": "json_schema"})
    native = ProviderSettings.model_validate({**base, "name": "native"})
    settings = gateway_settings(
        [local, native],
        {"local": ["local", "extractive"], "native": ["native"], "offline": ["extractive"]},
        default_route="offline",
    )
    server = build_gateway_server(settings, None)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            status = await gw_grpc.LlmGatewayServiceStub(channel).GetStatus(gw.GetStatusRequest())
            client = GatewayModelClient(channel)
            verdicts = {
                route: await client.forces_tool_calls(route, remaining_s=5)
                for route in ("local", "native", "offline", "")
            }
    finally:
        await server.stop(0)
    assert {p.name: p.forces_tool_calls for p in status.providers} == {
        "local": True,
        "native": False,
        "extractive": False,
    }
    assert verdicts == {"local": True, "native": False, "offline": False, "": False}


@pytest.fixture
def telemetry() -> Telemetry:
    return setup_telemetry("test")


def _schema(body: dict[str, Any]) -> dict[str, Any]:
    format_: dict[str, Any] = body["response_format"]
    assert format_["type"] == "json_object"
    schema: dict[str, Any] = format_["schema"]
    return schema


SEARCH_ARGS = {"query": {"primary": "temporary directory"}, "limit": 5}
ANSWER_ARGS = {"text": ANSWER, "citations": [{"result_id": TEMP}]}


async def _local_route_run(
    telemetry: Telemetry, mode: agent_pb2.Mode
) -> tuple[agent_pb2.RunResponse, list[dict[str, Any]], list[list[dict[str, Any]]]]:
    """The real agent and gateway in front of a fake llama-cpp-python server (`tool_calls:
    json_schema`) whose model searches, then answers citing TEMP: the run's reply, and the
    grammar schema and the messages of each request the model server received."""
    reply, bodies = await _through_local_route(telemetry, mode)
    return reply, [_schema(b) for b in bodies], [b["messages"] for b in bodies]


async def _through_local_route(
    telemetry: Telemetry,
    mode: agent_pb2.Mode,
    *,
    documents: list[FakeDocument] = DOCUMENTS,
    search_args: dict[str, Any] = SEARCH_ARGS,
    window: int = 16_000,
    agent_window: int | None = 16_000,
) -> tuple[agent_pb2.RunResponse, list[dict[str, Any]]]:
    """One run through the real agent and gateway on a `json_schema` route of `window` tokens
    over `documents`, its model searching with `search_args`, then answering citing TEMP:
    the reply and the body of each request the model server received (`agent_window`: the
    agent's configured window; None: the route's, as the gateway reports it)."""
    with FakeOpenAIServer() as fake:
        fake.push(
            Reply(text=json.dumps({"name": "search", "arguments": search_args})),
            Reply(text=json.dumps({"name": "submit_answer", "arguments": ANSWER_ARGS})),
        )
        local = ProviderSettings.model_validate(
            {
                "kind": "openai",
                "name": "local",
                "endpoint": "llama-cpp-python",
                "model": "qwen",
                "base_url": fake.base_url,
                "tool_calls": "json_schema",
                "context_window_tokens": window,
                "retry": {"max_attempts": 1},
            }
        )
        gateway = GatewaySettings(
            providers=[local], routes={"agent": ["local"]}, default_route="agent", server=SERVER
        )
        service = FakeSearchService(FakeSearch(documents, collection="python-docs"))
        async with _servers(
            telemetry, service, gateway=gateway, window_tokens=agent_window
        ) as agent:
            reply = await agent.Run(
                agent_pb2.RunRequest(
                    query="temporary directory", collection="python-docs", mode=mode
                ),
                timeout=30,
            )
        return reply, [r.body for r in fake.requests]


async def test_through_the_gateway_a_local_route_is_made_to_search_first_then_cite_what_it_saw(
    telemetry: Telemetry,
) -> None:
    """The first request's grammar schema allows only a `search` call; the second only
    `submit_answer`, citing one of the ids the search showed."""
    reply, schemas, _ = await _local_route_run(telemetry, agent_pb2.MODE_FAST)
    first, second = schemas

    assert reply.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert [c.result_id for c in reply.answer.citations] == [TEMP]
    assert "anyOf" not in first
    assert first["properties"]["name"] == {"const": "search"}
    assert "anyOf" not in second
    assert second["properties"]["name"] == {"const": "submit_answer"}
    cited = second["properties"]["arguments"]["properties"]["citations"]
    assert cited["minItems"] == 1
    assert TEMP in cited["items"]["properties"]["result_id"]["enum"]
    jsonschema.validate({"name": "submit_answer", "arguments": ANSWER_ARGS}, second)
    invented = {"text": "t", "citations": [{"result_id": "invented__chunk_9"}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "submit_answer", "arguments": invented}, second)


async def test_through_the_gateway_a_thinking_run_on_a_local_route_cannot_answer_before_a_tool(
    telemetry: Telemetry,
) -> None:
    """THINKING on the same route: the first grammar allows any of the run's tools but
    `submit_answer`; the second allows the answer too."""
    reply, schemas, sent = await _local_route_run(telemetry, agent_pb2.MODE_THINKING)
    first, second = schemas[:2]

    assert reply.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    first_names = {branch["properties"]["name"]["const"] for branch in first["anyOf"]}
    assert "search" in first_names
    assert "submit_answer" not in first_names
    second_names = {branch["properties"]["name"]["const"] for branch in second["anyOf"]}
    assert {"search", "submit_answer"} <= second_names
    first_prompt, second_prompt = sent[:2]
    assert second_prompt[: len(first_prompt) - 1] == first_prompt[:-1], (
        "the second turn's prompt extends the first: only the closing directive differs, so a "
        "local server re-reads only what is new"
    )
    assert "You must call one of these tools now" in first_prompt[-1]["content"]


LONG_DOCUMENTS = [
    FakeDocument(
        f"tempfile__chunk_{i}",
        f"tempfile — temporary directory, part {i}",
        f"A temporary directory, part {i}: " + "TemporaryDirectory cleans up after itself. " * 70,
        source="stdlib",
    )
    for i in range(8)
]


async def test_a_small_window_on_a_forcing_route_with_the_default_tools_still_gets_an_answer(
    telemetry: Telemetry,
) -> None:
    """A 4,096-token local route, the default tools (five: the instruction every request
    carries lists them all) and long documents: the search result takes only the room the
    next call has, so every request the model server receives leaves the answer's reserve
    (500 tokens) free in the window. Before, the result took its full budget (30 % of the
    window) and the answer-only request left the answer ~420 tokens."""
    window = 4_096
    reply, bodies = await _through_local_route(
        telemetry,
        agent_pb2.MODE_FAST,
        documents=LONG_DOCUMENTS,
        search_args={**SEARCH_ARGS, "limit": 10},
        window=window,
        agent_window=None,
    )
    sent = [b["messages"] for b in bodies]

    assert reply.stop_reason == agent_pb2.STOP_REASON_ANSWERED
    assert reply.answer.text == ANSWER
    assert len(sent) == 2, "the search turn, then the answer turn"
    assert "TemporaryDirectory cleans up after itself." in sent[1][-2]["content"]
    for messages in sent:
        assert (
            sum(len(m["content"]) for m in messages)
            <= (window - ANSWER_OUTPUT_TOKENS) * CHARS_PER_TOKEN
        )
