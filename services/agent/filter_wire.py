"""The filter's protobuf message (`quarry.common.v1.Filter`), the one wire shape three edges share:

* the model's filter groups out (`filter_message`): the search tool's client sends the model's
  filter in it, and the public `AgentClient` builds the caller's filter with it (`parse_filter`);
* the caller's filter in (`caller_filter`, the agent API's edge `convert.run_request`) and back
  out (`caller_filter_message`, the search tool's client): lossless, so the search tool judges
  exactly what the caller sent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from quarry.common.v1 import search_pb2

from services.agent.filters import (
    NO_VALUE,
    CallerCondition,
    CallerFilter,
    CallerOperator,
    FilterGroup,
    FilterValue,
    JsonValue,
    NoValue,
    Operator,
)

_OPERATOR_NUMBERS: dict[Operator, search_pb2.FilterOperator] = {
    "equals": search_pb2.FILTER_OPERATOR_EQUALS,
    "not_equals": search_pb2.FILTER_OPERATOR_NOT_EQUALS,
    "contains": search_pb2.FILTER_OPERATOR_CONTAINS,
    "greater_than": search_pb2.FILTER_OPERATOR_GREATER_THAN,
    "greater_than_or_equal": search_pb2.FILTER_OPERATOR_GREATER_THAN_OR_EQUAL,
    "less_than": search_pb2.FILTER_OPERATOR_LESS_THAN,
    "less_than_or_equal": search_pb2.FILTER_OPERATOR_LESS_THAN_OR_EQUAL,
    "in": search_pb2.FILTER_OPERATOR_IN,
    "not_in": search_pb2.FILTER_OPERATOR_NOT_IN,
}
_CALLER_OPERATOR_NUMBERS: dict[CallerOperator, int] = {
    "unspecified": search_pb2.FILTER_OPERATOR_UNSPECIFIED
}
for _name, _number in _OPERATOR_NUMBERS.items():
    _CALLER_OPERATOR_NUMBERS[_name] = _number
_CALLER_OPERATORS: dict[int, CallerOperator] = {n: o for o, n in _CALLER_OPERATOR_NUMBERS.items()}


def filter_message(groups: Sequence[FilterGroup]) -> search_pb2.Filter:
    return search_pb2.Filter(
        groups=[
            search_pb2.FilterGroup(
                conditions=[
                    search_pb2.FilterCondition(
                        field=c.field,
                        operator=_OPERATOR_NUMBERS[c.operator],
                        value=_set_value(struct_pb2.Value(), c.value),
                    )
                    for c in g.conditions
                ]
            )
            for g in groups
        ]
    )


# --- the caller's filter -------------------------------------------------------------------------


def caller_filter(message: search_pb2.Filter) -> CallerFilter:
    """The caller's filter as sent (an operator number without a name stays the number; a value
    unset or set to no kind is `NO_VALUE`, which the search tool reads as it reads either)."""
    return CallerFilter(
        tuple(
            tuple(
                CallerCondition(
                    field=c.field,
                    operator=_CALLER_OPERATORS.get(c.operator, c.operator),
                    value=MessageToDict(c.value) if c.value.WhichOneof("kind") else NO_VALUE,
                )
                for c in group.conditions
            )
            for group in message.groups
        )
    )


def caller_filter_message(caller: CallerFilter) -> search_pb2.Filter:
    """The caller's filter as it arrived (`caller_filter`'s inverse)."""
    message = search_pb2.Filter()
    for conditions in caller.groups:
        group = message.groups.add()
        for c in conditions:
            condition = group.conditions.add(field=c.field)
            operator = c.operator
            # A number without a name is set as sent (proto3 enums are open).
            number = operator if isinstance(operator, int) else _CALLER_OPERATOR_NUMBERS[operator]
            condition.operator = cast("search_pb2.FilterOperator", number)
            if not isinstance(c.value, NoValue):
                _set_value(condition.value, c.value)
    return message


def _set_value(message: struct_pb2.Value, value: JsonValue | FilterValue) -> struct_pb2.Value:
    """`value` written into `message` by protobuf's own JSON mapping (its stub types `ParseDict`
    for a dict, but a `Value` message takes any JSON value)."""
    return ParseDict(cast("dict[str, Any]", value), message)
