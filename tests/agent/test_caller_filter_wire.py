"""The caller's filter crosses the agent as the domain `CallerFilter`, converted once in (the API's
edge) and once out (the search tool's edge), without losing anything the agent cannot judge: the
search tool receives what the caller sent and answers the same violations; the model is shown the
same `## Caller filter` text as when the agent carried the protobuf message."""

from __future__ import annotations

import json
import socket
from typing import Any, cast

import grpc
import pytest
from google.protobuf import json_format, struct_pb2
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.agent import filter_wire, prompt
from services.agent.client import AgentClient, RunOptions
from services.agent.config import AgentSettings
from services.agent.filters import NO_VALUE, CallerCondition, CallerFilter
from services.agent.server import build_agent_server
from services.common.errors import InvalidArgument, NotFound, QuarryError
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.status import domain_error
from tests.agent.conftest import FILTER_COLLECTION as COLLECTION

Context = grpc.aio.ServicerContext[Any, Any]

UNKNOWN_OPERATOR = cast(search_pb2.FilterOperator, 99)
"""An operator number no agent knows a name for."""


def _json_value(raw: Any) -> struct_pb2.Value:
    return json_format.ParseDict(raw, struct_pb2.Value())


def _condition(
    field: str, operator: int, value: struct_pb2.Value | None
) -> search_pb2.FilterCondition:
    condition = search_pb2.FilterCondition(field=field, value=value)
    condition.operator = cast(search_pb2.FilterOperator, operator)
    return condition


def _filter(*groups: list[search_pb2.FilterCondition]) -> search_pb2.Filter:
    return search_pb2.Filter(groups=[search_pb2.FilterGroup(conditions=g) for g in groups])


VALUES: dict[str, Any] = {
    "string": "github",
    "integer": 2024,
    "fraction": 0.25,
    "negative": -3,
    "true": True,
    "false": False,
    "null": None,
    "empty string": "",
    "list": ["a", 1, 2.5, True, None],
    "nested list": [["a"], []],
    "empty list": [],
    "object": {"a": 1, "b": [None, "x"], "c": {"d": False}},
    "empty object": {},
}
"""Every kind of JSON value a `google.protobuf.Value` can hold."""

EVERY_KIND = _filter(
    [
        _condition(f"field_{operator}", operator, _json_value(raw))
        for operator in search_pb2.FilterOperator.values()
        for raw in VALUES.values()
    ],
    [_condition("source", search_pb2.FILTER_OPERATOR_EQUALS, None)],
    [_condition("source", UNKNOWN_OPERATOR, _json_value("x"))],
    [],
)
"""Every operator (unspecified included) with every value kind, a value left unset, an operator
number without a name, and an empty group."""


def test_every_operator_and_value_kind_goes_back_out_exactly_as_it_came_in() -> None:
    caller = filter_wire.caller_filter(EVERY_KIND)
    assert filter_wire.caller_filter_message(caller) == EVERY_KIND
    out = filter_wire.caller_filter_message(caller).SerializeToString(deterministic=True)
    assert out == EVERY_KIND.SerializeToString(deterministic=True)
    assert filter_wire.caller_filter(search_pb2.Filter()) == CallerFilter()
    assert filter_wire.caller_filter_message(CallerFilter()) == search_pb2.Filter()


def test_the_domain_filter_names_known_operators_and_keeps_unknown_numbers() -> None:
    caller = filter_wire.caller_filter(EVERY_KIND)
    operators = {c.operator for c in caller.groups[0]}
    assert operators == {
        "unspecified",
        "equals",
        "not_equals",
        "contains",
        "greater_than",
        "greater_than_or_equal",
        "less_than",
        "less_than_or_equal",
        "in",
        "not_in",
    }
    unset, unknown, empty = caller.groups[1:]
    assert unset == (CallerCondition("source", "equals", NO_VALUE),)
    assert unknown == (CallerCondition("source", 99, "x"),)
    assert empty == ()
    values = [c.value for c in caller.groups[0][: len(VALUES)]]
    assert values == list(VALUES.values())


def test_a_value_set_to_no_kind_goes_out_unset_which_the_search_tool_reads_alike() -> None:
    """A `Value` with none of its kinds set has no JSON form; it leaves as an unset value (the
    search tool reads an unset value, a no-kind value and a null alike: no value)."""
    sent = _filter([_condition("source", search_pb2.FILTER_OPERATOR_EQUALS, struct_pb2.Value())])
    caller = filter_wire.caller_filter(sent)
    assert caller.groups[0][0].value is NO_VALUE
    assert not filter_wire.caller_filter_message(caller).groups[0].conditions[0].HasField("value")


def _protobuf_filter_text(message: search_pb2.Filter) -> str:
    """How the agent rendered the caller's filter while it carried the protobuf message (the
    `## Caller filter` contract of docs/agent-tool-contract.md)."""
    if not message.groups:
        return "none"
    return json.dumps(
        [
            {
                "conditions": [
                    {
                        "field": c.field,
                        "operator": search_pb2.FilterOperator.Name(c.operator)
                        .removeprefix("FILTER_OPERATOR_")
                        .lower(),
                        "value": prompt._plain(json_format.MessageToDict(c.value)),
                    }
                    for c in group.conditions
                ]
            }
            for group in message.groups
        ]
    )


@pytest.mark.parametrize(
    "message",
    [
        search_pb2.Filter(),
        _filter(list(EVERY_KIND.groups[0].conditions)),
        _filter(
            [_condition("created_at", search_pb2.FILTER_OPERATOR_GREATER_THAN, None)],
            [_condition("metadata.year", search_pb2.FILTER_OPERATOR_IN, _json_value([2023, 2024]))],
            [],
        ),
    ],
    ids=["no filter", "every operator and value", "unset value, or-groups, empty group"],
)
def test_the_caller_filter_text_is_byte_identical_to_the_protobuf_rendering(
    message: search_pb2.Filter,
) -> None:
    text = prompt._filter_text(filter_wire.caller_filter(message))
    assert text == _protobuf_filter_text(message)


# --- through the servicers ------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _agent(search_address: str) -> QuarryServer:
    """An agent server in front of `search_address`; its gateway is never reached (the caller's
    filter is decided before the first model call)."""
    agent = build_agent_server(
        AgentSettings(
            server=ServerSettings(port=0, grace_s=0),
            llm_gateway_address=f"127.0.0.1:{_closed_port()}",
            search_tool_address=search_address,
        )
    )
    await agent.start()
    return agent


REFUSED = {
    "unknown operator number": _filter([_condition("source", 99, _json_value("github"))]),
    "no operator": _filter([_condition("source", 0, _json_value("github"))]),
    "null value": _filter([_condition("source", 1, _json_value(None))]),
    "object value": _filter([_condition("source", 1, _json_value({"a": "github"}))]),
    "unset value": _filter([_condition("source", 1, None)]),
    "object in a list": _filter([_condition("source", 8, _json_value(["github", {"a": 1}]))]),
    "empty group": _filter([_condition("source", 1, _json_value("github"))], []),
    "second group's unknown operator": _filter(
        [_condition("source", 1, _json_value("github"))],
        [_condition("title", 1, _json_value("x")), _condition("source", 42, _json_value("x"))],
    ),
}
"""Caller filters only the search tool can refuse: the agent passes each on as it came."""


@pytest.mark.parametrize("sent", REFUSED.values(), ids=REFUSED.keys())
async def test_a_filter_only_the_search_tool_can_refuse_gets_the_search_tools_own_violations(
    filter_search_tool: QuarryServer, sent: search_pb2.Filter
) -> None:
    async with grpc.aio.insecure_channel(filter_search_tool.address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as direct:
            await stub.GetCollection(
                search_tool_pb2.GetCollectionRequest(collection=COLLECTION, caller_filter=sent)
            )
    expected = domain_error(direct.value)
    assert isinstance(expected, InvalidArgument)
    assert expected.violations
    agent = await _agent(filter_search_tool.address)
    try:
        async with AgentClient(agent.address) as client:
            with pytest.raises(InvalidArgument) as caught:
                await client.run("q", RunOptions(collection=COLLECTION, filter=sent, timeout_s=30))
    finally:
        await agent.stop(0)
    assert [(v.field, v.description) for v in caught.value.violations] == [
        (v.field.replace("caller_filter.", "filter.", 1), v.description)
        for v in expected.violations
    ]


class _RecordingSearchTool(search_tool_pb2_grpc.SearchToolServiceServicer):  # type: ignore[misc]
    """Records the caller's filter GetCollection receives, then answers NOT_FOUND."""

    def __init__(self) -> None:
        self.received: list[search_pb2.Filter] = []

    async def GetCollection(
        self,
        request: search_tool_pb2.GetCollectionRequest,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> search_tool_pb2.GetCollectionResponse:
        self.received.append(request.caller_filter)
        await context.abort(grpc.StatusCode.NOT_FOUND, "recorded")
        raise AssertionError("abort returns no answer")


async def test_the_search_tool_receives_the_callers_filter_byte_for_byte() -> None:
    recorder = _RecordingSearchTool()

    def serve(server: grpc.aio.Server) -> None:
        search_tool_pb2_grpc.add_SearchToolServiceServicer_to_server(recorder, server)

    search = build_server([ServiceRegistration("st", serve)], ServerSettings(port=0, grace_s=0))
    await search.start()
    agent = await _agent(search.address)
    try:
        async with AgentClient(agent.address) as client:
            with pytest.raises(QuarryError) as caught:
                await client.run(
                    "q", RunOptions(collection=COLLECTION, filter=EVERY_KIND, timeout_s=30)
                )
    finally:
        await agent.stop(0)
        await search.stop(0)
    assert isinstance(caught.value, NotFound)
    assert len(recorder.received) == 1
    received = recorder.received[0].SerializeToString(deterministic=True)
    assert received == EVERY_KIND.SerializeToString(deterministic=True)
