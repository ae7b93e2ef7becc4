"""Compiles a validated `FilterExpression` into a YQL `where` clause over the `chunk` schema.

This module alone renders values into YQL, so no value can change a query's shape: strings are
double-quoted with `\\` and `"` escaped and control characters written as escapes (the `STRING`
rule of Vespa's `yqlplus.g4`); `contains` becomes a regex (`matches`) whose pattern is the value
passed through RE2's QuoteMeta behind `(?i)`, then quoted as a string; longs carry the `L` suffix;
field names come only from the schema (`package`). Vespa's regex is RE2 with partial matching, so
`f matches "(?i)<quoted>"` is exactly a case-insensitive substring test.

Semantics kept identical to the embedded engine (`tests/search_tool/filter_cases.py`):
`not_equals` / `not_in` are `!(…)`, which also keeps chunks lacking the field; metadata keys are
looked up with `sameElement` on typed maps, so a missing key is missing; an integer field compared
with a fractional value is normalised (`> 2022.5` → `> 2022`, `= 2022.5` → `false`); an empty
string equals an unset string, as in the embedded engine, through `!(f matches ".")`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

import re2

from services.search_tool.documents import epoch_microseconds
from services.search_tool.engine.vespa.package import METADATA_MAPS, TEXT_ATTRIBUTE_COPIES
from services.search_tool.filters import (
    METADATA_PREFIX,
    Condition,
    FieldType,
    FilterExpression,
    Operator,
    Scalar,
)

TRUE = "true"
FALSE = "false"
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_FIELDS = {"id": "chunk_id", **TEXT_ATTRIBUTE_COPIES}
_LONG_FIELDS = frozenset({"created_at", "updated_at"})
_ORDERING = {
    Operator.GREATER_THAN: ">",
    Operator.GREATER_THAN_OR_EQUAL: ">=",
    Operator.LESS_THAN: "<",
    Operator.LESS_THAN_OR_EQUAL: "<=",
}
_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
}


def string(value: str) -> str:
    """A YQL string literal holding exactly `value`."""
    out = []
    for char in value:
        escaped = _ESCAPES.get(char)
        if escaped is None and (ord(char) < 0x20 or ord(char) == 0x7F):
            escaped = f"\\u{ord(char):04x}"
        out.append(escaped or char)
    return '"' + "".join(out) + '"'


def substring_pattern(value: str) -> str:
    """The RE2 pattern that finds `value` anywhere, ignoring case."""
    return "(?i)" + re2.escape(value)


def vespa_field(field: str) -> str:
    """The Vespa field a Quarry filter field compiles to."""
    if field.startswith(METADATA_PREFIX):
        return "meta_"
    if field == "breadcrumbs":
        return "breadcrumb_"
    return _FIELDS.get(field, field)


def compile_filter(expression: FilterExpression) -> str:
    """A YQL boolean expression; `true` when the expression matches everything."""
    if expression.is_empty:
        return TRUE
    groups = [_group([compile_condition(c) for c in g.conditions]) for g in expression.groups]
    return groups[0] if len(groups) == 1 else "(" + " or ".join(groups) + ")"


def where(collection: str, expression: FilterExpression, *retrieval: str) -> str:
    """`collection contains "<c>" and (<filter>) and (<retrieval>)…`: what every query selects."""
    parts = [f"collection contains {string(collection)}"]
    compiled = compile_filter(expression)
    if compiled != TRUE:
        parts.append(compiled)
    parts.extend(retrieval)
    return " and ".join(parts)


def compile_condition(condition: Condition) -> str:
    """One condition as a YQL boolean expression."""
    if condition.field.startswith(METADATA_PREFIX):
        return _metadata(condition)
    if condition.field == "breadcrumbs":
        return _breadcrumbs(condition)
    field = _FIELDS.get(condition.field, condition.field)
    if condition.field_type is FieldType.STRING:
        return _string_condition(field, condition.operator, condition.value)
    if condition.field_type is FieldType.TIMESTAMP:
        return _number_condition(field, condition.operator, condition.value, long=True)
    if condition.field_type is FieldType.INTEGER:
        return _integer_condition(field, condition.operator, condition.value, long=False)
    raise ValueError(f"{condition.field} has no Vespa field of type {condition.field_type}")


def _group(conditions: Sequence[str]) -> str:
    # an `or` operand may not be a bare negation: a group of negations starts from `true`
    if all(c.startswith("!(") for c in conditions):
        conditions = [TRUE, *conditions]
    return "(" + " and ".join(conditions) + ")"


def _not(expression: str) -> str:
    if expression == TRUE:
        return FALSE
    if expression == FALSE:
        return TRUE
    return f"!({expression})"


def _string_condition(field: str, operator: Operator, value: Scalar | tuple[Scalar, ...]) -> str:
    if operator is Operator.CONTAINS:
        return f"{field} matches {string(substring_pattern(_text(value)))}"
    if operator in (Operator.EQUALS, Operator.NOT_EQUALS):
        equal = _string_equals(field, _text(value))
        return equal if operator is Operator.EQUALS else _not(equal)
    if operator in (Operator.IN, Operator.NOT_IN):
        values = [_text(v) for v in _values(value)]
        words = [v for v in values if v]
        parts = [f"{field} in ({', '.join(string(v) for v in words)})"] if words else []
        if len(words) < len(values):
            parts.append(_string_equals(field, ""))
        either = parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"
        return either if operator is Operator.IN else _not(either)
    raise ValueError(f"{operator} does not apply to text")


def _string_equals(field: str, value: str) -> str:
    # an unset string attribute reads as "": equal to "" means "no character at all"
    return f"{field} contains {string(value)}" if value else f'!({field} matches ".")'


def _breadcrumbs(condition: Condition) -> str:
    operator, value = condition.operator, condition.value
    if operator is Operator.CONTAINS:
        return f"breadcrumb_path matches {string(substring_pattern(_text(value)))}"
    if operator in (Operator.EQUALS, Operator.NOT_EQUALS):
        found = f"breadcrumb_terms contains {string(_text(value))}"
        return found if operator is Operator.EQUALS else _not(found)
    if operator in (Operator.IN, Operator.NOT_IN):
        found = f"breadcrumb_terms in ({', '.join(string(_text(v)) for v in _values(value))})"
        return found if operator is Operator.IN else _not(found)
    raise ValueError(f"{operator} does not apply to breadcrumbs")


def _metadata(condition: Condition) -> str:
    """`<map> contains sameElement(key contains "<k>", <test>)`, one per alternative value."""
    key = condition.field[len(METADATA_PREFIX) :]
    field_map = METADATA_MAPS[condition.field_type.value]
    operator, value = condition.operator, condition.value
    negated = operator in (Operator.NOT_EQUALS, Operator.NOT_IN)
    positive = {Operator.NOT_EQUALS: Operator.EQUALS, Operator.NOT_IN: Operator.IN}.get(
        operator, operator
    )
    tests = _element_tests(condition.field_type, positive, value)
    element = f"{field_map} contains sameElement(key contains {string(key)}"
    if tests == [TRUE]:
        found = element + ")"
    elif tests == [FALSE]:
        found = FALSE
    else:
        alternatives = [f"{element}, {test})" for test in tests]
        found = alternatives[0] if len(alternatives) == 1 else f"({' or '.join(alternatives)})"
    return _not(found) if negated else found


def _element_tests(
    field_type: FieldType, operator: Operator, value: Scalar | tuple[Scalar, ...]
) -> list[str]:
    """Tests on a map element's `value`, any of which must hold; `[true]`: the key is there,
    `[false]`: nothing can match."""
    if operator is Operator.IN:
        # one sameElement per value: the YQL reference documents comparisons inside
        # sameElement (`en/reference/querying/yql.html#sameelement`), not `in`
        alternatives = [
            t for v in _values(value) for t in _element_tests(field_type, Operator.EQUALS, v)
        ]
        return [t for t in alternatives if t != FALSE] or [FALSE]
    if field_type is FieldType.STRING:
        if operator is Operator.CONTAINS:
            return [f"value matches {string(substring_pattern(_text(value)))}"]
        return [f"value contains {string(_text(value))}"]  # "" is a real value in a map
    if field_type is FieldType.BOOL:
        return [f"value = {_literal(_single(value))}"]
    if field_type is FieldType.DOUBLE:
        return [_number_condition("value", operator, value, long=False)]
    return [_integer_condition("value", operator, value, long=True)]


def _number_condition(
    field: str, operator: Operator, value: Scalar | tuple[Scalar, ...], *, long: bool
) -> str:
    """Doubles (and timestamps, as epoch microseconds): `in` is not defined on doubles in YQL,
    so a list becomes an `or` of equalities."""
    if operator in (Operator.IN, Operator.NOT_IN):
        if long:
            listed = f"{field} in ({', '.join(_literal(v, long=True) for v in _values(value))})"
        else:
            listed = " or ".join(f"{field} = {_literal(v)}" for v in _values(value))
            listed = listed if " or " not in listed else f"({listed})"
        return listed if operator is Operator.IN else _not(listed)
    if operator is Operator.NOT_EQUALS:
        return _not(f"{field} = {_literal(_single(value), long=long)}")
    if operator is Operator.EQUALS:
        return f"{field} = {_literal(_single(value), long=long)}"
    return f"{field} {_ORDERING[operator]} {_literal(_single(value), long=long)}"


def _integer_condition(
    field: str, operator: Operator, value: Scalar | tuple[Scalar, ...], *, long: bool
) -> str:
    """Integer fields compared with exact integers; a fractional (or out-of-range) value is turned
    into the integer comparison that selects the same values."""
    if operator in (Operator.IN, Operator.NOT_IN):
        whole = [int(v) for v in _values(value) if isinstance(v, int | float) and _is_integer(v)]
        listed = f"{field} in ({', '.join(_int(v, long) for v in whole)})" if whole else FALSE
        return listed if operator is Operator.IN else _not(listed)
    number = _single(value)
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise ValueError(f"{field} compares numbers")
    if operator in (Operator.EQUALS, Operator.NOT_EQUALS):
        equal = f"{field} = {_int(int(number), long)}" if _is_integer(number) else FALSE
        return equal if operator is Operator.EQUALS else _not(equal)
    if operator in (Operator.GREATER_THAN, Operator.LESS_THAN_OR_EQUAL):
        bound = math.floor(number)
    else:
        bound = math.ceil(number)
    if bound > _INT64_MAX:
        return (
            FALSE
            if operator in (Operator.GREATER_THAN, Operator.GREATER_THAN_OR_EQUAL)
            else (f"{field} >= {_int(_INT64_MIN, long)}")
        )
    if bound < _INT64_MIN:
        return (
            FALSE
            if operator in (Operator.LESS_THAN, Operator.LESS_THAN_OR_EQUAL)
            else (f"{field} >= {_int(_INT64_MIN, long)}")
        )
    return f"{field} {_ORDERING[operator]} {_int(bound, long)}"


def _is_integer(value: Scalar) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return _INT64_MIN <= value <= _INT64_MAX
    return isinstance(value, float) and value.is_integer() and _INT64_MIN <= value <= _INT64_MAX


def _int(value: int, long: bool) -> str:
    # YQL reads numbers as 32-bit unless suffixed with L
    return f"{value}L" if long or not -(2**31) <= value < 2**31 else str(value)


def _literal(value: Scalar, *, long: bool = False) -> str:
    if isinstance(value, bool):
        return TRUE if value else FALSE
    if isinstance(value, datetime):
        return f"{epoch_microseconds(value)}L"
    if isinstance(value, int):
        return _int(value, long)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite numbers cannot be compared")
        return repr(value)
    raise ValueError("strings are rendered by string()")


def _values(value: Scalar | tuple[Scalar, ...]) -> tuple[Scalar, ...]:
    return value if isinstance(value, tuple) else (value,)


def _single(value: Scalar | tuple[Scalar, ...]) -> Scalar:
    if isinstance(value, tuple):
        raise ValueError("this operator takes one value, not a list")
    return value


def _text(value: Scalar | tuple[Scalar, ...]) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value
