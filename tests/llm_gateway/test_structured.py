"""GenerateStructured: schema checked, native schema passed on, output validated, re-asked."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import jsonschema
import pytest
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.common.status import details_of_rpc_error
from services.llm_gateway.chain import ProviderChain
from services.llm_gateway.convert import parse_schema
from services.llm_gateway.model import Message, Role
from services.llm_gateway.providers.scripted import ScriptedProvider
from services.llm_gateway.schema_check import json_depth
from services.llm_gateway.scripted_reply import Reply, ScriptedReplies
from services.llm_gateway.structured import (
    StructuredOutputInvalid,
    StructuredRequest,
    generate_structured,
)
from tests.llm_gateway.gateway_fixtures import gateway_settings, link, running_gateway, user

SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
    "required": ["title", "year"],
}


def _scripted(*texts: str) -> ScriptedProvider:
    return ScriptedProvider(ScriptedReplies([Reply(text=t) for t in texts]), name="s/m")


def _request() -> StructuredRequest:
    return StructuredRequest(
        messages=(Message(Role.USER, text="Give me a book"),), schema=SCHEMA, schema_name="book"
    )


def _chain(provider: ScriptedProvider) -> ProviderChain:
    return ProviderChain([link(provider)])  # type: ignore[arg-type]


async def test_the_schema_reaches_the_provider_and_valid_output_is_returned() -> None:
    provider = _scripted('{"title": "Dune", "year": 1965}')
    result = await generate_structured(_chain(provider), _request(), max_attempts=3)
    assert json.loads(result.json_text) == {"title": "Dune", "year": 1965}
    assert provider.requests[0].response_schema == SCHEMA
    assert provider.requests[0].response_schema_name == "book"


async def test_invalid_output_is_re_asked_with_the_validation_error() -> None:
    provider = _scripted("not json at all", '```json\n{"title": "Dune", "year": 1965}\n```')
    result = await generate_structured(_chain(provider), _request(), max_attempts=3)
    assert json.loads(result.json_text)["year"] == 1965
    second = provider.requests[1]
    assert second.messages[-2].text == "not json at all"
    assert "not valid JSON" in second.messages[-1].text
    assert len(result.attempts) == 2
    assert result.usage.output_tokens > 0


async def test_schema_violations_are_named_in_the_re_ask() -> None:
    provider = _scripted('{"title": "Dune", "year": "1965"}', '{"title": "Dune", "year": 1965}')
    await generate_structured(_chain(provider), _request(), max_attempts=2)
    assert "at year" in provider.requests[1].messages[-1].text


async def test_asks_are_bounded() -> None:
    provider = _scripted("no", "still no", "never")
    with pytest.raises(StructuredOutputInvalid) as caught:
        await generate_structured(_chain(provider), _request(), max_attempts=2)
    assert len(provider.requests) == 2
    assert len(caught.value.attempts) == 2


def test_integer_valued_floats_in_schemas_become_integers() -> None:
    schema = parse_schema('{"type": "array", "maxItems": 10.0, "items": {"minimum": 0.5}}', "f")
    assert schema["maxItems"] == 10
    assert isinstance(schema["maxItems"], int)
    assert schema["items"]["minimum"] == 0.5


async def test_structured_output_through_grpc_from_the_offline_provider_validates() -> None:
    async with running_gateway(gateway_settings()) as stub:
        response = await stub.GenerateStructured(
            pb.GenerateStructuredRequest(
                messages=[user("Summarise the conversation")],
                schema_json=json.dumps(SCHEMA),
                schema_name="book",
            )
        )
    jsonschema.validate(json.loads(response.json), SCHEMA)
    assert response.provider == "extractive"


async def test_exhausted_asks_are_unavailable_with_a_reason(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"replies": [{"text": "nope"}] * 3}))
    settings = gateway_settings(
        [{"kind": "scripted", "name": "s", "script": str(script)}],  # type: ignore[list-item]
        {"agent": ["s"]},
        max_structured_attempts=2,
    )
    async with running_gateway(settings) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(messages=[user("x")], schema_json=json.dumps(SCHEMA))
            )
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.UNAVAILABLE
    assert details.reason == "STRUCTURED_OUTPUT_INVALID"


async def test_a_schema_that_is_not_an_object_schema_is_rejected() -> None:
    async with running_gateway(gateway_settings()) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(messages=[user("x")], schema_json='{"type": "array"}')
            )
    assert [v.field for v in details_of_rpc_error(caught.value).violations] == ["schema_json"]


def _nested(depth: int) -> str:
    return '{"type": "object", "properties": {"a": ' * depth + "{}" + "}}" * depth


@pytest.mark.parametrize(
    "schema",
    # beyond the parser's recursion limit, written tersely to stay within MAX_SCHEMA_CHARS
    [_nested(40), '{"a":' * 3_000 + "{}" + "}" * 3_000],
    ids=["over-the-limit", "beyond-the-parser"],
)
async def test_a_schema_nested_too_deeply_is_invalid_argument_naming_the_limit(schema: str) -> None:
    async with running_gateway(gateway_settings()) as stub:
        assert await stub.GenerateStructured(
            pb.GenerateStructuredRequest(messages=[user("x")], schema_json=_nested(10))
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(messages=[user("x")], schema_json=schema)
            )
    details = details_of_rpc_error(caught.value)
    assert details.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in details.violations] == ["schema_json"]
    assert "nested deeper than 32 levels" in details.violations[0].description


def test_schema_depth_counts_objects_and_arrays_without_recursion() -> None:
    assert json_depth("scalar") == 0
    assert json_depth({"a": [1, {"b": []}]}) == 4
    assert json_depth(json.loads(_nested(200))) == 401
