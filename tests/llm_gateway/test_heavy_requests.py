"""No request may hold up the gateway's event loop: sizes a schema may demand are bounded before
any work (INVALID_ARGUMENT naming where and the limit), and the offline provider's CPU work runs
off the loop, so a light call is answered while a heavy one is still being computed."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import grpc
import pytest
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.common.status import details_of_rpc_error
from services.llm_gateway.convert import MAX_TOOLS_CHARS
from services.llm_gateway.model import ChatRequest
from services.llm_gateway.providers.extractive import (
    MAX_FILL_DEPTH,
    MAX_FILLED_VALUES,
    ExtractiveProvider,
)
from services.llm_gateway.schema_check import (
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_MIN_SIZE,
    bounded_validator,
)
from tests.llm_gateway.gateway_fixtures import gateway_settings, running_gateway, user


def _rows(min_items: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "rows": {"type": "array", "items": {"type": "string"}, "minItems": min_items}
        },
        "required": ["rows"],
    }


async def _structured_error(schema: dict[str, Any]) -> Any:
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(messages=[user("x")], schema_json=json.dumps(schema))
            )
    return details_of_rpc_error(caught.value)


async def test_a_schema_demanding_a_million_items_is_refused_naming_where_and_the_limit() -> None:
    details = await _structured_error(_rows(1_000_000))
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.violations] == ["schema_json"]
    description = details.violations[0].description
    assert "minItems at /properties/rows/minItems is 1000000" in description
    assert f"at most {MAX_SCHEMA_MIN_SIZE}" in description


async def test_a_tool_schema_demanding_too_many_properties_is_refused_naming_the_tool() -> None:
    parameters = {"type": "object", "minProperties": 5_000, "properties": {}}
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(
                pb.GenerateRequest(
                    messages=[user("x")],
                    tools=[pb.Tool(name="t", parameters_json=json.dumps(parameters))],
                )
            )
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.violations] == ["tools[0].parameters_json"]
    assert "minProperties at /minProperties is 5000" in details.violations[0].description


async def test_a_size_named_like_a_keyword_inside_a_const_is_not_a_demand() -> None:
    schema = {
        "type": "object",
        "properties": {"minItems": {"const": {"minItems": 10**9}}},
        "required": ["minItems"],
    }
    async with running_gateway(gateway_settings()) as stub:
        reply = await stub.GenerateStructured(
            pb.GenerateStructuredRequest(messages=[user("x")], schema_json=json.dumps(schema))
        )
    assert json.loads(reply.json) == {"minItems": {"minItems": 10**9}}


async def test_nested_sizes_that_multiply_beyond_the_fill_limit_are_the_callers_error() -> None:
    inner = {"type": "array", "items": {"type": "integer"}, "minItems": MAX_SCHEMA_MIN_SIZE}
    schema = {
        "type": "object",
        "properties": {"grid": {"type": "array", "items": inner, "minItems": MAX_SCHEMA_MIN_SIZE}},
        "required": ["grid"],
    }
    details = await _structured_error(schema)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"more than {MAX_FILLED_VALUES} values" in details.message


async def test_a_ref_cycle_of_required_values_is_the_callers_error_not_a_crash() -> None:
    schema = {
        "type": "object",
        "properties": {"next": {"$ref": "#"}},
        "required": ["next"],
    }
    details = await _structured_error(schema)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"deeper than {MAX_FILL_DEPTH} levels" in details.message


async def test_a_light_generate_is_answered_while_a_heavy_structured_fill_is_still_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The heavy fill is held inside the provider's work until the light call has its answer.
    Were that work on the event loop, the loop could not answer the light call until the fill
    was released (after `HELD_S`), and the order below would be reversed."""
    held_s = 60.0
    release = threading.Event()
    entered = threading.Event()
    respond = ExtractiveProvider.respond

    released: list[bool] = []
    """Whether the held fill was released (True) or gave up waiting (False)."""

    def held_respond(self: ExtractiveProvider, request: ChatRequest) -> Any:
        if request.response_schema is not None:
            entered.set()
            released.append(release.wait(held_s))
        return respond(self, request)

    monkeypatch.setattr(ExtractiveProvider, "respond", held_respond)
    finished: list[str] = []
    async with running_gateway(gateway_settings()) as stub:

        async def heavy() -> pb.GenerateStructuredResponse:
            reply: pb.GenerateStructuredResponse = await stub.GenerateStructured(
                pb.GenerateStructuredRequest(
                    messages=[user("x")], schema_json=json.dumps(_rows(MAX_SCHEMA_MIN_SIZE))
                )
            )
            finished.append("heavy")
            return reply

        heavy_call = asyncio.create_task(heavy())
        await asyncio.to_thread(entered.wait, held_s)
        assert entered.is_set()
        light = await stub.Generate(pb.GenerateRequest(messages=[user("hello")]))
        finished.append("light")
        release.set()
        heavy_reply = await heavy_call
    assert released == [True], "the light call was answered only after the fill gave up"
    assert finished == ["light", "heavy"]
    assert "offline extractive model" in light.message.text
    assert len(json.loads(heavy_reply.json)["rows"]) == MAX_SCHEMA_MIN_SIZE


CATASTROPHIC = "^(a|aa)+$"
"""Backtracking `re` needs exponential time for this against many `a`s and one `!`."""


async def test_a_pattern_that_backtracks_is_matched_in_linear_time_when_validating_a_reply() -> (
    None
):
    """The offline provider fills the string with the conversation's text (here forty `a`s and
    a `!`): Python's `re` would backtrack for minutes on the event loop; RE2 says no at once, and
    the reply is refused as not fitting the schema."""
    schema = {
        "type": "object",
        "properties": {"word": {"type": "string", "pattern": CATASTROPHIC}},
        "required": ["word"],
    }
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(
                    messages=[
                        user("x"),
                        pb.Message(role=pb.ROLE_ASSISTANT, text="a" * 40 + "!"),
                        user("again"),
                    ],
                    schema_json=json.dumps(schema),
                )
            )
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{'a' * 40}!' does not match" in details.message


def test_patterns_are_checked_with_re2_semantics_on_keys_and_values() -> None:
    schema = {
        "type": "object",
        "patternProperties": {"^x_": {"type": "integer"}},
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
    }
    validator = bounded_validator(schema)
    assert validator.is_valid({"code": "ABC", "x_a": 1})
    assert not validator.is_valid({"code": "ABCD"})
    assert not validator.is_valid({"x_a": "not an integer"})
    assert not bounded_validator({"type": "string", "pattern": CATASTROPHIC}).is_valid(
        "a" * 40 + "!"
    )


async def test_a_pattern_re2_cannot_run_is_refused_naming_where_it_is() -> None:
    schema = {
        "type": "object",
        "properties": {"word": {"type": "string", "pattern": "(?=a)b"}},
    }
    details = await _structured_error(schema)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.violations] == ["schema_json"]
    assert "at /properties/word/pattern" in details.violations[0].description
    assert "linear-time (RE2)" in details.violations[0].description


def _wide_schema(properties: int) -> str:
    """A flat object schema of `properties` string properties: checking it against the
    meta-schema is CPU on the event loop in proportion to its length."""
    return json.dumps(
        {"type": "object", "properties": {f"p{n}": {"type": "string"} for n in range(properties)}}
    )


async def test_a_schema_text_over_the_length_limit_is_refused_before_it_is_parsed() -> None:
    """A 680 KB tool schema of 10,000 properties held the gateway's event loop for 28 s (load 27)
    while it was checked; the limit refuses it by its length alone."""
    schema = _wide_schema(2_000)
    assert len(schema) > MAX_SCHEMA_CHARS
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(messages=[user("x")], schema_json=schema)
            )
        details = details_of_rpc_error(caught.value)
        assert details.code == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in details.violations] == ["schema_json"]
        assert f"the limit is {MAX_SCHEMA_CHARS}" in details.violations[0].description
        fits = _wide_schema(100)
        assert len(fits) <= MAX_SCHEMA_CHARS
        reply = await stub.GenerateStructured(
            pb.GenerateStructuredRequest(messages=[user("x")], schema_json=fits)
        )
        assert reply.json


async def test_tools_over_the_total_length_are_refused_naming_tools_and_the_limit() -> None:
    """Each schema within its own limit, distinct ones (so none is remembered) beyond the total:
    a thousand would be minutes of checking."""
    schema = _wide_schema(400)
    tools = [pb.Tool(name=f"t{n}", parameters_json=schema) for n in range(8)]
    assert len(schema) <= MAX_SCHEMA_CHARS < MAX_TOOLS_CHARS < 8 * len(schema)
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Generate(pb.GenerateRequest(messages=[user("x")], tools=tools))
        details = details_of_rpc_error(caught.value)
        assert details.code == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in details.violations] == ["tools"]
        assert f"the limit is {MAX_TOOLS_CHARS}" in details.violations[0].description
        reply = await stub.Generate(pb.GenerateRequest(messages=[user("x")], tools=tools[:2]))
        assert reply.HasField("message")
