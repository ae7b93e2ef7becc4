"""JSON schemas parsed and checked once per distinct text, not once per request.

The agent sends the same tool schemas on every turn, and parsing, bounding and checking a schema
against its meta-schema is costly CPU on the event loop. `parse` remembers the outcome for each
schema text, `problem` the meta-schema verdict for each canonical schema, both in bounded LRUs.
The schemas handed out are shared between requests: callers never mutate them.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import re2
from jsonschema import ValidationError

DEFAULT_MAX_SCHEMAS = 256
"""Distinct schemas remembered; a deployment sees a handful (its agents' tools)."""
MAX_SCHEMA_DEPTH = 32
"""Deepest nesting of objects and arrays a JSON schema may have (tool parameters, structured
output). Real schemas stay under ten; the limit keeps validation and translation bounded."""
MAX_SCHEMA_MIN_SIZE = 1_000
"""Largest `minItems`, `minProperties` or `minContains` a schema may demand. A value that must
hold a million items is no answer a model can write within its output limit, and filling one
(the offline provider does) is seconds of CPU: such a schema is refused before any work."""
MAX_SCHEMA_CHARS = 32_768
"""Longest JSON schema text (a tool's parameters, a structured output schema). Checking a schema
against its meta-schema runs on the event loop at about 40 ms per KB on a loaded 2-core machine
(a 680 KB schema of 10,000 properties held the gateway 28 s at load 27): real tool schemas are a
few KB, and this keeps a new one to about a second there."""
SIZE_KEYWORDS = ("minItems", "minProperties", "minContains")
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are instances, not schemas: never read as schema keywords."""


class SchemaProblem(ValueError):
    """Why a schema text is refused, in words the caller can act on."""


def json_depth(value: Any) -> int:
    """How deeply objects and arrays nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        node, depth = pending.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth + 1)
        pending.extend((child, depth + 1) for child in children)
    return deepest


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    """`pattern` compiled by RE2: matching takes time linear in the text, whatever the pattern
    (Python's `re` backtracks: `^(a|aa)+$` against forty `a`s and a `!` runs for minutes)."""
    return re2.compile(pattern, _RE2_OPTIONS)


def pattern_problem(schema: dict[str, Any]) -> str | None:
    """Where `schema` has a `pattern` (or `patternProperties` key) RE2 cannot run (lookaround,
    backreferences), or None."""
    pending: list[tuple[Any, str]] = [(schema, "")]
    while pending:
        node, pointer = pending.pop()
        if isinstance(node, list):
            pending.extend((item, f"{pointer}/{n}") for n, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            where = f"{pointer}/{_escape(str(key))}"
            patterns = []
            if key == "pattern" and isinstance(value, str):
                patterns = [value]
            elif key == "patternProperties" and isinstance(value, dict):
                patterns = list(value)
            for pattern in patterns:
                try:
                    _regex(pattern)
                except re2.error as error:
                    reason = error.args[0] if error.args else error
                    if isinstance(reason, bytes):
                        reason = reason.decode(errors="replace")
                    return (
                        f"the pattern {pattern!r} at {where} needs what a linear-time (RE2) "
                        f"matcher cannot do: {reason}"
                    )
            if key not in _DATA_KEYWORDS:
                pending.append((value, where))
    return None


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _regex(pattern).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


@functools.lru_cache(maxsize=16)
def _bounded_class(base: Any) -> Any:
    return jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        base, {"pattern": _pattern, "patternProperties": _pattern_properties}
    )


def bounded_validator(schema: dict[str, Any]) -> Any:
    """A validator of `schema`'s dialect whose `pattern` and `patternProperties` match with RE2,
    so validating a reply never backtracks for minutes on the event loop (or in a thread, where
    `re` would still hold the GIL)."""
    return _bounded_class(jsonschema.validators.validator_for(schema))(schema)


def size_problem(schema: dict[str, Any]) -> str | None:
    """Where `schema` demands more than `MAX_SCHEMA_MIN_SIZE` items or properties (its JSON
    pointer and the limit), or None. Walks without recursion; instance-valued keywords skipped."""
    pending: list[tuple[Any, str]] = [(schema, "")]
    while pending:
        node, pointer = pending.pop()
        if isinstance(node, list):
            pending.extend((item, f"{pointer}/{n}") for n, item in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            where = f"{pointer}/{_escape(str(key))}"
            if key in SIZE_KEYWORDS and isinstance(value, int | float):
                if value > MAX_SCHEMA_MIN_SIZE:
                    return (
                        f"{key} at {where or '/'} is {value}; at most {MAX_SCHEMA_MIN_SIZE} "
                        "(the limit)"
                    )
            elif key not in _DATA_KEYWORDS:
                pending.append((value, where))
    return None


def _escape(token: str) -> str:
    """A JSON-pointer reference token (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")


def _integral_as_int(text: str) -> float | int:
    """A JSON number with a fraction or exponent, as an int when it is integral (`1.0` → `1`):
    Struct-born schemas carry doubles, and providers reject `"maxItems": 10.0`."""
    value = float(text)
    return int(value) if value.is_integer() else value


def check_against_meta_schema(schema: dict[str, Any]) -> None:
    """Raise `jsonschema.SchemaError` when `schema` is not a valid JSON schema of its dialect."""
    jsonschema.validators.validator_for(schema).check_schema(schema)


class SchemaChecker:
    """The problem with a schema (`None` when valid), remembered for the last `max_schemas`."""

    def __init__(
        self,
        *,
        max_schemas: int = DEFAULT_MAX_SCHEMAS,
        check: Callable[[dict[str, Any]], None] = check_against_meta_schema,
    ) -> None:
        if max_schemas < 1:
            raise ValueError("max_schemas must be at least 1")
        self._max_schemas = max_schemas
        self._check = check
        self._problems: OrderedDict[str, str | None] = OrderedDict()
        self._parsed: OrderedDict[str, dict[str, Any] | SchemaProblem] = OrderedDict()

    def __len__(self) -> int:
        """How many verdicts are remembered."""
        return len(self._problems)

    def problem(self, schema: dict[str, Any]) -> str | None:
        """Why `schema` is not a valid JSON schema, or `None` when it is."""
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        if key in self._problems:
            self._problems.move_to_end(key)
            return self._problems[key]
        try:
            self._check(schema)
            problem = None
        except jsonschema.SchemaError as error:
            problem = error.message
        self._problems[key] = problem
        if len(self._problems) > self._max_schemas:
            self._problems.popitem(last=False)
        return problem

    def parse(self, text: str) -> dict[str, Any]:
        """The schema `text` holds; `SchemaProblem` when it is not JSON, not an object, nested
        deeper than `MAX_SCHEMA_DEPTH`, longer than `MAX_SCHEMA_CHARS`, not a valid JSON schema
        or demanding more than `MAX_SCHEMA_MIN_SIZE` items. Remembered per text."""
        if len(text) > MAX_SCHEMA_CHARS:
            raise SchemaProblem(f"{len(text)} characters; the limit is {MAX_SCHEMA_CHARS}")
        outcome = self._parsed.get(text)
        if outcome is None:
            outcome = self._load(text)
            self._parsed[text] = outcome
            if len(self._parsed) > self._max_schemas:
                self._parsed.popitem(last=False)
        else:
            self._parsed.move_to_end(text)
        if isinstance(outcome, SchemaProblem):
            raise outcome
        return outcome

    def _load(self, text: str) -> dict[str, Any] | SchemaProblem:
        too_deep = SchemaProblem(f"nested deeper than {MAX_SCHEMA_DEPTH} levels (the limit)")
        try:
            schema = json.loads(text, parse_float=_integral_as_int)
        except json.JSONDecodeError as error:
            return SchemaProblem(f"not valid JSON: {error.msg}")
        except RecursionError:
            return too_deep
        if not isinstance(schema, dict):
            return SchemaProblem("must be a JSON object (a JSON schema)")
        if json_depth(schema) > MAX_SCHEMA_DEPTH:
            return too_deep
        problem = self.problem(schema)
        if problem is not None:
            return SchemaProblem(f"not a valid JSON schema: {problem}")
        too_large = size_problem(schema) or pattern_problem(schema)
        if too_large is not None:
            return SchemaProblem(too_large)
        return schema
