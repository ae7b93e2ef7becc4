"""Layers 2 and 3 of context management (seed 000 §4); Layer 1 is in `tools.format_results`.

Layer 2 (`prune_tool_results`) runs before every model call: above 60 % of the window it soft-trims
old tool results to their head and tail, above 80 % it replaces them with a placeholder. The newest
tool result and every assistant message stay untouched, and each tool result keeps its call id, so
calls and results stay paired. Layer 3 (`split_for_compaction`, `summary_prompt`) prepares the
compaction the loop runs when the gateway still reports an overflow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from services.agent.messages import CHARS_PER_TOKEN, Message, Role, total_chars

SOFT_TRIM_HEAD = 2000
SOFT_TRIM_TAIL = 500
CLEARED = "[Old search results cleared to save context. Your notes above still describe them.]"
SUMMARY_SYSTEM_PROMPT = (
    "Summarize this search conversation. Include: the queries tried, what was found per source "
    "(with the result ids worth citing), which sources or approaches were exhausted, and what is "
    "still missing. Be concise."
)


def prune_tool_results(
    messages: Sequence[Message],
    window_tokens: int,
    *,
    fixed_chars: int = 0,
    soft_ratio: float = 0.6,
    hard_ratio: float = 0.8,
) -> list[Message]:
    """Trim, then clear, old tool results until the conversation fits under the thresholds.

    `fixed_chars` counts what every call also carries (system prompt, tool schemas).
    """
    pruned = list(messages)
    max_chars = window_tokens * CHARS_PER_TOKEN
    used = fixed_chars + total_chars(pruned)
    if used < max_chars * soft_ratio:
        return pruned
    results = [i for i, m in enumerate(pruned) if m.role is Role.TOOL]
    prunable = results[:-1]
    for index in prunable:
        if used < max_chars * soft_ratio:
            break
        trimmed = soft_trim(pruned[index])
        used += trimmed.chars - pruned[index].chars
        pruned[index] = trimmed
    for index in prunable:
        if used <= max_chars * hard_ratio:
            break
        cleared = pruned[index].with_text(CLEARED)
        used += cleared.chars - pruned[index].chars
        pruned[index] = cleared
    return pruned


def soft_trim(message: Message, head: int = SOFT_TRIM_HEAD, tail: int = SOFT_TRIM_TAIL) -> Message:
    """The first `head` and last `tail` characters, with a note of what was cut."""
    text = message.text
    if len(text) <= head + tail + 100 or text == CLEARED:
        return message
    cut = len(text) - head - tail
    return message.with_text(
        f"{text[:head]}\n\n[... {cut} characters of older results trimmed ...]\n\n{text[-tail:]}"
    )


class ConversationSummary(BaseModel):
    """What the search conversation found so far, replacing its older messages."""

    summary: str = Field(description="What was searched and found so far, per source.")
    queries_tried: list[str] = Field(default_factory=list, description="Queries already run.")
    relevant_result_ids: list[str] = Field(
        default_factory=list, description="Ids of results worth citing in the answer."
    )
    still_missing: str = Field(
        default="", description="What the question needs that was not found."
    )

    def render(self) -> str:
        lines = [self.summary.strip()]
        if self.queries_tried:
            lines.append("Queries tried: " + "; ".join(self.queries_tried))
        if self.relevant_result_ids:
            lines.append("Relevant result ids: " + ", ".join(self.relevant_result_ids))
        if self.still_missing:
            lines.append("Still missing: " + self.still_missing.strip())
        return "\n".join(lines)


@dataclass(frozen=True)
class CompactionSplit:
    old: list[Message]
    """Exchanges to summarise."""
    recent: list[Message]
    """The last exchanges, kept verbatim; starts with an assistant message."""


def split_for_compaction(exchanges: Sequence[Message], keep_last: int) -> CompactionSplit | None:
    """Split at an assistant message so that calls and their results stay together.

    Keeps the last `keep_last` exchanges (fewer when that is all there is); None when nothing older
    is left to summarise.
    """
    starts = [i for i, m in enumerate(exchanges) if m.role is Role.ASSISTANT]
    for keep in range(keep_last, 0, -1):
        if len(starts) > keep:
            split = starts[-keep]
            return CompactionSplit(old=list(exchanges[:split]), recent=list(exchanges[split:]))
    return None


def summary_prompt(
    task: str,
    previous_summary: str,
    old: Sequence[Message],
    *,
    max_chars: int,
    steps: Mapping[int, str] | None = None,
) -> str:
    """The transcript the summariser reads, each tool result shortened, within `max_chars`.

    `steps` maps a step index to its record's transcript (`records.transcript`): an assistant
    message of a recorded step is read from its record, with its calls and their original
    results, and the tool results in the conversation (perhaps pruned) are not read again."""
    steps = steps or {}
    from_records = {
        c.id for m in old if m.role is Role.ASSISTANT and m.step in steps for c in m.tool_calls
    }
    parts = [f"# Task\n{task}"]
    if previous_summary:
        parts.append(f"# Earlier summary\n{previous_summary}")
    parts.append("# Conversation")
    for message in old:
        if message.role is Role.ASSISTANT and message.step in steps:
            parts.append(steps[message.step])
        elif not (message.role is Role.TOOL and message.tool_call_id in from_records):
            parts.append(_transcript_line(message))
    text = "\n\n".join(parts)
    return text if len(text) <= max_chars else text[:max_chars] + "\n[... transcript cut ...]"


def _transcript_line(message: Message) -> str:
    if message.role is Role.TOOL:
        kind = "tool error" if message.is_error else "tool result"
        return f"[{kind} {message.tool_call_id}]\n{soft_trim(message, 1200, 200).text}"
    calls = "".join(f"\n[call {c.name} {c.arguments_json}]" for c in message.tool_calls)
    return f"[{message.role.value}] {message.text}{calls}"


_RESULT_BLOCK = re.compile(
    r"(^### \[(?P<id>[^\]\n]+)\][^\n]*\n)(?P<body>.*?)(?=^### \[|\Z)", re.M | re.S
)


def condense_results(
    messages: Sequence[Message], ids: Sequence[str], call_id: str
) -> list[Message]:
    """`messages` with the text of each result in `ids` replaced, in tool results and full-text
    messages, by a pointer to the result of call `call_id` (a summary of them): each result's
    `### [id] title` line stays, so it stays citable, and every call stays paired with its
    result. Assistant text is never touched."""
    wanted = set(ids)
    pointer = f"(condensed: see the result of call {call_id}; `read` gives the full text)\n\n"

    def replace(match: re.Match[str]) -> str:
        if match.group("id").strip() not in wanted:
            return match.group(0)
        return match.group(1) + pointer

    condensed = []
    for message in messages:
        if message.role in (Role.TOOL, Role.USER) and "### [" in message.text:
            message = message.with_text(_RESULT_BLOCK.sub(replace, message.text))
        condensed.append(message)
    return condensed
