"""The protobuf edge: each field rule checked once, naming the bad field; a tool schema is checked
against the meta-schema once per distinct schema, however many requests carry it."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.common.errors import InvalidArgument
from services.llm_gateway.convert import chat_request
from services.llm_gateway.schema_check import (
    SchemaChecker,
    SchemaProblem,
    check_against_meta_schema,
)
from tests.llm_gateway.gateway_fixtures import agent_tools, user


class CountingCheck:
    """The real meta-schema check, counting the schemas it is asked about."""

    def __init__(self) -> None:
        self.checked: list[dict[str, Any]] = []

    def __call__(self, schema: dict[str, Any]) -> None:
        self.checked.append(schema)
        check_against_meta_schema(schema)


def _tool(name: str, schema: object) -> pb.Tool:
    return pb.Tool(name=name, description="d", parameters_json=json.dumps(schema))


def _rejected_field(request: pb.GenerateRequest) -> str:
    with pytest.raises(InvalidArgument) as raised:
        chat_request(request, schemas=SchemaChecker())
    (violation,) = raised.value.violations
    return violation.field


def test_an_agent_turn_checks_each_tool_schema_once_and_later_turns_not_at_all() -> None:
    check = CountingCheck()
    schemas = SchemaChecker(check=check)
    request = pb.GenerateRequest(messages=[user("q")], tools=agent_tools())
    for _ in range(5):
        chat = chat_request(request, schemas=schemas)
    assert len(check.checked) == 2, "one meta-schema check per distinct schema"
    assert [tool.name for tool in chat.tools] == ["search", "submit_answer"]


def test_the_same_schema_written_differently_is_one_schema() -> None:
    check = CountingCheck()
    schemas = SchemaChecker(check=check)
    spaced = pb.Tool(name="t", parameters_json='{"type": "object", "maxProperties": 2.0}')
    compact = pb.Tool(name="t", parameters_json='{"maxProperties":2,"type":"object"}')
    for tool in (spaced, compact):
        chat_request(pb.GenerateRequest(messages=[user("q")], tools=[tool]), schemas=schemas)
    assert len(check.checked) == 1


def test_the_remembered_verdicts_are_bounded_least_recently_used_first() -> None:
    check = CountingCheck()
    schemas = SchemaChecker(max_schemas=3, check=check)
    for width in range(10):
        assert schemas.problem({"type": "object", "maxProperties": width}) is None
    assert len(schemas) == 3
    schemas.problem({"type": "object", "maxProperties": 9})
    assert len(check.checked) == 10, "a remembered schema was checked again"
    schemas.problem({"type": "object", "maxProperties": 0})
    assert len(check.checked) == 11, "an evicted schema was not checked again"
    assert len(schemas) == 3


def test_an_invalid_schema_is_rejected_every_time_naming_its_field() -> None:
    check = CountingCheck()
    schemas = SchemaChecker(check=check)
    request = pb.GenerateRequest(
        messages=[user("q")], tools=[_tool("ok", {"type": "object"}), _tool("bad", {"type": 5})]
    )
    for _ in range(2):
        with pytest.raises(InvalidArgument) as raised:
            chat_request(request, schemas=schemas)
        assert raised.value.violations[0].field == "tools[1].parameters_json"
        assert "not a valid JSON schema" in raised.value.violations[0].description
    assert len(check.checked) == 2


def test_the_default_check_is_the_json_schema_meta_schema() -> None:
    check_against_meta_schema({"type": "object", "properties": {"q": {"type": "string"}}})
    with pytest.raises(jsonschema.SchemaError):
        check_against_meta_schema({"type": "object", "properties": {"q": {"type": "nonsense"}}})


@pytest.mark.parametrize(
    ("request_message", "field"),
    [
        (pb.GenerateRequest(), "messages"),
        (pb.GenerateRequest(messages=[user("q")], tools=[_tool("has space", {})]), "tools[0].name"),
        (pb.GenerateRequest(messages=[user("q")], tools=[_tool("x" * 129, {})]), "tools[0].name"),
        (
            pb.GenerateRequest(messages=[user("q")], tools=[_tool("t", {}), _tool("t", {})]),
            "tools[1].name",
        ),
        (
            pb.GenerateRequest(messages=[user("q")], tools=[_tool("t", {"type": "nonsense"})]),
            "tools[0].parameters_json",
        ),
        (
            pb.GenerateRequest(messages=[user("q")], tools=[_tool("t", {"type": "string"})]),
            "tools[0].parameters_json",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_REQUIRED),
            ),
            "tool_choice.mode",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tools=[_tool("search", {})],
                tool_choice=pb.ToolChoice(mode=pb.TOOL_CHOICE_MODE_NAMED, name="other"),
            ),
            "tool_choice.name",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tools=[_tool("search", {}), _tool("read", {})],
                tool_choice=pb.ToolChoice(allowed=["search", "absent"]),
            ),
            "tool_choice.allowed[1]",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tools=[_tool("search", {}), _tool("read", {})],
                tool_choice=pb.ToolChoice(allowed=["read", "read"]),
            ),
            "tool_choice.allowed[1]",
        ),
        (
            pb.GenerateRequest(
                messages=[user("q")],
                tools=[_tool("search", {}), _tool("read", {})],
                tool_choice=pb.ToolChoice(
                    mode=pb.TOOL_CHOICE_MODE_NAMED, name="search", allowed=["read"]
                ),
            ),
            "tool_choice.name",
        ),
        (pb.GenerateRequest(messages=[user("q")], max_output_tokens=0), "max_output_tokens"),
        (pb.GenerateRequest(messages=[user("q")], temperature=2.5), "temperature"),
        (
            pb.GenerateRequest(
                messages=[
                    user("q"),
                    pb.Message(role=pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(name="search")]),
                ]
            ),
            "messages[1].tool_calls[0].id",
        ),
        (
            pb.GenerateRequest(
                messages=[
                    user("q"),
                    pb.Message(
                        role=pb.ROLE_ASSISTANT, tool_calls=[pb.ToolCall(id="a", name="bad name!")]
                    ),
                ]
            ),
            "messages[1].tool_calls[0].name",
        ),
    ],
    ids=[
        "no-messages",
        "tool-name-with-space",
        "tool-name-too-long",
        "duplicate-tool",
        "invalid-schema",
        "non-object-schema",
        "required-without-tools",
        "named-unknown-tool",
        "allowed-unknown-tool",
        "allowed-twice",
        "named-not-allowed",
        "zero-max-tokens",
        "temperature-out-of-range",
        "empty-call-id",
        "invalid-call-name",
    ],
)
def test_malformed_fields_are_rejected_naming_the_field(
    request_message: pb.GenerateRequest, field: str
) -> None:
    assert _rejected_field(request_message) == field


def test_integral_numbers_in_a_tool_schema_become_integers_and_fractions_stay() -> None:
    tool = pb.Tool(
        name="t",
        parameters_json='{"type": "object", "maxProperties": 3.0, '
        '"properties": {"n": {"type": "number", "minimum": 0.5, "maximum": 1e2}}}',
    )
    chat = chat_request(pb.GenerateRequest(messages=[user("q")], tools=[tool]))
    parameters = chat.tools[0].parameters
    assert parameters["maxProperties"] == 3
    assert type(parameters["maxProperties"]) is int
    assert parameters["properties"]["n"]["minimum"] == 0.5
    assert type(parameters["properties"]["n"]["maximum"]) is int


def test_a_schema_text_is_parsed_once_however_often_it_is_sent() -> None:
    """Each agent turn repeats the same tool schemas: the second request reuses the parsed and
    checked schema instead of parsing, bounding and checking the text again."""
    calls = []

    def check(schema: dict[str, Any]) -> None:
        calls.append(schema)
        check_against_meta_schema(schema)

    schemas = SchemaChecker(check=check)
    text = '{"type": "object", "properties": {"q": {"type": "string"}}}'
    first = schemas.parse(text)
    assert schemas.parse(text) is first
    assert len(calls) == 1
    with pytest.raises(SchemaProblem):
        schemas.parse('{"type": 5}')
    with pytest.raises(SchemaProblem):
        schemas.parse('{"type": 5}')
    assert len(calls) == 2
