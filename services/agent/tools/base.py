"""What a tool is: one object that owns its name, its argument model (= its JSON schema), its
prompt line, its execution, the event it emits and how its output is shown to the model.

A tool is a `Tool` subclass in a module of its own (`tools/<name>.py`); the `ToolRegistry`
(`registry.py`) offers the tools a run allows and finds a call's tool by name. The loop never
names a tool: it asks the registry, reads the tool's flags (`uses_search`, `parallel`,
`answers`, `needs_caller`) and calls `run`. See `README.md` (how to add a tool).

A tool changes no state of the run: each call returns a `ToolOutcome` (the tool result for the
model, the event for the caller, the results it showed) that the loop applies. So several calls
can run at once, and every outcome is a record of what the call did. Failures the run cannot
continue after (a dependency unavailable, the deadline, cancellation, refused credentials, a bad
caller filter) are raised; every other failure is a tool error the model can act on, and still
emits the tool's event, with its error.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import resources
from typing import Any, ClassVar, Literal, TypeVar

from opentelemetry import trace
from pydantic import BaseModel, ValidationError

from services.agent.config import LoopSettings
from services.agent.expand import RunExpansions
from services.agent.messages import ToolCall
from services.agent.ports import ModelClient, SearchClient, TokenUsage, ToolSpec
from services.agent.questions import QuestionChannel
from services.agent.run import Deadline, RunRequest, StepEvent
from services.agent.search import SearchHit
from services.common import semconv
from services.common.errors import (
    Cancelled,
    DeadlineExceeded,
    FieldViolation,
    InvalidArgument,
    PermissionDenied,
    QuarryError,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

FAILURES_THAT_END_THE_RUN = (
    Unavailable,
    DeadlineExceeded,
    ResourceExhausted,
    Cancelled,
    Unauthenticated,
    PermissionDenied,
)
"""A dependency's failures a run cannot continue after: raised, never shown to the model."""

Offer = Literal["standard", "opt_in", "always"]


@dataclass(frozen=True, kw_only=True)
class ToolEvent(StepEvent):
    """The base of every tool's event (a frozen dataclass with `iteration`; `step` from the
    base, set by the tool from `ToolContext.step`).

    `WIRE_FIELD` names the `StreamRunResponse` field that carries it; `wire()` is the event's
    own fields in the protobuf JSON mapping of that message (field names as in the proto; the
    edge adds `step`), so the API edge (`convert.event_message`) converts a new tool's event
    without knowing it."""

    WIRE_FIELD: ClassVar[str]

    def wire(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class ToolOutcome:
    """What one tool call produced."""

    call: ToolCall
    text: str
    """The tool result the model reads."""
    is_error: bool = False
    event: ToolEvent | None = None
    """What the caller is told; None for a call refused before its tool ran."""
    shown: tuple[SearchHit, ...] = ()
    """Results the model was shown (they become citable)."""
    previewed: tuple[SearchHit, ...] = ()
    """Results shown only as previews (goal-aware context)."""
    read_in_full: tuple[str, ...] = ()
    """Ids of results whose full text the model has now read (a `read`)."""
    found: tuple[SearchHit, ...] = ()
    """Every result a search returned, shown or not (fills the caller's `limit`)."""
    arguments: str = ""
    """The validated arguments (JSON, defaults filled in); empty when they did not validate."""
    duration_ms: int = 0
    """Time spent in a dependency (0 for local or refused calls)."""
    total_count: int = 0
    """Search: matching results; read: chunks of the document; count: documents counted."""
    ran: bool = False
    """The tool did its work (a search that reached the search tool and returned): only such
    calls count against the search cap and in the usage."""
    answer: BaseModel | None = None
    """An answering tool's validated answer, for the loop's answer acceptance."""
    usage: TokenUsage | None = None
    """Model tokens the call spent through the gateway (`summarize`): counted as a model call,
    in the step's record, the run's usage and its token budget."""
    condensed: tuple[str, ...] = ()
    """Ids of results whose texts this call's result stands for (a summary): the loop replaces
    their texts in earlier tool results with a pointer to this call (`context.condense_results`),
    keeping each result's `### [id] title` line, so they stay citable."""
    then: Callable[[], Awaitable[ToolOutcome]] | None = field(default=None, compare=False)
    """A call that goes on after its event is streamed (`ask_user`: the question is shown,
    then the run waits for the answer): the loop streams `event`, then awaits `then()`."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use during one call."""

    request: RunRequest
    deadline: Deadline
    search: SearchClient
    model: ModelClient
    settings: LoopSettings
    budget_chars: int
    """Layer 1: the most characters one tool result may take."""
    seen: Mapping[str, SearchHit]
    """The results the model has been shown so far, by id."""
    questions: QuestionChannel | None
    """The caller's question channel; None when the caller cannot be asked."""
    log_fields: Mapping[str, object]
    iteration: int = 0
    """Search tools: this search's number (from 1); others: the searches done before."""
    route: str = ""
    """The run's LLM gateway route (a tool that asks the gateway uses it)."""
    step: int = 0
    """The step (model turn, from 1) the call belongs to: the `step` of the event it emits."""
    expansions: RunExpansions = field(default_factory=RunExpansions)
    """The run's query expansions (`loop.expand_queries`): a query is expanded once a run."""
    keyword_language: str = ""
    """The collection's keyword language, as the search tool reported it (empty: unknown)."""

    def failed(self, call: ToolCall, text: str, event: ToolEvent | None = None) -> ToolOutcome:
        """A tool error for the model: logged, and marked on the current span."""
        log.info("tool error", extra={**self.log_fields, "tool": call.name, "error": text[:200]})
        trace.get_current_span().set_attribute(semconv.ERROR_TYPE, "tool_error")
        return ToolOutcome(call, text, is_error=True, event=event)

    def search_tool_error(
        self,
        call: ToolCall,
        error: QuarryError,
        what: str,
        event: Callable[[str], ToolEvent] | None = None,
    ) -> ToolOutcome:
        """A failed search tool call: raised when the run cannot go on, else a tool error with
        `event(text)`, the tool's event carrying the error the model reads."""
        if isinstance(error, FAILURES_THAT_END_THE_RUN):
            raise error
        if isinstance(error, InvalidArgument) and names_caller_filter(error):
            raise as_callers_error(error) from None
        text = search_error_text(error, what=what)
        return self.failed(call, text, None if event is None else event(text))


class Tool(ABC):
    """One tool (see the module docstring). Subclasses set the class attributes and `run`."""

    name: ClassVar[str]
    description: ClassVar[str]
    """What the model reads in the tool list of its request."""
    arguments: ClassVar[type[BaseModel]]
    """Validates the arguments; its JSON schema is the tool's parameters."""
    prompt_line: ClassVar[str]
    """The tool's line in the system prompt's tool list (`- `name`: ...`)."""
    position: ClassVar[int] = 100
    """Where the tool is offered among those of its `offer` (lower first)."""
    offer: ClassVar[Offer] = "standard"
    """standard: offered unless the request names others; opt_in: only when named; always:
    whatever the request names (the answering tool)."""
    uses_search: ClassVar[bool] = False
    """A call is one search attempt: it counts against the run's search cap."""
    parallel: ClassVar[bool] = False
    """Consecutive calls of one turn may run concurrently (THINKING mode)."""
    answers: ClassVar[bool] = False
    """The tool submits the final answer: the answer-only call offers only it."""
    opens: ClassVar[bool] = False
    """A FAST run on a route whose replies are forced tool calls opens with this tool alone
    (`ToolRegistry.turn`): the run does it before it may answer."""
    needs_caller: ClassVar[bool] = False
    """The tool talks to the caller while the run waits: offered on a stream only."""
    permission: ClassVar[str] = ""
    """An `ApiKey` permission (a boolean field, e.g. `web_search`) the caller's key must grant
    for a request to name the tool; "" when none is needed."""

    @cached_property
    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, tool_schema(self.arguments))

    @cached_property
    def schema_chars(self) -> int:
        """What the tool's schema and description add to every request (the budget's
        estimate; computed once)."""
        return len(json.dumps(self.spec.parameters)) + len(self.spec.description)

    def spec_for(self, seen: Collection[str]) -> ToolSpec:
        """The spec offered in a turn where the model has seen the results `seen`; a tool whose
        schema depends on the run (e.g. an enum of citable ids) overrides it."""
        return self.spec

    def route(self, question: str, limit: int) -> str | None:
        """The step-0 router (seed 003): when the model's first turn makes no tool call, the
        agent runs the first tool whose `route` gives arguments (JSON) for `question`, the
        specific tools before the searches; None: this tool does not fit the question."""
        return None

    @cached_property
    def guidance(self) -> str:
        """Extra guidance for the system prompt (`prompts/tool_<name>.md`, when there is one)."""
        path = resources.files("services.agent.prompts").joinpath(f"tool_{self.name}.md")
        return path.read_text("utf-8") if path.is_file() else ""

    @abstractmethod
    async def run(self, call: ToolCall, context: ToolContext) -> ToolOutcome:
        """Execute one call (the loop has opened its `execute_tool` span)."""


class ToolArgumentsError(ValueError):
    """Tool arguments the model must correct; the message tells it how."""


def parse_arguments(model: type[M], arguments_json: str) -> M:
    """Validate a tool call's arguments, or explain to the model what to fix."""
    try:
        raw = json.loads(arguments_json or "{}")
    except json.JSONDecodeError as error:
        raise ToolArgumentsError(
            f"The arguments are not valid JSON ({error.msg} at position {error.pos}). "
            "Call the tool again with a JSON object matching its schema."
        ) from error
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in error.errors()
        )
        raise ToolArgumentsError(
            f"The arguments do not match the schema: {problems}. Fix them and call again."
        ) from error


def tool_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema, `$ref`s inlined and titles removed, ready for any provider."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    return _inline(schema, definitions)  # type: ignore[no-any-return]


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline(merged, definitions)
        return {
            k: _inline(v, definitions)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    return node


def search_error_text(error: QuarryError, *, what: str = "search") -> str:
    text = f"The {what} failed: {error.message}."
    if isinstance(error, InvalidArgument) and error.violations:
        fixes = "; ".join(f"{v.field}: {v.description}" for v in error.violations)
        text += f" Fix these and {what} again: {fixes}."
    return text


_CALLER_FILTER = "caller_filter"
_REQUEST_FILTER = "filter"
"""The run request's field that carries the caller's filter."""


def names_caller_filter(error: InvalidArgument) -> bool:
    return any(v.field.startswith(_CALLER_FILTER) for v in error.violations)


def as_callers_error(error: InvalidArgument) -> InvalidArgument:
    """The search tool's verdict on the caller's filter, in the caller's terms: its request field
    is `filter`. Violations of the model's own filter are not the caller's concern."""
    violations = [
        FieldViolation(_REQUEST_FILTER + v.field.removeprefix(_CALLER_FILTER), v.description)
        for v in error.violations
        if v.field.startswith(_CALLER_FILTER)
    ]
    return InvalidArgument(
        "; ".join(f"{v.field}: {v.description}" for v in violations) or error.message,
        violations=violations,
        reason=error.reason,
        metadata=error.metadata,
    )


def filter_wire(groups: Collection[Any]) -> dict[str, Any]:
    """The model's filter groups in the JSON mapping of `quarry.common.v1.Filter`."""
    return {
        "groups": [
            {
                "conditions": [
                    {
                        "field": c.field,
                        "operator": "FILTER_OPERATOR_" + c.operator.upper(),
                        "value": c.value,
                    }
                    for c in g.conditions
                ]
            }
            for g in groups
        ]
    }
