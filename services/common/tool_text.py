"""How a model without native tool calls reads the tools it is offered: the gateway's tool
instruction (`tool_calls: json_in_text` and `json_schema`), and the compact signature that stands
for an arguments schema where a server's grammar enforces it.

The gateway sends this text; the agent counts it, so that a turn's room in a small window is the
room the model really has (the instruction lists every tool of the run on every turn, whichever
the turn may call). One rendering, two readers: it lives here so that they cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol


class Described(Protocol):
    """A tool as a model is told of it (the gateway's `Tool`, the agent's `ToolSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]: ...


def instruction(tools: Sequence[Described], *, forced: bool = False) -> str:
    """The system message that replaces native tools: every tool of the request, its
    arguments, the format. It names no turn's choice (`directive` does, at the end of the
    conversation), so it stays byte-identical from turn to turn and a model server's cached
    prompt prefix holds. `forced` (`json_schema` mode, the server enforces the schema): a call
    is named by `name`, and each tool's arguments are given as a compact signature instead of
    the whole schema."""
    if forced:
        listed = "\n".join(
            f"- {t.name}: {t.description}\n  arguments: {signature(t.parameters)}" for t in tools
        )
    else:
        listed = "\n".join(
            f"- {t.name}: {t.description}\n  arguments schema: {json.dumps(t.parameters)}"
            for t in tools
        )
    key = "name" if forced else "tool"
    return (
        "You can call these tools:\n"
        f"{listed}\n\n"
        "To call a tool, reply with only a JSON object (several calls: a JSON list of them):\n"
        f'{{"{key}": "<tool name>", "arguments": {{<arguments matching its schema>}}}}\n'
        "Tool results come back in messages starting `Tool result`."
    )


def signature(schema: Any, root: dict[str, Any] | None = None) -> str:
    """A compact, description-free rendering of an arguments schema for the prompt, e.g.
    `{query: {primary: string, variations?: string[]}, limit?: integer}`: where the server's
    grammar enforces the schema, the prompt need only say what to fill in, and every token of a
    full schema costs a CPU model seconds on each uncached turn.

    Local `$ref`s are followed, except that a reference to a scalar definition (no properties,
    no items: a string type, an enum) is shown by the definition's name: a caller whose enum
    changes from turn to turn (the agent's citable ids) keeps the prompt, and so the server's
    cached prompt prefix, byte-identical while the grammar still enforces the current values."""
    root = root if root is not None else schema
    if not isinstance(schema, dict) or not schema:
        return "any"
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target = _definition(root, ref)
        if target is None:
            return "any"
        if not any(key in target for key in ("properties", "items", "anyOf", "oneOf", "$ref")):
            return ref.rsplit("/", 1)[1]
        return signature(target, root)
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    if isinstance(schema.get("enum"), list):
        return "|".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return "|".join(dict.fromkeys(signature(branch, root) for branch in schema[key]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(signature({**schema, "type": k}, root) for k in kind)
    if kind == "array" or "items" in schema:
        items = schema.get("items", {})
        item = signature(items, root)
        union = isinstance(items, dict) and (
            len(items.get("enum") or ()) > 1
            or any(len(items.get(k) or ()) > 1 for k in ("anyOf", "oneOf"))
            or isinstance(items.get("type"), list)
        )
        return f"({item})[]" if union else f"{item}[]"
    if kind == "object" or "properties" in schema:
        required = set(schema.get("required", []))
        fields = ", ".join(
            f"{name}{'' if name in required else '?'}: {signature(sub, root)}"
            for name, sub in (schema.get("properties") or {}).items()
        )
        return "{" + fields + "}"
    return str(kind) if kind else "any"


def _definition(root: dict[str, Any], ref: str) -> dict[str, Any] | None:
    node: Any = root
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None
