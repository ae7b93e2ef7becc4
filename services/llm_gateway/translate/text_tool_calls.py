"""Tool calls written as JSON in a model's text, for endpoints whose models have no native tool
calls (`tool_calls: json_in_text`, common with small local models).

The model is told the tools and the format in a system message (`services.common.tool_text`); its
past calls and their results travel as text (`call_text`, `result_text`). Reading is tolerant: a
fenced or bare JSON object or list anywhere in the text, `tool`/`name`/`function.name` for the name,
`arguments`/`parameters`/`args` as an object or a JSON string. A call that names a known tool but
is not valid JSON is kept with its raw text as arguments, so the caller's validation sends it back
to the model as a tool error instead of silently treating it as an answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.llm_gateway.model import Tool, ToolChoiceMode

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_NAMED = re.compile(r'"(?:tool|name)"\s*:\s*"([A-Za-z0-9_.-]+)"')


@dataclass(frozen=True)
class TextToolCall:
    """A tool call read from text."""

    name: str
    arguments_json: str
    """The arguments as sent; invalid JSON when the model wrote a broken call."""


def directive(
    tools: Sequence[Tool], callable_tools: Sequence[Tool], mode: ToolChoiceMode, named: str
) -> str:
    """What this turn asks, sent after the conversation: which tool the model must or may call
    now (`callable_tools`, when fewer than `tools`, are named)."""
    if mode is ToolChoiceMode.NAMED:
        return f"You must call the tool {named} now."
    if mode is ToolChoiceMode.NONE:
        return "Do not call a tool now: answer in plain text."
    narrowed = len(callable_tools) < len(tools)
    names = _names([t.name for t in callable_tools])
    if mode is ToolChoiceMode.REQUIRED:
        if narrowed:
            return f"You must call one of these tools now: {names}."
        return "You must call one of the tools now."
    if narrowed:
        return f"Call a tool when you need one ({names}); otherwise answer in plain text."
    return "Call a tool when you need one; otherwise answer in plain text."


def _names(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def call_text(name: str, arguments_json: str, *, key: str = "tool") -> str:
    """A past call as the model would have written it."""
    try:
        arguments: Any = json.loads(arguments_json or "{}")
    except json.JSONDecodeError:
        arguments = {}
    return json.dumps({key: name, "arguments": arguments}, ensure_ascii=False)


def result_text(call_id: str, text: str, *, is_error: bool) -> str:
    kind = "Tool result (error)" if is_error else "Tool result"
    return f"{kind} for call {call_id}:\n{text}"


def read_calls(text: str, tool_names: Sequence[str]) -> tuple[str, list[TextToolCall]]:
    """The prose around the calls and the calls of known tools written in `text`."""
    for candidate, span in _candidates(text):
        try:
            # strict=False: raw control characters (a newline) inside strings. llama-cpp-python
            # 0.2.62's JSON grammar lets a model write them (measured: a forced submit_answer
            # whose text held a raw newline); the arguments are re-serialised as valid JSON.
            data = json.loads(candidate, strict=False)
        except json.JSONDecodeError:
            named = _NAMED.search(candidate)
            if named and named.group(1) in tool_names:
                return _around(text, span), [TextToolCall(named.group(1), candidate)]
            continue
        calls = [c for c in map(_call, data if isinstance(data, list) else [data]) if c]
        known = [c for c in calls if c.name in tool_names]
        if known:
            return _around(text, span), known
    return text, []


def _candidates(text: str) -> list[tuple[str, tuple[int, int]]]:
    found = [(m.group(1).strip(), m.span()) for m in _FENCE.finditer(text)]
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if starts:
        start = min(starts)
        end = max(text.rfind("}"), text.rfind("]")) + 1
        if end <= start:
            end = len(text)  # cut off mid-call: still a candidate, read as malformed
        found.append((text[start:end], (start, end)))
    return found


def _call(item: Any) -> TextToolCall | None:
    if not isinstance(item, dict):
        return None
    nested = item.get("function")
    function: dict[str, Any] = nested if isinstance(nested, dict) else {}
    name = item.get("tool") or item.get("name") or function.get("name")
    if not isinstance(name, str):
        return None
    arguments: Any = next(
        (
            source[key]
            for source in (item, function)
            for key in ("arguments", "parameters", "args")
            if key in source
        ),
        {},
    )
    if isinstance(arguments, str):
        return TextToolCall(name, arguments)
    return TextToolCall(name, json.dumps(arguments, ensure_ascii=False))


def _around(text: str, span: tuple[int, int]) -> str:
    return (text[: span[0]] + text[span[1] :]).strip()
