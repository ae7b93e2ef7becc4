"""The step log of one run: the record of each model turn (`records.StepRecord`) as it happens,
the calls it made, the tokens it spent, who answered; the run's usage. The budget and the usage
totals are read from it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from opentelemetry import trace

from services.agent.messages import ToolCall
from services.agent.ports import ModelResponse, TokenUsage
from services.agent.records import (
    AnsweredBy,
    StepBuilder,
    StepRecord,
    ToolCallRecord,
    total_usage,
)
from services.agent.run import RunUsage
from services.agent.search import SearchHit
from services.common import semconv


class StepLog:
    """The finished steps and the step in progress; `on_step` gets each step as it ends."""

    def __init__(self, on_step: Callable[[StepRecord], None] | None = None) -> None:
        self.steps: list[StepRecord] = []
        self.current: StepBuilder | None = None
        self.on_step = on_step
        self.usage = RunUsage()
        """The run's usage: model calls, cost, tool calls (tokens: `final_usage`)."""
        self.answered_by: AnsweredBy | None = None
        """The provider and model of the last model turn."""
        self.fallbacks: list[str] = []

    @property
    def index(self) -> int:
        """The step in progress (from 1), or the last one."""
        return self.current.index if self.current is not None else len(self.steps)

    def start(self, offered_tools: Sequence[str]) -> StepBuilder:
        """A new step (a model turn); the one in progress ends first."""
        self.finish()
        self.current = StepBuilder(len(self.steps) + 1, offered_tools)
        return self.current

    def finish(self) -> None:
        if self.current is not None:
            record = self.current.finish()
            self.steps.append(record)
            self.current = None
            if self.on_step is not None:
                self.on_step(record)

    def count(self, usage: TokenUsage) -> None:
        """A model call: its tokens on the step in progress, its cost on the run."""
        self.usage.model_calls += 1
        if usage.cost_usd:
            self.usage.cost_usd = (self.usage.cost_usd or 0.0) + usage.cost_usd
        if self.current is not None:
            self.current.count(usage)

    def answered(self, response: ModelResponse) -> None:
        """Who wrote a model turn, and any fallback of the gateway on the way."""
        self.answered_by = AnsweredBy(response.provider, response.model, response.fallback_reason)
        if response.fallback_reason and response.fallback_reason not in self.fallbacks:
            self.fallbacks.append(response.fallback_reason)

    def run_answered_by(self) -> AnsweredBy | None:
        """The last turn's provider and model, with every fallback of the run."""
        if self.answered_by is None:
            return None
        return replace(self.answered_by, fallback_reason="; ".join(self.fallbacks))

    def final_usage(self, span: trace.Span) -> RunUsage:
        """The run's usage with the tokens of its steps, also set on `span` (`invoke_agent`)."""
        spent = self.totals()
        self.usage.input_tokens = spent.input_tokens
        self.usage.output_tokens = spent.output_tokens
        self.usage.cache_read_tokens = spent.cache_read_tokens
        self.usage.cache_write_tokens = spent.cache_write_tokens
        span.set_attribute(semconv.GEN_AI_USAGE_INPUT_TOKENS, spent.input_tokens)
        span.set_attribute(semconv.GEN_AI_USAGE_OUTPUT_TOKENS, spent.output_tokens)
        span.set_attribute(semconv.QUARRY_AGENT_STEPS, len(self.steps))
        return self.usage

    @property
    def spent(self) -> int:
        """Tokens spent so far, the step in progress included (the budget's one source)."""
        spent = total_usage(self.steps)
        current = self.current.usage if self.current is not None else TokenUsage()
        return (
            spent.input_tokens + spent.output_tokens + current.input_tokens + current.output_tokens
        )

    def totals(self) -> TokenUsage:
        """The tokens of the finished steps."""
        return total_usage(self.steps)

    def record_call(
        self,
        call: ToolCall,
        *,
        validated: str = "",
        output: str = "",
        is_error: bool = False,
        duration_ms: int = 0,
        results: Sequence[SearchHit] = (),
        result_ids: Sequence[str] = (),
        previewed: tuple[str, ...] = (),
        total_count: int = 0,
    ) -> None:
        """A call of the step in progress, as executed."""
        if self.current is None:
            return
        self.current.add(
            ToolCallRecord(
                call_id=call.id,
                name=call.name,
                arguments_json=call.arguments_json,
                validated_arguments_json=validated,
                started_at=time.time() - duration_ms / 1000,
                duration_ms=duration_ms,
                result_ids=tuple(result_ids) or tuple(h.id for h in results),
                error=output if is_error else "",
                total_count=total_count,
                previewed_ids=previewed,
                output="" if is_error else output,
                results=tuple(results),
            )
        )
