"""Safe arithmetic for the `calculate` tool: a whitelist walk over Python's expression grammar.

The text is parsed (`ast.parse`, never `eval`), and only numbers, `+ - * / // % **`, parentheses
and a few functions are evaluated. Anything else is a `CalculationError` whose message tells the
model what to fix.

Every operation is bounded by construction, because a calculation runs on the agent's event loop
and one slow operation would stop every run the process serves. The text has at most
`MAX_EXPRESSION_CHARS` characters and `MAX_NODES` parts; every value the walk produces (a literal,
an operand, an intermediate or final result) is at most `MAX_MAGNITUDE`, i.e. an integer of at most
333 bits, so `+ - * / // %`, `abs`, `min`, `max`, `sqrt`, `floor`, `ceil` and `log` each cost
microseconds. The two operations whose cost grows with an argument other than the operands' size
are checked before they run: `**` by the size of its result (`MAX_EXPONENT`, then the magnitude
estimate), and `round` by its digits (`MAX_ROUND_DIGITS`; Python's `round(1, -10**9)` computes
`10**(10**9)`). As a last guard the walk has a time budget, `MAX_EVALUATION_S`, checked before every
operation.
"""

from __future__ import annotations

import ast
import math
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass

Number = int | float

MAX_EXPRESSION_CHARS = 500
MAX_NODES = 200
MAX_EXPONENT = 1_000
MAX_MAGNITUDE = 1e100
"""Results (and intermediate values) beyond this are refused rather than computed."""
MAX_ROUND_DIGITS = 100
"""`round`'s digits, either sign: past the 100 digits of `MAX_MAGNITUDE` they change nothing."""
MAX_EVALUATION_S = 0.5
"""The walk's time budget, checked before each operation (the bounds above keep it far away)."""


class CalculationError(ValueError):
    """An expression the calculator refuses; the message says why."""


@dataclass(frozen=True)
class _Function:
    call: Callable[..., Number]
    arity: tuple[int, int]
    """Fewest and most arguments."""


_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_FUNCTIONS: dict[str, _Function] = {
    "abs": _Function(abs, (1, 1)),
    "round": _Function(round, (1, 2)),
    "min": _Function(min, (1, 50)),
    "max": _Function(max, (1, 50)),
    "sqrt": _Function(math.sqrt, (1, 1)),
    "floor": _Function(math.floor, (1, 1)),
    "ceil": _Function(math.ceil, (1, 1)),
    "log": _Function(math.log, (1, 2)),
}
FUNCTION_NAMES = tuple(_FUNCTIONS)


def calculate(expression: str) -> Number:
    """The value of `expression`, or `CalculationError`."""
    text = expression.strip().replace("^", "**")
    if not text:
        raise CalculationError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculationError(
            f"the expression has {len(text)} characters; at most {MAX_EXPRESSION_CHARS}"
        )
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as error:
        raise CalculationError(f"not an arithmetic expression ({_reason(error)})") from None
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES:
        raise CalculationError(f"the expression has {nodes} parts; at most {MAX_NODES}")
    try:
        return _bounded(_Walk(time.monotonic() + MAX_EVALUATION_S).evaluate(tree.body))
    except ZeroDivisionError:
        raise CalculationError("division by zero") from None
    except (OverflowError, RecursionError):
        raise CalculationError(f"a value exceeds {MAX_MAGNITUDE:g}") from None
    except (ValueError, TypeError) as error:
        raise CalculationError(str(error)) from None


def format_number(value: Number) -> str:
    """Integers exactly; floats to 12 significant digits (`0.1 + 0.2` shows as 0.3)."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.12g}"


class _Walk:
    """One evaluation: the tree walked depth first within a deadline."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def evaluate(self, node: ast.expr) -> Number:
        if time.monotonic() > self._deadline:
            raise CalculationError(f"the calculation took longer than {MAX_EVALUATION_S:g} s")
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                raise CalculationError(f"{node.value!r} is not a number")
            return _bounded(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            operand = self.evaluate(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            left, right = self.evaluate(node.left), self.evaluate(node.right)
            if isinstance(node.op, ast.Pow):
                return _power(left, right)
            apply = _BINARY.get(type(node.op))
            if apply is None:
                raise CalculationError(f"the operator {type(node.op).__name__} is not supported")
            return _bounded(apply(left, right))
        if isinstance(node, ast.Call):
            return self._call(node)
        raise CalculationError(
            f"{ast.unparse(node)!r} is not allowed: use numbers, + - * / // % ** ( ) and "
            + ", ".join(FUNCTION_NAMES)
        )

    def _call(self, node: ast.Call) -> Number:
        name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
        function = _FUNCTIONS.get(name)
        if function is None or node.keywords:
            raise CalculationError(
                f"unknown function {name!r}; the functions are " + ", ".join(FUNCTION_NAMES)
            )
        fewest, most = function.arity
        if not fewest <= len(node.args) <= most:
            raise CalculationError(
                f"{name} takes {fewest} to {most} arguments, not {len(node.args)}"
            )
        arguments = [self.evaluate(a) for a in node.args]
        if name == "round" and len(arguments) == 2:
            arguments[1] = _round_digits(arguments[1])
        return _bounded(function.call(*arguments))


def _round_digits(digits: Number) -> int:
    """`round`'s second argument as an int, refused beyond `MAX_ROUND_DIGITS` either way."""
    if abs(digits) > MAX_ROUND_DIGITS:
        raise CalculationError(
            f"round's digits {format_number(digits)} are beyond ±{MAX_ROUND_DIGITS}"
        )
    return int(digits)


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculationError(f"the exponent {exponent} exceeds {MAX_EXPONENT}")
    if base != 0 and abs(base) != 1 and abs(exponent) * math.log10(abs(base)) > 100:
        raise CalculationError(f"a value exceeds {MAX_MAGNITUDE:g}")
    result = base**exponent
    if isinstance(result, complex):
        raise CalculationError("a negative number to a fractional power is not a real number")
    return _bounded(result)


def _bounded(value: Number) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("the result is not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculationError(f"a value exceeds {MAX_MAGNITUDE:g}")
    return value


def _reason(error: BaseException) -> str:
    if isinstance(error, SyntaxError):
        return error.msg
    return type(error).__name__
