"""Step records (seed 004 M1-M4, seed 001 FR-7): what each iteration of a run did.

One `StepRecord` per model turn: its index (from 1), the model's text, every tool call it made as
executed (`ToolCallRecord`: name, raw and validated arguments, duration, the results it showed,
its error), the tokens of the turn, the provider and model that answered, and timings. The loop
builds them as it goes (`StepBuilder`), events and spans carry the same index, the final response
carries them, and Layer 3 compaction reads the steps it summarises from here instead of
re-deriving them from the (pruned) conversation.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.agent.ports import TokenUsage
from services.agent.search import SearchHit


@dataclass(frozen=True)
class AnsweredBy:
    """The provider and model behind a model turn, and whether the gateway fell back to them."""

    provider: str
    model: str
    fallback_reason: str = ""
    """Empty without a fallback."""

    @property
    def fallback(self) -> bool:
        return bool(self.fallback_reason)


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call of a step, as executed."""

    call_id: str
    name: str
    arguments_json: str
    """As the model wrote them (possibly invalid)."""
    validated_arguments_json: str = ""
    """After validation, defaults filled in; empty when they did not validate."""
    started_at: float = 0.0
    """Unix time (seconds)."""
    duration_ms: int = 0
    result_ids: tuple[str, ...] = ()
    """Results the call showed the model; for submit_answer, its citations."""
    error: str = ""
    """The tool error sent back to the model; empty on success."""
    total_count: int = 0
    """Search: matching results; read: chunks of the document; count: documents counted."""
    previewed_ids: tuple[str, ...] = ()
    output: str = ""
    """The tool result the model read."""
    results: tuple[SearchHit, ...] = ()
    """The results shown, in full."""


@dataclass(frozen=True)
class StepRecord:
    """One model turn and the tool calls it made."""

    index: int
    """From 1."""
    text: str = ""
    tool_calls: tuple[ToolCallRecord, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    answered_by: AnsweredBy | None = None
    started_at: float = 0.0
    """Unix time (seconds)."""
    model_ms: int = 0
    duration_ms: int = 0
    offered_tools: tuple[str, ...] = ()
    compacted: bool = False


class StepBuilder:
    """The record of the step in progress; `finish` freezes it."""

    def __init__(self, index: int, offered_tools: Sequence[str]) -> None:
        self.index = index
        self.offered_tools = tuple(offered_tools)
        self.started_at = time.time()
        self._started = time.perf_counter()
        self.text = ""
        self.usage = TokenUsage()
        self.answered_by: AnsweredBy | None = None
        self.model_ms = 0
        self.compacted = False
        self.calls: list[ToolCallRecord] = []

    def model_answered(self, text: str, answered_by: AnsweredBy | None, model_ms: int) -> None:
        self.text = text
        self.answered_by = answered_by
        self.model_ms += model_ms

    def count(self, usage: TokenUsage) -> None:
        self.usage.add_tokens(usage)

    def add(self, call: ToolCallRecord) -> None:
        self.calls.append(call)

    def finish(self) -> StepRecord:
        return StepRecord(
            index=self.index,
            text=self.text,
            tool_calls=tuple(self.calls),
            usage=TokenUsage(**vars(self.usage)),
            answered_by=self.answered_by,
            started_at=self.started_at,
            model_ms=self.model_ms,
            duration_ms=int((time.perf_counter() - self._started) * 1000),
            offered_tools=self.offered_tools,
            compacted=self.compacted,
        )


def total_usage(steps: Sequence[StepRecord]) -> TokenUsage:
    """The tokens of every step."""
    total = TokenUsage()
    for step in steps:
        total.add_tokens(step.usage)
    return total


def transcript(steps: Sequence[StepRecord], *, result_chars: int = 1400) -> list[str]:
    """Layer 3 reads the steps it summarises from their records: the model's text, each call
    with its validated arguments, and what it returned (the original text, not a pruned one),
    each result shortened to `result_chars`."""
    lines: list[str] = []
    for step in steps:
        parts = [f"[step {step.index}] {step.text}".rstrip()]
        for call in step.tool_calls:
            arguments = call.validated_arguments_json or call.arguments_json
            parts.append(f"[call {call.name} {arguments}]")
            if not call.error and not call.output:  # an accepted answer returns nothing
                continue
            kind = "tool error" if call.error else "tool result"
            text = call.error or call.output
            if len(text) > result_chars:
                cut = len(text) - result_chars
                text = (
                    f"{text[: result_chars - 200]}\n[... {cut} characters cut ...]\n{text[-200:]}"
                )
            parts.append(f"[{kind} {call.call_id}]\n{text}")
        lines.append("\n".join(parts))
    return lines
