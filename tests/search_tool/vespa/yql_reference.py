"""A parser and a reference evaluator for the YQL subset Quarry emits (layer L2).

The parser is written from the documented grammar (`en/reference/querying/yql.html`; strings per
the `STRING` rule of Vespa's `yqlplus.g4`: `"…"` with `\\b \\t \\n \\f \\r \\" \\' \\\\ \\/` and
`\\uXXXX` escapes), not from the compiler: every compiled query must parse, and every value must
come back out of a string literal unchanged — values never become syntax.

The evaluator applies Vespa's documented semantics to documents shaped as the feeder writes them:
`contains` on a cased attribute is whole-value equality (any element of an array); `matches` is
RE2 partial matching (the real RE2 engine, `google-re2`); an unset string attribute reads as "";
numeric comparisons never match an unset value; `in` matches any element; `!` keeps documents
lacking the field; `sameElement` needs one map entry / struct element satisfying every part.
It models Vespa; it is not Vespa. What it proves is that the compiler plus this model give the
engine-independent semantics of `filter_cases.py`; only the live suite proves the model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import re2

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:\\.|[^"\\])*")
     |(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?L?)
     |(?P<word>[A-Za-z_][A-Za-z0-9_.]*)
     |(?P<param>@[A-Za-z_][A-Za-z0-9_]*)
     |(?P<op><=|>=|[(){}\[\],:<>=!])
    )""",
    re.VERBOSE,
)
_SIMPLE_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "'": "'"}
_SIMPLE_ESCAPES |= {"\\": "\\", "/": "/"}


class YqlSyntaxError(ValueError):
    """The text is not in the YQL subset."""


@dataclass(frozen=True)
class Literal:
    value: str | int | float | bool


@dataclass(frozen=True)
class Compare:
    field: str
    op: str  # contains, matches, in, =, <, >, <=, >=
    value: Any  # str | int | float | bool, or a tuple for `in`


@dataclass(frozen=True)
class SameElement:
    field: str
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class And:
    operands: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    operands: tuple[Node, ...]


@dataclass(frozen=True)
class Constant:
    value: bool


@dataclass(frozen=True)
class Retrieval:
    """`nearestNeighbor(...)` or `<fieldset> contains text(...)`: ranked retrieval, with its
    annotations; the evaluator leaves it out (it decides rank, not the filter)."""

    operator: str
    arguments: tuple[str, ...]
    annotations: Mapping[str, Any]


@dataclass(frozen=True)
class Rank:
    """`rank(a, b, …)`: only `a` decides what matches; the others only add rank features
    (`en/reference/querying/yql.html#rank`)."""

    operands: tuple[Node, ...]


Node: TypeAlias = Compare | SameElement | Not | And | Or | Constant | Retrieval | Rank


@dataclass(frozen=True)
class Query:
    select: tuple[str, ...]
    source: str
    where: Node


def unquote(token: str) -> str:
    """The value of a YQL string literal token."""
    body, out, i = token[1:-1], [], 0
    while i < len(body):
        char = body[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        escape = body[i + 1]
        if escape == "u":
            out.append(chr(int(body[i + 2 : i + 6], 16)))
            i += 6
        elif escape in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[escape])
            i += 2
        else:
            raise YqlSyntaxError(f"unknown escape \\{escape}")
    return "".join(out)


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if not match or match.end() == position:
            raise YqlSyntaxError(
                f"unexpected input at {position}: {text[position : position + 20]!r}"
            )
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.i = 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        index = self.i + offset
        return self.tokens[index] if index < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        token_kind, token = self.peek()
        if (value is not None and token != value) or (kind is not None and token_kind != kind):
            raise YqlSyntaxError(f"expected {value or kind}, found {token!r}")
        self.i += 1
        return token

    def query(self) -> Query:
        self.take("select")
        fields = [self.take(kind="word")]
        while self.peek()[1] == ",":
            self.take(",")
            fields.append(self.take(kind="word"))
        self.take("from")
        source = self.take(kind="word")
        self.take("where")
        where = self.expression()
        if self.peek()[0] != "end":
            raise YqlSyntaxError(f"trailing input {self.peek()[1]!r}")
        return Query(tuple(fields), source, where)

    def expression(self) -> Node:
        operands = [self.conjunction()]
        while self.peek()[1] == "or":
            self.take("or")
            operands.append(self.conjunction())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def conjunction(self) -> Node:
        operands = [self.unary()]
        while self.peek()[1] == "and":
            self.take("and")
            operands.append(self.unary())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def unary(self) -> Node:
        token = self.peek()[1]
        if token == "!":
            self.take("!")
            self.take("(")
            inner = self.expression()
            self.take(")")
            return Not(inner)
        if token == "(":
            self.take("(")
            node = self.retrieval(field=None) if self.peek()[1] == "{" else self.expression()
            self.take(")")
            return node
        if token in ("true", "false"):
            self.take()
            return Constant(token == "true")
        if token == "rank" and self.peek(1)[1] == "(":
            self.take("rank")
            self.take("(")
            operands = [self.expression()]
            while self.peek()[1] == ",":
                self.take(",")
                operands.append(self.expression())
            self.take(")")
            return Rank(tuple(operands))
        return self.predicate()

    def predicate(self) -> Node:
        field = self.take(kind="word")
        op = self.take()
        if op == "contains":
            if self.peek()[1] == "sameElement":
                self.take("sameElement")
                self.take("(")
                parts = [self.expression()]
                while self.peek()[1] == ",":
                    self.take(",")
                    parts.append(self.expression())
                self.take(")")
                return SameElement(field, tuple(parts))
            if self.peek()[1] == "(":
                self.take("(")
                node = self.retrieval(field=field)
                self.take(")")
                return node
            return Compare(field, "contains", unquote(self.take(kind="string")))
        if op == "matches":
            return Compare(field, "matches", unquote(self.take(kind="string")))
        if op == "in":
            self.take("(")
            values = [self.literal()]
            while self.peek()[1] == ",":
                self.take(",")
                values.append(self.literal())
            self.take(")")
            return Compare(field, "in", tuple(values))
        if op in ("=", "<", ">", "<=", ">="):
            return Compare(field, op, self.literal())
        raise YqlSyntaxError(f"unknown operator {op!r}")

    def literal(self) -> str | int | float | bool:
        kind, token = self.peek()
        self.i += 1
        if kind == "string":
            return unquote(token)
        if token in ("true", "false"):
            return token == "true"
        if kind == "number":
            if token.endswith("L"):
                return int(token[:-1])
            if re.fullmatch(r"-?\d+", token):
                value = int(token)
                if not -(2**31) <= value < 2**31:
                    raise YqlSyntaxError(f"{token} needs the L suffix (32-bit range)")
                return value
            return float(token)
        raise YqlSyntaxError(f"expected a literal, found {token!r}")

    def retrieval(self, field: str | None) -> Retrieval:
        annotations = self.annotations()
        operator = self.take(kind="word")
        self.take("(")
        arguments = [self.take()]
        while self.peek()[1] == ",":
            self.take(",")
            arguments.append(self.take())
        self.take(")")
        if operator == "nearestNeighbor" and field is None:
            return Retrieval(operator, tuple(arguments), annotations)
        if operator == "text" and field is not None:
            return Retrieval(operator, (field, *arguments), annotations)
        raise YqlSyntaxError(f"unexpected retrieval {operator}")

    def annotations(self) -> dict[str, Any]:
        self.take("{")
        found: dict[str, Any] = {}
        while True:
            key = self.take(kind="word")
            self.take(":")
            found[key] = self.literal()
            if self.peek()[1] == "}":
                self.take("}")
                return found
            self.take(",")


def parse_query(text: str) -> Query:
    return _Parser(text).query()


def parse_expression(text: str) -> Node:
    parser = _Parser(text)
    node = parser.expression()
    if parser.peek()[0] != "end":
        raise YqlSyntaxError(f"trailing input {parser.peek()[1]!r}")
    return node


def string_literals(node: Node) -> list[str]:
    """Every string value in `node`, in order."""
    if isinstance(node, Compare):
        values = node.value if isinstance(node.value, tuple) else (node.value,)
        return [v for v in values if isinstance(v, str)]
    if isinstance(node, SameElement):
        return [s for part in node.parts for s in string_literals(part)]
    if isinstance(node, Not):
        return string_literals(node.operand)
    if isinstance(node, And | Or | Rank):
        return [s for operand in node.operands for s in string_literals(operand)]
    return []


Document = Mapping[str, Any]
"""Vespa field name → value (absent: unset), as the feeder writes it plus synthetic fields."""


def evaluate(node: Node, document: Document) -> bool:
    if isinstance(node, Constant):
        return node.value
    if isinstance(node, Retrieval):
        return True
    if isinstance(node, Rank):
        return evaluate(node.operands[0], document)
    if isinstance(node, Not):
        return not evaluate(node.operand, document)
    if isinstance(node, And):
        return all(evaluate(o, document) for o in node.operands)
    if isinstance(node, Or):
        return any(evaluate(o, document) for o in node.operands)
    if isinstance(node, SameElement):
        return any(
            _element_matches(node.parts, element) for element in _elements(document, node.field)
        )
    return _compare(node, document.get(node.field))


def _elements(document: Document, field: str) -> list[Mapping[str, Any]]:
    value = document.get(field)
    if isinstance(value, Mapping):  # a map: its entries are {key, value} elements
        return [{"key": k, "value": v} for k, v in value.items()]
    if isinstance(value, list):  # an array of structs
        return value
    return []


def _element_matches(parts: tuple[Node, ...], element: Mapping[str, Any]) -> bool:
    return all(evaluate(part, element) for part in parts)


def _compare(node: Compare, stored: Any) -> bool:
    values = stored if isinstance(stored, list) else [stored]
    if node.op == "matches":  # an unset string attribute holds ""
        return any(re2.search(node.value, v if v is not None else "") for v in values)
    present = [v for v in values if v is not None]
    if node.op == "contains":
        return node.value in present
    if node.op == "in":
        return any(v in node.value for v in present)
    return any(_ordered(node.op, v, node.value) for v in present)


def _ordered(op: str, stored: Any, value: Any) -> bool:
    if isinstance(stored, bool) or isinstance(value, bool):
        return op == "=" and stored is value
    if not isinstance(stored, int | float) or not isinstance(value, int | float):
        raise TypeError(f"cannot compare {stored!r} {op} {value!r}")
    return {
        "=": stored == value,
        "<": stored < value,
        ">": stored > value,
        "<=": stored <= value,
        ">=": stored >= value,
    }[op]
