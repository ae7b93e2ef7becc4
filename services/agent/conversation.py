"""The conversation of one run and its three context layers (seed 000 §4): what the model is sent
each turn, Layer 1's budget for one tool result, Layer 2's pruning of old results before each
call, Layer 3's compaction of older exchanges when the model's window overflows, and the token
budget (whether the next call still fits)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import cached_property

from pydantic import ValidationError

from services.agent.config import LoopSettings
from services.agent.context import (
    CLEARED,
    SUMMARY_SYSTEM_PROMPT,
    ConversationSummary,
    condense_results,
    prune_tool_results,
    split_for_compaction,
    summary_prompt,
)
from services.agent.messages import (
    CHARS_PER_TOKEN,
    Message,
    Role,
    assistant,
    estimate_tokens,
    system,
    total_chars,
    user,
)
from services.agent.ports import (
    ContextWindowExceeded,
    ModelClient,
    SearchClient,
    StructuredRequest,
    TokenUsage,
    ToolSpec,
)
from services.agent.prompt import task_message
from services.agent.records import StepRecord, transcript
from services.agent.run import Deadline, RunRequest
from services.agent.search import CollectionInfo
from services.agent.tools import Tool
from services.agent.tools.base import as_callers_error, tool_schema
from services.agent.tools.results import result_budget_chars
from services.common.errors import InvalidArgument
from services.common.tool_text import instruction

ANSWER_OUTPUT_TOKENS = 500
"""Tokens reserved for the answer the final call writes (its input is estimated)."""
ROOM_MARGIN_TOKENS = 100
"""What a request costs beyond its characters (per-message overhead, tool names, the turn's
directive where tools travel as text), kept free by `room_chars`."""
MIN_RESULT_CHARS = 1_200
"""The least the room cuts a tool result to, however full the window: a few previews. Below that
a result shows nothing worth its turn, and pruning or compaction makes the room instead."""


class ConversationTooLong(Exception):
    """Even after compaction the model cannot take the conversation."""


class Conversation:
    """The system prompt, earlier turns, the first user message and every exchange since."""

    def __init__(
        self,
        request: RunRequest,
        system_prompt: str,
        settings: LoopSettings,
        tools: Sequence[Tool] = (),
    ) -> None:
        self.request = request
        self.system_prompt = system_prompt
        self.settings = settings
        self.history: list[Message] = [
            m for turn in request.history for m in (user(turn.question), assistant(turn.answer))
        ]
        self.exchanges: list[Message] = []
        self.summary = ""
        """Layer 3's summary of the exchanges compacted away."""
        self.collection = CollectionInfo(name=request.collection)
        self._task_text: tuple[CollectionInfo, str, str] | None = None
        self.window = settings.default_context_window_tokens
        """The model's context window in tokens."""
        self.constrained = False
        """The route holds tools to their schemas: run-dependent specs (`Tool.spec_for`, e.g. the
        citable ids as an enum) are offered instead of the static ones."""
        self.calls_forced = False
        """Every reply of the route's model is a call of an offered tool (a grammar forces it):
        what a turn offers decides what the model does."""
        self.tools = tuple(tools)
        """The run's tools: every call carries them (a turn narrows what it may call)."""

    async def prepare(
        self,
        search: SearchClient,
        model: ModelClient,
        route: str,
        deadline: Deadline,
        window_tokens: int | None,
    ) -> None:
        """The collection's facts under the caller's filter (the facts the model is told are
        those the filter lets the caller see; the search tool decides the filter there, so a bad
        one ends the run before the first model call), and the model's window (`window_tokens`
        when configured, else the route's as the gateway reports it)."""
        try:
            self.collection = await search.get_collection(
                self.request.collection,
                caller_filter=self.request.caller_filter,
                remaining_s=deadline.remaining(),
            )
        except InvalidArgument as error:
            raise as_callers_error(error) from None
        reported = window_tokens or await model.context_window(
            route, remaining_s=deadline.remaining()
        )
        self.window = reported or self.settings.default_context_window_tokens
        self.constrained = await model.enforces_tool_schemas(
            route, remaining_s=deadline.remaining()
        )
        self.calls_forced = await model.forces_tool_calls(route, remaining_s=deadline.remaining())

    def specs(self, tools: Sequence[Tool], seen: Collection[str]) -> tuple[ToolSpec, ...]:
        """The tools as offered: run-dependent specs (`Tool.spec_for` the ids `seen`) where the
        route holds tools to their schemas, else the static ones."""
        if not self.constrained:
            return tuple(t.spec for t in tools)
        return tuple(t.spec_for(seen) for t in tools)

    def condense(self, result_ids: Sequence[str], call_id: str) -> None:
        """The texts of `result_ids` condensed in the results before call `call_id` (a summary
        of them now stands in the conversation; each result stays citable)."""
        self.exchanges = condense_results(self.exchanges, result_ids, call_id)

    def append(self, message: Message) -> None:
        self.exchanges.append(message)

    def messages(self) -> list[Message]:
        """What the model is sent: system prompt, earlier turns, the task, the exchanges."""
        task = self._task(summary=self.summary)
        return [system(self.system_prompt), *self.history, user(task), *self.exchanges]

    def _task(self, *, summary: str = "") -> str:
        """The task message; built once per collection facts and summary (every call sends it)."""
        cached = self._task_text
        if cached is None or cached[0] is not self.collection or cached[1] != summary:
            request = self.request
            text = task_message(
                request.query, request.mode, request.caller_filter, self.collection, summary=summary
            )
            cached = self._task_text = (self.collection, summary, text)
        return cached[2]

    @property
    def budget_chars(self) -> int:
        """Layer 1: the most characters one tool result may take."""
        return result_budget_chars(self.window, self.settings.tool_result_share)

    def result_room_chars(self, answer_only: Sequence[Tool]) -> int:
        """Layer 1 for a tool result added now: the budget of one result, and no more than the
        answer-only call that must follow has room for, once Layer 2 has cleared the older
        results (the newest is never cleared), though never cut below `MIN_RESULT_CHARS` by the
        room (the budget still bounds it). In a small window the budget alone can overfill it:
        on a 4,096-token local route with the default tools the prompt and the instruction take
        ~2,500 tokens, and a search result at its budget left the answer ~420 of its 500
        reserved tokens."""
        clearable = sum(
            len(m.text) - len(CLEARED)
            for m in self.exchanges
            if m.role is Role.TOOL and len(m.text) > len(CLEARED)
        )
        room = self.room_chars(answer_only) + clearable
        return min(self.budget_chars, max(room, MIN_RESULT_CHARS))

    def answer_budget_chars(self, answer_only: Sequence[Tool]) -> int:
        """Layer 1 for what the answer-only call is given first: the budget of one result, and
        no more than the window has room for."""
        return min(self.budget_chars, self.room_chars(answer_only))

    def room_chars(self, tools: Sequence[Tool]) -> int:
        """The most characters a message added now may take so that the next call offering
        `tools` still fits the window with room for the answer (the gateway skips a provider
        whose window a request does not fit, falling back to the route's next one)."""
        used = total_chars(self.messages()) + self.tools_chars(tools)
        window_chars = self.window * CHARS_PER_TOKEN
        reserve = (ANSWER_OUTPUT_TOKENS + ROOM_MARGIN_TOKENS) * CHARS_PER_TOKEN
        return max(0, window_chars - used - reserve)

    def fixed_chars(self, tools: Sequence[Tool]) -> int:
        """What every request carries besides the exchanges: tools, prompt, earlier turns."""
        return self.tools_chars(tools) + len(self.system_prompt) + total_chars(self.history) + 2000

    def tools_chars(self, tools: Sequence[Tool]) -> int:
        """What the tools add to a call offering `tools`, as the model reads them.

        Where calls are forced, tools travel as text: every call carries the gateway's
        instruction listing each tool of the run by a compact signature, whichever the turn
        offers (the turn's choice follows the conversation, a line the margin covers). Counting
        the offered tools' schemas instead under-counted the answer-only turn of a run with the
        default tools by ~1,000 characters (the instruction of 5 tools against the schema of
        `submit_answer`), taken from the answer's reserve, and over-counted a search turn.
        Elsewhere the turn's own tools travel, each with its schema."""
        if not self.calls_forced or not self.tools:
            return sum(t.schema_chars for t in tools)
        return self._instruction_chars

    @cached_property
    def _instruction_chars(self) -> int:
        """The forced instruction of the run's tools, as the gateway renders it."""
        return len(instruction([t.spec for t in self.tools], forced=True))

    def prune(self, tools: Sequence[Tool]) -> None:
        """Layer 2, before each call: old tool results trimmed, then cleared, as the window
        fills."""
        self.exchanges = prune_tool_results(
            self.exchanges,
            self.window,
            fixed_chars=self.fixed_chars(tools),
            soft_ratio=self.settings.soft_trim_ratio,
            hard_ratio=self.settings.hard_clear_ratio,
        )

    def over_budget(
        self, tools: Sequence[Tool], answer_only: Sequence[Tool], spent: Callable[[], int]
    ) -> bool:
        """Whether the next call with `tools` would spend more than the token budget (`spent()`:
        the tokens spent so far, asked only when the run has a budget). A search turn also keeps
        the answer-only call after it inside the budget: that call reads at least the same
        conversation and writes the answer."""
        if not self.request.max_tokens:
            return False
        conversation = total_chars(self.messages()) - len(self.system_prompt)
        cost = estimate_tokens(conversation + self.fixed_chars(tools)) + ANSWER_OUTPUT_TOKENS
        if list(tools) != list(answer_only):
            answer_chars = conversation + self.fixed_chars(answer_only)
            cost += estimate_tokens(answer_chars) + ANSWER_OUTPUT_TOKENS
        return spent() + cost > self.request.max_tokens

    async def compact(
        self,
        model: ModelClient,
        route: str,
        deadline: Deadline,
        steps: Sequence[StepRecord],
        count: Callable[[TokenUsage], None],
    ) -> None:
        """Layer 3: the older exchanges summarised (from their step records, the original
        results, not what Layer 2 pruned), the last `keep_last_exchanges` kept whole. Raises
        `ConversationTooLong` when there is nothing to compact or the summary fails."""
        split = split_for_compaction(self.exchanges, self.settings.keep_last_exchanges)
        if split is None:
            raise ConversationTooLong
        recorded = {s.index: s for s in steps}
        prompt = summary_prompt(
            self._task(),
            self.summary,
            split.old,
            max_chars=self.window * CHARS_PER_TOKEN // 2,
            steps={
                m.step: transcript([recorded[m.step]])[0] for m in split.old if m.step in recorded
            },
        )
        request = StructuredRequest(
            route=route,
            messages=(system(SUMMARY_SYSTEM_PROMPT), user(prompt)),
            schema=tool_schema(ConversationSummary),
            schema_name="ConversationSummary",
        )
        try:
            response = await model.generate_structured(request, remaining_s=deadline.remaining())
            count(response.usage)
            summary = ConversationSummary.model_validate_json(response.json_text)
        except (ContextWindowExceeded, ValidationError) as error:
            raise ConversationTooLong from error
        self.summary = summary.render()
        self.exchanges = split.recent
