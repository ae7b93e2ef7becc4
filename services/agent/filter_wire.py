"""A filter's protobuf message (`quarry.common.v1.Filter`) from the model's filter groups: the one
wire shape both edges that speak it share — the search tool's client sends the model's filter in
it, and the public `AgentClient` builds the caller's filter (`parse_filter`) with it."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf import struct_pb2
from quarry.common.v1 import search_pb2

from services.agent.filters import FilterGroup, FilterValue, Operator

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


def filter_message(groups: Sequence[FilterGroup]) -> search_pb2.Filter:
    return search_pb2.Filter(
        groups=[
            search_pb2.FilterGroup(
                conditions=[
                    search_pb2.FilterCondition(
                        field=c.field,
                        operator=_OPERATOR_NUMBERS[c.operator],
                        value=_value_message(c.value),
                    )
                    for c in g.conditions
                ]
            )
            for g in groups
        ]
    )


def _value_message(value: FilterValue) -> struct_pb2.Value:
    message = struct_pb2.Value()
    if isinstance(value, list):
        message.list_value.values.extend(_value_message(v) for v in value)
    elif isinstance(value, bool):
        message.bool_value = value
    elif isinstance(value, int | float):
        message.number_value = float(value)
    else:
        message.string_value = value
    return message
