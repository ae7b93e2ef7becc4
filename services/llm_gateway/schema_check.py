"""JSON schemas checked against their meta-schema once per distinct schema, not once per request.

The agent sends the same tool schemas on every turn, and a meta-schema check is costly CPU on the
event loop; the verdict for a schema is remembered by its canonical JSON text in a bounded LRU.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jsonschema

DEFAULT_MAX_SCHEMAS = 256
"""Distinct schemas remembered; a deployment sees a handful (its agents' tools)."""


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
