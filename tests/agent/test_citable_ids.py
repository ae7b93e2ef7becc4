"""Citations that cannot be invented: on a route that holds tools to their schemas, the agent offers
`submit_answer` with the result ids seen so far as an enum of `citations[].result_id`, rebuilt every
turn; on other routes the static schema (cacheable) goes out unchanged."""

from __future__ import annotations

from typing import Any

import grpc
import jsonschema
import pytest
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as gw_grpc

from services.agent.gateway_client import GatewayModelClient
from services.agent.loop import AgentLoop
from services.agent.run import Mode, StopReason
from services.agent.testing import ScriptedModel, answer_call, search_call, turn
from services.agent.tools import SubmitAnswerTool
from services.agent.tools.submit_answer import citable_schema
from services.llm_gateway.config import ProviderSettings
from services.llm_gateway.server import build_gateway_server
from tests.agent.conftest import result_of, run_events
from tests.agent.fake_search import FakeSearch
from tests.llm_gateway.gateway_fixtures import gateway_settings

TEMP = "tempfile__chunk_0"


def _answer_schema(model: ScriptedModel, call: int) -> dict[str, Any]:
    spec = next(t for t in model.requests[call].tools if t.name == "submit_answer")
    return spec.parameters


def _answer(ids: list[str]) -> dict[str, object]:
    return {"text": "t", "citations": [{"result_id": i} for i in ids]}


async def test_a_constrained_route_gets_the_seen_ids_as_an_enum_rebuilt_each_turn(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", search_call("delete a directory tree")),
            turn("", answer_call("Use TemporaryDirectory [1].", [TEMP])),
        ],
        constrained=True,
    )
    events = await run_events(AgentLoop(model, search), mode=Mode.THINKING)
    assert result_of(events).stop_reason is StopReason.ANSWERED

    before_any = _answer_schema(model, 0)
    jsonschema.validate(_answer([]), before_any)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_answer([TEMP]), before_any)

    after_first = _answer_schema(model, 1)
    after_second = _answer_schema(model, 2)
    jsonschema.validate(_answer([TEMP]), after_first)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_answer(["invented__chunk_9"]), after_first)
    first_ids = _enum(after_first)
    second_ids = _enum(after_second)
    assert TEMP in first_ids
    assert first_ids == second_ids[: len(first_ids)], "ids keep the order they were seen in"
    assert "shutil__chunk_0" in second_ids


async def test_an_unconstrained_route_gets_the_static_schema_every_turn(
    search: FakeSearch,
) -> None:
    model = ScriptedModel(
        [
            turn("", search_call("temporary directory")),
            turn("", answer_call("Use TemporaryDirectory [1].", [TEMP])),
        ]
    )
    await run_events(AgentLoop(model, search), mode=Mode.FAST)
    static = SubmitAnswerTool().spec.parameters
    assert _answer_schema(model, 0) == static
    assert _answer_schema(model, 1) == static
    jsonschema.validate(_answer(["anything__chunk_0"]), static)


def test_the_citable_schema_keeps_every_other_field_and_does_not_touch_the_static_one() -> None:
    static = SubmitAnswerTool().spec.parameters
    before = repr(static)
    schema = citable_schema(static, ["a__chunk_0", "b__chunk_1", "a__chunk_0"])
    assert repr(static) == before
    assert _enum(schema) == ["a__chunk_0", "b__chunk_1"]
    assert schema["properties"]["citations"]["maxItems"] == 2
    assert schema["properties"]["citations"]["minItems"] == 1
    assert set(schema["properties"]) == set(static["properties"])
    jsonschema.validate({**_answer(["b__chunk_1"]), "confidence": 0.5}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"citations": []}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"text": "t"}, schema)
    with pytest.raises(jsonschema.ValidationError):  # results were seen: cite one of them
        jsonschema.validate(_answer([]), schema)
    before_any = citable_schema(static, [])
    assert "minItems" not in before_any["properties"]["citations"]
    jsonschema.validate(_answer([]), before_any)


def _enum(schema: dict[str, Any]) -> list[str]:
    citations = schema["properties"]["citations"]
    assert citations["items"]["properties"]["result_id"] == {"$ref": "#/$defs/CitableResultId"}
    ids: list[str] = schema["$defs"]["CitableResultId"]["enum"]
    return ids


async def test_the_gateway_says_which_routes_hold_tools_to_their_schemas() -> None:
    """GetStatus marks a `tool_calls: json_schema` provider (the local route) and the agent's
    gateway client reads it for the route's first provider; `extractive` does not enforce."""
    local = ProviderSettings(
        kind="openai",
        name="local",
        endpoint="llama-cpp-python",
        model="qwen",
        base_url="http://127.0.0.1:9/v1",
        tool_calls="json_schema",
    )
    native = ProviderSettings(
        kind="openai",
        name="native",
        endpoint="llama-cpp-python",
        model="qwen",
        base_url="http://127.0.0.1:9/v1",
    )
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
                route: await client.enforces_tool_schemas(route, remaining_s=5)
                for route in ("local", "native", "offline", "")
            }
    finally:
        await server.stop(0)
    enforced = {p.name: p.enforces_tool_schemas for p in status.providers}
    assert enforced == {"local": True, "native": False, "extractive": False}
    assert verdicts == {"local": True, "native": False, "offline": False, "": False}
