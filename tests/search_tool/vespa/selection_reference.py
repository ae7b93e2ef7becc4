"""A parser and evaluator for the document-selection subset `selection.py` emits, written from
`en/reference/writing/document-selector-language.html`, not from the compiler:

* grammar: `or` / `and` / `not` (that precedence), parentheses, `true` / `false`, comparisons
  `== != < <= > >= =~` between `<doctype>.<field>`, strings, numbers and `null`; strings are
  `"…"` with `\\t \\n \\f \\r \\"` and `\\x##` escapes ("Grammar - EBNF");
* values: a field the document lacks is `null`; an array compares with `==` element-wise ("at
  least one element that matches");
* comparisons: `==` / `!=` are defined with null; any other operator with a null operand, or with
  a string against a number, is *invalid* ("Comparisons with missing fields");
* three-valued logic: AND is invalid if no operand is false and one is invalid, OR invalid if
  none is true and one is invalid, NOT of invalid is invalid; an invalid root does not match;
* `=~` is a regex search ("matches if the regular expression … matches the string"; `^`/`$`
  anchor), run with the real RE2 engine (`google-re2`).

It models Vespa; only a live Vespa (the conformance suite) checks the model."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import re2

INVALID = "invalid"
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\[tnfr"]|\\x[0-9a-fA-F]{2})*")
     |(?P<number>-?\d+(?:\.\d+)?)
     |(?P<op>==|!=|>=|<=|=~|>|<)
     |(?P<paren>[()])
     |(?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.VERBOSE,
)
_ESCAPES = {"t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"'}


class SelectionSyntaxError(ValueError):
    """Not in the subset."""


@dataclass(frozen=True)
class Field:
    doctype: str
    name: str


@dataclass(frozen=True)
class Value:
    value: Any  # str | int | float | None


@dataclass(frozen=True)
class Comparison:
    left: Field | Value
    op: str
    right: Field | Value


@dataclass(frozen=True)
class Logic:
    op: str  # and, or, not, const
    operands: tuple[Any, ...]


def _tokens(text: str) -> list[tuple[str, str]]:
    out, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None:
            raise SelectionSyntaxError(f"unexpected input at {position}: {text[position:][:20]!r}")
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
        position = match.end()
    out.append(("end", ""))
    return out


def unquote(token: str) -> str:
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            if body[i + 1] == "x":
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
            else:
                out.append(_ESCAPES[body[i + 1]])
                i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at]

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def expression(self) -> Any:
        operands = [self.conjunction()]
        while self.peek() == ("word", "or"):
            self.take()
            operands.append(self.conjunction())
        return operands[0] if len(operands) == 1 else Logic("or", tuple(operands))

    def conjunction(self) -> Any:
        operands = [self.negation()]
        while self.peek() == ("word", "and"):
            self.take()
            operands.append(self.negation())
        return operands[0] if len(operands) == 1 else Logic("and", tuple(operands))

    def negation(self) -> Any:
        if self.peek() == ("word", "not"):
            self.take()
            return Logic("not", (self.negation(),))
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.peek()
        if (kind, text) == ("paren", "("):
            self.take()
            inner = self.expression()
            if self.take() != ("paren", ")"):
                raise SelectionSyntaxError("unbalanced parentheses")
            return inner
        if kind == "word" and text in ("true", "false"):
            self.take()
            return Logic("const", (text == "true",))
        left = self.value()
        if self.peek()[0] != "op":
            raise SelectionSyntaxError(f"expected a comparison after {text!r}")
        op = self.take()[1]
        return Comparison(left, op, self.value())

    def value(self) -> Field | Value:
        kind, text = self.take()
        if kind == "string":
            return Value(unquote(text))
        if kind == "number":
            return Value(float(text) if "." in text else int(text))
        if kind == "word" and text == "null":
            return Value(None)
        if kind == "word" and "." in text:
            doctype, name = text.split(".", 1)
            return Field(doctype, name)
        raise SelectionSyntaxError(f"unexpected {text!r}")


def parse(text: str) -> Any:
    parser = _Parser(text)
    node = parser.expression()
    if parser.peek()[0] != "end":
        raise SelectionSyntaxError(f"trailing input {parser.peek()[1]!r}")
    return node


def matches(node: Any, document: dict[str, Any], doctype: str = "chunk") -> bool:
    """Whether `document` is selected (an invalid root is not)."""
    return _evaluate(node, document, doctype) is True


def _evaluate(node: Any, document: dict[str, Any], doctype: str) -> bool | str:
    if isinstance(node, Logic):
        if node.op == "const":
            return bool(node.operands[0])
        values = [_evaluate(o, document, doctype) for o in node.operands]
        if node.op == "not":
            return INVALID if values[0] == INVALID else not values[0]
        if node.op == "and":
            if any(v is False for v in values):
                return False
            return INVALID if INVALID in values else True
        if any(v is True for v in values):
            return True
        return INVALID if INVALID in values else False
    return _compare(node, document, doctype)


def _resolve(operand: Field | Value, document: dict[str, Any], doctype: str) -> Any:
    if isinstance(operand, Value):
        return operand.value
    if operand.doctype != doctype:
        return None
    return document.get(operand.name)


def _compare(node: Comparison, document: dict[str, Any], doctype: str) -> bool | str:
    left = _resolve(node.left, document, doctype)
    right = _resolve(node.right, document, doctype)
    if node.op in ("==", "!="):
        if isinstance(left, list):
            equal = any(_equal(element, right) for element in left)
        else:
            equal = _equal(left, right)
        return equal if node.op == "==" else not equal
    if left is None or right is None or isinstance(left, list):
        return INVALID
    if node.op == "=~":
        if not (isinstance(left, str) and isinstance(right, str)):
            return False  # "The regex operator will never match anything else"
        return re2.search(right, left) is not None
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right))
    if not numeric and not all(isinstance(v, str) for v in (left, right)):
        return INVALID
    return bool(
        {
            ">": left > right,
            "<": left < right,
            ">=": left >= right,
            "<=": left <= right,
        }[node.op]
    )


def _equal(left: Any, right: Any) -> bool:
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return float(left) == float(right)
    return bool(type(left) is type(right) and left == right)
