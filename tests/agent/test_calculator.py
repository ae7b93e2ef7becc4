"""The `calculate` tool's parser: arithmetic evaluated exactly, everything else refused within
its bounds."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.agent.calculator import (
    FUNCTION_NAMES,
    MAX_EXPRESSION_CHARS,
    MAX_MAGNITUDE,
    MAX_ROUND_DIGITS,
    CalculationError,
    calculate,
    format_number,
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1250 - 980", "270"),
        ("(1250 - 980) / 980 * 100", "27.5510204082"),
        ("0.1 + 0.2", "0.3"),
        ("2 ** 10", "1024"),
        ("2 ^ 10", "1024"),
        ("7 // 2 + 7 % 2", "4"),
        ("-3 + +4", "1"),
        ("round(2.71828, 2)", "2.72"),
        ("max(3, 9, 4) - min(3, 9, 4)", "6"),
        ("sqrt(16) + abs(-2) + floor(2.7) + ceil(2.1)", "11"),
        ("log(1000, 10)", "3"),
        ("1e3 / 8", "125"),
    ],
)
def test_arithmetic_is_evaluated_exactly(expression: str, expected: str) -> None:
    assert format_number(calculate(expression)) == expected


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os').system('true')", "unknown function"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("x + 1", "not allowed"),
        ("(1).__class__", "not allowed"),
        ("'a' * 3", "not a number"),
        ("True + 1", "not a number"),
        ("[1, 2]", "not allowed"),
        ("1 if 2 else 3", "not allowed"),
        ("lambda: 1", "not allowed"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("1 +", "not an arithmetic expression"),
        ("", "empty"),
        ("sqrt(-1)", "math domain error"),
        ("(-8) ** 0.5", "not a real number"),
        ("sqrt(1, 2)", "sqrt takes 1 to 1 arguments, not 2"),
        ("round(x=1)", "unknown function 'round'"),
        ("1 < 2", "not allowed"),
        ("1 << 2", "not supported"),
    ],
)
def test_anything_but_arithmetic_is_refused_with_a_reason(expression: str, reason: str) -> None:
    with pytest.raises(CalculationError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        calculate(expression)


@pytest.mark.parametrize(
    "expression",
    ["9 ** 9 ** 9", "10 ** 1001", "2 ** 400", "1e99 * 1e99", "10 ** 50 * 10 ** 51", "1e308 * 10"],
)
def test_huge_values_are_refused_before_they_are_computed(expression: str) -> None:
    started = time.thread_time()  # CPU, not wall time: load stretches only the latter
    with pytest.raises(CalculationError, match=r"exceeds|finite"):
        calculate(expression)
    assert time.thread_time() - started < 0.1


def test_long_and_deeply_nested_expressions_are_refused_by_size() -> None:
    with pytest.raises(CalculationError, match=f"at most {MAX_EXPRESSION_CHARS}"):
        calculate("1+" * 300 + "1")
    with pytest.raises(CalculationError, match="parts; at most"):
        calculate("+".join(["1"] * 150))
    with pytest.raises(CalculationError):
        calculate("(" * 240 + "1" + ")" * 240)


def test_floats_show_twelve_significant_digits_and_integers_exactly() -> None:
    assert format_number(10**20) == "100000000000000000000"
    assert format_number(2 / 3) == "0.666666666667"
    assert format_number(1e20) == "1e+20"


def test_round_with_a_billion_digits_is_refused_at_once() -> None:
    """`round(1, -10**9)` made Python compute 10**(10**9) and held the event loop for minutes."""
    for expression in ("round(1, -10**9)", "round(10**99, -10**9)", "round(1.5, 10**9)"):
        started = time.thread_time()
        with pytest.raises(CalculationError, match="digits"):
            calculate(expression)
        assert time.thread_time() - started < 0.1


def test_round_keeps_its_meaning_within_the_digits_bound() -> None:
    assert calculate("round(123456, -2)") == 123500
    assert calculate(f"round(10**99, -{MAX_ROUND_DIGITS})") == 0
    assert calculate(f"round(2.5, {MAX_ROUND_DIGITS})") == 2.5


_EXTREMES = [
    "10**9",
    "-10**9",
    "-(10**7)",
    "10**99",
    "10**100",
    "9**9**9",
    "1e308",
    "1e-308",
    "-0.0",
]
"""Literals at and past the bounds, drawn as often as ordinary numbers."""
_LITERALS = st.one_of(
    st.integers(-(10**12), 10**12).map(str),
    st.sampled_from(_EXTREMES),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["x", "'a'", "True", "[1]", "nan", "inf"]),
)
_OPERATORS = st.sampled_from(["+", "-", "*", "/", "//", "%", "**", "^", "<<"])


def _expressions(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(children, _OPERATORS, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
    unary = st.tuples(st.sampled_from(["-", "+"]), children).map("".join)
    call = st.tuples(
        st.sampled_from([*FUNCTION_NAMES, "pow", "factorial"]),
        st.lists(st.one_of(children, st.sampled_from(_EXTREMES)), min_size=0, max_size=3),
    ).map(lambda t: f"{t[0]}({', '.join(t[1])})")
    return st.one_of(binary, unary, call)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.recursive(_LITERALS, _expressions, max_leaves=12))
def test_every_expression_of_the_grammar_finishes_fast_or_is_refused(expression: str) -> None:
    # CPU time of this thread, not wall time: an expression that makes the calculator compute
    # (9**9**9) takes seconds of CPU whatever the load; a busy machine only stretches wall time
    # (this failed once at load ~3 with wall time).
    started = time.thread_time()
    try:
        value = calculate(expression)
    except CalculationError:
        pass
    else:
        assert isinstance(value, int | float)
        assert abs(value) <= MAX_MAGNITUDE
        format_number(value)
    assert time.thread_time() - started < 0.25
