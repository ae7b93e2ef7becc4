"""JSON-schema rewrites some OpenAI-compatible endpoints need."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_SIMPLE_TYPES = frozenset({"string", "number", "integer", "boolean", "null"})
_BRANCH_KEYS = ("anyOf", "oneOf", "allOf")
_DEF_KEYS = ("$defs", "definitions")


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as OpenAI strict mode wants it: every object closed (`additionalProperties:
    false`) with all properties required, the originally optional ones made nullable."""
    result = _map_children(schema, strict_schema)
    if result.get("type") == "object" or "properties" in result:
        properties: dict[str, Any] = result.get("properties", {})
        required = set(result.get("required", []))
        result["properties"] = {
            name: sub if name in required else _nullable(sub) for name, sub in properties.items()
        }
        result["required"] = list(properties)
        result["additionalProperties"] = False
    return result


def collapse_unions(schema: dict[str, Any]) -> dict[str, Any]:
    """`anyOf`/`oneOf` whose branches are bare simple types become one `type` (a list of types
    when there are several, e.g. `["integer", "null"]`), for endpoints that reject unions."""
    result = _map_children(schema, collapse_unions)
    for key in ("anyOf", "oneOf"):
        branches = result.get(key)
        if not isinstance(branches, list) or not all(_is_bare_simple(b) for b in branches):
            continue
        types = list(dict.fromkeys(b["type"] for b in branches))
        del result[key]
        result["type"] = types[0] if len(types) == 1 else types
    return result


def _map_children(
    schema: dict[str, Any], rewrite: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    result = dict(schema)
    if isinstance(result.get("properties"), dict):
        result["properties"] = {k: rewrite(v) for k, v in result["properties"].items()}
    if isinstance(result.get("items"), dict):
        result["items"] = rewrite(result["items"])
    for key in _BRANCH_KEYS:
        if isinstance(result.get(key), list):
            result[key] = [rewrite(s) if isinstance(s, dict) else s for s in result[key]]
    for key in _DEF_KEYS:
        if isinstance(result.get(key), dict):
            result[key] = {k: rewrite(v) for k, v in result[key].items()}
    return result


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        result = schema if kind == "null" else {**schema, "type": [kind, "null"]}
    elif isinstance(kind, list):
        result = schema if "null" in kind else {**schema, "type": [*kind, "null"]}
    elif isinstance(schema.get("anyOf"), list):
        branches = schema["anyOf"]
        nullable = any(b.get("type") == "null" for b in branches if isinstance(b, dict))
        result = schema if nullable else {**schema, "anyOf": [*branches, {"type": "null"}]}
    else:
        return {"anyOf": [schema, {"type": "null"}]}
    if isinstance(result.get("enum"), list) and None not in result["enum"]:
        result = {**result, "enum": [*result["enum"], None]}
    return result


def _is_bare_simple(branch: Any) -> bool:
    return (
        isinstance(branch, dict)
        and branch.get("type") in _SIMPLE_TYPES
        and set(branch) <= {"type", "description"}
    )
