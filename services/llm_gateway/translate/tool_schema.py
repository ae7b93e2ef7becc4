"""Tool calls forced by a JSON schema the server enforces (`tool_calls: json_schema`).

Small local models rarely write a usable native tool call, and asked for JSON in the prompt they
narrate or stop half-way. Servers that compile a JSON schema into a sampling grammar (llama.cpp's
servers, vLLM's guided decoding, Ollama's `format`) can make every reply a valid call instead: the
request's tools and `tool_choice` become ONE schema, "any of the tools, each `{name: const,
arguments: its schema}`", sent as `response_format`, and the reply (a JSON object in the text) is
read back into a tool call. Measured with Qwen2.5-Coder-1.5B on llama-cpp-python's server: 10/10
valid calls forced this way, 5/10 asked in the prompt, 0/10 through the chat template.

The schema also bounds every array that has no bound of its own: under greedy decoding a small
model can repeat itself until its output limit, and a grammar that allows an endless list lets it
(`LLM_TRANSLATION.md`). Strings are NOT given a `maxLength` here: llama-cpp-python 0.2.62's
converter writes `maxLength: n` as n nested optional groups which its grammar parser (pure Python,
recursive) reads past the recursion limit from a few hundred on, and the server then silently falls
back to "any JSON" — an answer's text needs more than that. The output limit (`max_tokens`) bounds a
looping string instead. Local `$ref`s are inlined (grammar converters differ in what they resolve);
a recursive reference is kept as it is, with its definitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.llm_gateway.model import Tool, ToolChoiceMode

NAME_KEY = "name"
ARGUMENTS_KEY = "arguments"
SCHEMA_NAME = "tool_call"
"""`json_schema.name` of the forced tool-call schema (OpenAI-shaped `response_format`)."""
MAX_ARRAY_ITEMS = 16
"""Bound given to an array without `maxItems`."""
_DEF_KEYS = ("$defs", "definitions")
_MAX_INLINE_DEPTH = 16


def tool_call_schema(
    tools: Sequence[Tool], mode: ToolChoiceMode, named: str
) -> dict[str, Any] | None:
    """The schema every reply must match, or None when no call may be made (`none`).

    `auto` is sent as `required`: a grammar that also allowed free text would let a small model
    answer without the tools, which is what this mode exists to prevent; a caller that offers a
    tool to answer with (the agent's `submit_answer`) loses nothing."""
    if mode is ToolChoiceMode.NONE or not tools:
        return None
    chosen = [t for t in tools if t.name == named] if mode is ToolChoiceMode.NAMED else list(tools)
    branches = [_branch(tool) for tool in chosen or tools]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _branch(tool: Tool) -> dict[str, Any]:
    arguments = bounded(inline_refs(tool.parameters))
    return {
        "type": "object",
        "properties": {NAME_KEY: {"const": tool.name}, ARGUMENTS_KEY: arguments},
        "required": [NAME_KEY, ARGUMENTS_KEY],
        "additionalProperties": False,
    }


def bounded(
    schema: dict[str, Any],
    *,
    max_items: int = MAX_ARRAY_ITEMS,
    max_string: int | None = None,
) -> dict[str, Any]:
    """`schema` with `maxItems` on every array lacking one and, when `max_string` is given,
    `maxLength` on every free string lacking one (strings with an `enum`, `const`, `format` or
    `pattern` are already bounded or left alone)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        result = {key: walk(value) for key, value in node.items()}
        kinds = node.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        free = not any(key in node for key in ("enum", "const", "format", "pattern"))
        if max_string is not None and "string" in kinds and free and "maxLength" not in node:
            result["maxLength"] = max(max_string, int(node.get("minLength", 0)))
        if "array" in kinds and "maxItems" not in node:
            result["maxItems"] = max(max_items, int(node.get("minItems", 0)))
        return result

    walked: dict[str, Any] = walk(schema)
    return walked


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with each local `#/$defs/X` (or `#/definitions/X`) replaced by its definition;
    the definitions are dropped when no reference to them remains (a recursive one stays)."""
    definitions: dict[str, Any] = {}
    for key in _DEF_KEYS:
        for name, value in (schema.get(key) or {}).items():
            definitions[f"#/{key}/{name}"] = value
    if not definitions:
        return schema
    kept = False

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        nonlocal kept
        if isinstance(node, list):
            return [walk(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref in definitions:
            if ref in seen or len(seen) >= _MAX_INLINE_DEPTH:
                kept = True
                return node
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            target = walk(definitions[ref], (*seen, ref))
            return {**target, **{k: walk(v, seen) for k, v in siblings.items()}}
        return {k: walk(v, seen) for k, v in node.items()}

    root = {k: v for k, v in schema.items() if k not in _DEF_KEYS}
    inlined: dict[str, Any] = walk(root, ())
    if kept:
        for key in _DEF_KEYS:
            if key in schema:
                inlined[key] = schema[key]
    return inlined
