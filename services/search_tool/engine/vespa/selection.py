"""Compiles a validated `FilterExpression` into a Vespa *document selection* over `chunk`
documents, for deletes that Vespa runs itself (`DELETE /document/v1/…?selection=…`).

The document selector language (`en/reference/writing/document-selector-language.html`) is not
YQL: fields are `chunk.<field>` (document fields, so `chunk.title`, never the `title_attr` copy),
`==` compares whole values, `=~` is a regex, a multi-value field compares with `==` only ("at least
one element matches"), and a missing field is `null`: `==` with null is false, while `<`/`>` with
null are *invalid*, which poisons `and`/`or`/`not` and never matches at the root.

Only what that reference pins down is compiled; anything else returns None and the caller deletes
through the YQL path instead (query the ids with the same semantics as a search, delete by id):
* strings: `==`, `!=` as `not (… == …)` (a chunk without the field is kept, as in every engine),
  `in` / `not_in` as an `or` of `==`, `contains` as `=~ "(?i)<RE2 QuoteMeta of the value>"`; the
  empty string is left to YQL (unset and "" are not told apart the same way);
* integers and timestamps (epoch microseconds): comparisons, guarded by `!= null` so a missing
  value is plainly false, never invalid; a fractional bound is normalised as in `yql`;
* breadcrumbs: `equals` / `in` on `breadcrumb_terms` (an array: any element), `contains` on
  `breadcrumb_path`;
* metadata (typed maps, `meta_long{key}`) is not compiled: how a missing key compares is not
  documented, so those deletes take the YQL path.

Values are safe by construction: a string literal holds only letters, digits, space and `_-.:/@`
literally and every other character as `\\x##` (the grammar's escape); the language is ASCII-only,
so a value with a character above 0x7F is not compiled at all (YQL path).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

import re2

from services.search_tool.documents import epoch_microseconds
from services.search_tool.engine.vespa.package import CHUNK
from services.search_tool.filters import (
    METADATA_PREFIX,
    Condition,
    FieldType,
    FilterExpression,
    Operator,
    Scalar,
)

_FIELDS = {"id": "chunk_id"}
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.:/@")
_ORDERING = {
    Operator.GREATER_THAN: ">",
    Operator.GREATER_THAN_OR_EQUAL: ">=",
    Operator.LESS_THAN: "<",
    Operator.LESS_THAN_OR_EQUAL: "<=",
}
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class NotExpressible(Exception):
    """The condition has no document selection with exactly the engine-independent meaning."""


def selection_string(value: str) -> str:
    """A document-selection string literal holding exactly `value` (ASCII only)."""
    out = []
    for char in value:
        if char in _SAFE:
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        else:
            raise NotExpressible("the document selector language is ASCII-only")
    return '"' + "".join(out) + '"'


def collection_selection(collection: str) -> str:
    """Every chunk of `collection`."""
    return f"{CHUNK}.collection == {selection_string(collection)}"


def compile_selection(collection: str, expression: FilterExpression) -> str | None:
    """`chunk.collection == "<c>" and (<filter>)`, or None when the filter is not expressible."""
    try:
        if expression.is_empty:
            return collection_selection(collection)
        groups = [
            "(" + " and ".join(_condition(c) for c in group.conditions) + ")"
            for group in expression.groups
        ]
        return f"{collection_selection(collection)} and ({' or '.join(groups)})"
    except NotExpressible:
        return None


def _condition(condition: Condition) -> str:
    if condition.field.startswith(METADATA_PREFIX):
        raise NotExpressible("metadata maps")
    if condition.field == "breadcrumbs":
        return _breadcrumbs(condition)
    field = f"{CHUNK}.{_FIELDS.get(condition.field, condition.field)}"
    if condition.field_type is FieldType.STRING:
        return _string(field, condition.operator, condition.value)
    if condition.field_type in (FieldType.INTEGER, FieldType.TIMESTAMP):
        return _number(field, condition.operator, condition.value)
    raise NotExpressible(f"{condition.field_type} fields")


def _string(field: str, operator: Operator, value: Scalar | tuple[Scalar, ...]) -> str:
    if operator is Operator.CONTAINS:  # "" matches an unset attribute in YQL, null here: YQL
        return f"{field} =~ {_regex(_text(value))}"
    values = [_text(v) for v in _values(value)]
    if any(not v for v in values):
        raise NotExpressible("the empty string")
    either = " or ".join(f"{field} == {selection_string(v)}" for v in values)
    if operator in (Operator.EQUALS, Operator.IN):
        return either if len(values) == 1 else f"({either})"
    if operator in (Operator.NOT_EQUALS, Operator.NOT_IN):
        return f"(not ({either}))"
    raise NotExpressible(f"{operator} on text")


def _breadcrumbs(condition: Condition) -> str:
    if condition.operator is Operator.CONTAINS:
        return f"{CHUNK}.breadcrumb_path =~ {_regex(_text(condition.value))}"
    return _string(f"{CHUNK}.breadcrumb_terms", condition.operator, condition.value)


def _regex(value: str) -> str:
    if not value:
        raise NotExpressible("the empty string")
    if not value.isascii():
        raise NotExpressible("the document selector language is ASCII-only")
    return selection_string("(?i)" + re2.escape(value))


def _number(field: str, operator: Operator, value: Scalar | tuple[Scalar, ...]) -> str:
    if operator in (Operator.IN, Operator.NOT_IN):
        whole = [_integer(v) for v in _values(value)]
        listed = [f"{field} == {v}" for v in whole if v is not None]
        either = "(" + " or ".join(listed) + ")" if listed else "false"
        return either if operator is Operator.IN else f"(not {either})"
    number = _number_value(_single(value))
    if operator in (Operator.EQUALS, Operator.NOT_EQUALS):
        whole_number = _integer(number)
        equal = f"{field} == {whole_number}" if whole_number is not None else "false"
        return equal if operator is Operator.EQUALS else f"(not ({equal}))"
    if operator not in _ORDERING:
        raise NotExpressible(f"{operator} on numbers")
    up = operator in (Operator.GREATER_THAN, Operator.LESS_THAN_OR_EQUAL)
    bound = math.floor(number) if up else math.ceil(number)
    if not _INT64_MIN <= bound <= _INT64_MAX:
        raise NotExpressible("a bound beyond 64 bits")
    return f"({field} != null and {field} {_ORDERING[operator]} {bound})"


def _number_value(value: Scalar) -> float | int:
    if isinstance(value, datetime):
        return epoch_microseconds(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NotExpressible("a non-numeric value")
    if isinstance(value, float) and not math.isfinite(value):
        raise NotExpressible("a non-finite number")
    return value


def _integer(value: Scalar) -> int | None:
    """The integer `value` equals, or None when no integer does (a fractional number)."""
    number = _number_value(value)
    if isinstance(number, float):
        if not number.is_integer():
            return None
        number = int(number)
    if not _INT64_MIN <= number <= _INT64_MAX:
        return None
    return number


def _values(value: Scalar | tuple[Scalar, ...]) -> Sequence[Scalar]:
    return value if isinstance(value, tuple) else (value,)


def _single(value: Scalar | tuple[Scalar, ...]) -> Scalar:
    if isinstance(value, tuple):
        raise NotExpressible("a list where one value is expected")
    return value


def _text(value: Scalar | tuple[Scalar, ...]) -> str:
    if not isinstance(value, str):
        raise NotExpressible("a non-string value")
    return value
