"""The protobuf edge: requests to the domain model (validated, naming the bad field), responses
and attempts back, and routed-request failures to the statuses callers see.

Every rule about a single field (roles, names, ranges, JSON schemas) is checked here, once; the
rules spanning messages (who speaks first, calls paired with results) are `validate_conversation`'s.
Past the edge, domain objects are trusted.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.common import errors as status
from services.common.errors import (
    CONTEXT_WINDOW_EXCEEDED,
    FieldViolation,
    InvalidArgument,
    shown,
)
from services.llm_gateway.attempts import (
    AllProvidersFailed,
    Attempt,
    AttemptOutcome,
    ChainError,
    DeadlineReached,
    RequestRejected,
    RequestTooLarge,
    RouteNotFound,
)
from services.llm_gateway.breaker import BreakerState
from services.llm_gateway.chain import ChainLink
from services.llm_gateway.conversation import TOOL_NAME
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Message,
    Role,
    StopReason,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolChoiceMode,
    Usage,
)
from services.llm_gateway.schema_check import SchemaChecker, SchemaProblem
from services.llm_gateway.tokens import count_text_tokens

_DEFAULT_RETRY_AFTER_S = 1.0

_ROLES = {
    pb.ROLE_SYSTEM: Role.SYSTEM,
    pb.ROLE_USER: Role.USER,
    pb.ROLE_ASSISTANT: Role.ASSISTANT,
    pb.ROLE_TOOL: Role.TOOL,
}
_CHOICES = {
    pb.TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode.AUTO,
    pb.TOOL_CHOICE_MODE_AUTO: ToolChoiceMode.AUTO,
    pb.TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode.REQUIRED,
    pb.TOOL_CHOICE_MODE_NONE: ToolChoiceMode.NONE,
    pb.TOOL_CHOICE_MODE_NAMED: ToolChoiceMode.NAMED,
}
_STOPS = {
    StopReason.END_TURN: pb.STOP_REASON_END_TURN,
    StopReason.TOOL_USE: pb.STOP_REASON_TOOL_USE,
    StopReason.MAX_TOKENS: pb.STOP_REASON_MAX_TOKENS,
    StopReason.CONTENT_FILTER: pb.STOP_REASON_CONTENT_FILTER,
}
_OUTCOMES = {
    AttemptOutcome.SUCCESS: pb.ATTEMPT_OUTCOME_SUCCESS,
    AttemptOutcome.RETRYABLE_ERROR: pb.ATTEMPT_OUTCOME_RETRYABLE_ERROR,
    AttemptOutcome.FATAL_ERROR: pb.ATTEMPT_OUTCOME_FATAL_ERROR,
    AttemptOutcome.CONTEXT_WINDOW_EXCEEDED: pb.ATTEMPT_OUTCOME_CONTEXT_WINDOW_EXCEEDED,
    AttemptOutcome.SKIPPED_BREAKER_OPEN: pb.ATTEMPT_OUTCOME_SKIPPED_BREAKER_OPEN,
    AttemptOutcome.SKIPPED_CONTEXT_WINDOW: pb.ATTEMPT_OUTCOME_SKIPPED_CONTEXT_WINDOW,
    AttemptOutcome.CANCELLED: pb.ATTEMPT_OUTCOME_CANCELLED,
}
_BREAKER_STATES = {
    BreakerState.CLOSED: pb.BREAKER_STATE_CLOSED,
    BreakerState.OPEN: pb.BREAKER_STATE_OPEN,
    BreakerState.HALF_OPEN: pb.BREAKER_STATE_HALF_OPEN,
}


SCHEMAS = SchemaChecker()
"""The process's remembered schema verdicts."""


def chat_request(
    request: pb.GenerateRequest | pb.StreamGenerateRequest, *, schemas: SchemaChecker = SCHEMAS
) -> ChatRequest:
    """The domain request; `InvalidArgument` naming the field when it is malformed."""
    messages = messages_of(request.messages)
    _check_tools_size(request.tools)
    tools = tuple(_tool(tool, index, schemas) for index, tool in enumerate(request.tools))
    _check_unique_tools(tools)
    choice = _tool_choice(request.tool_choice, tools)
    return ChatRequest(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        max_output_tokens=_max_tokens(request),
        temperature=_temperature(request),
        seed=request.seed if request.HasField("seed") else None,
        parallel_tool_calls=(
            request.parallel_tool_calls if request.HasField("parallel_tool_calls") else None
        ),
        top_logprobs=_top_logprobs(request),
    )


def messages_of(messages: Any) -> tuple[Message, ...]:
    if not messages:
        raise InvalidArgument.for_field("messages", "at least one message is required")
    return tuple(_message(message, index) for index, message in enumerate(messages))


def parse_schema(
    text: str, field_path: str, *, require_object: bool = False, schemas: SchemaChecker = SCHEMAS
) -> dict[str, Any]:
    """A JSON schema from its serialised form, checked against the JSON Schema meta-schema (once
    per distinct text: the agent sends the same tool schemas on every turn)."""
    try:
        schema = schemas.parse(text) if text.strip() else {"type": "object", "properties": {}}
    except SchemaProblem as problem:
        raise InvalidArgument.for_field(field_path, str(problem)) from None
    if require_object and schema.get("type", "object") != "object":
        raise InvalidArgument.for_field(field_path, "the schema must describe an object")
    return dict(schema)


def generate_response(
    response: ChatResponse, provider: str, attempts: list[Attempt], *, provider_kind: str = ""
) -> pb.GenerateResponse:
    return pb.GenerateResponse(
        message=pb.Message(
            role=pb.ROLE_ASSISTANT,
            text=response.text,
            tool_calls=[
                pb.ToolCall(id=c.id, name=c.name, arguments_json=c.arguments_json)
                for c in response.tool_calls
            ],
        ),
        stop_reason=_STOPS[response.stop_reason],
        usage=usage_message(response.usage),
        provider=provider,
        provider_kind=provider_kind,
        model=response.model,
        attempts=[attempt_message(a) for a in attempts],
        first_token_logprobs=[
            pb.TokenLogprob(token=token, logprob=logprob)
            for token, logprob in response.first_token_logprobs
        ],
    )


def delta_message(delta: TextDelta | ToolCallDelta) -> pb.StreamGenerateResponse:
    if isinstance(delta, TextDelta):
        return pb.StreamGenerateResponse(text_delta=pb.TextDelta(text=delta.text))
    return pb.StreamGenerateResponse(
        tool_call_delta=pb.ToolCallDelta(
            index=delta.index, id=delta.id, name=delta.name, arguments_delta=delta.arguments_delta
        )
    )


def usage_message(usage: Usage) -> pb.Usage:
    return pb.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=usage.cost_usd,
    )


def attempt_message(attempt: Attempt) -> pb.Attempt:
    return pb.Attempt(
        provider=attempt.provider,
        model=attempt.model,
        outcome=_OUTCOMES[attempt.outcome],
        error=attempt.error,
        latency_ms=attempt.latency_ms,
        try_number=attempt.try_number,
    )


def provider_status(link: ChainLink) -> pb.ProviderStatus:
    breaker = link.breaker
    health = breaker.health
    message = pb.ProviderStatus(
        name=link.provider.name,
        kind=link.provider.kind,
        model=link.provider.model,
        breaker_state=_BREAKER_STATES[breaker.state],
        consecutive_failures=breaker.consecutive_failures,
        last_error=health.last_error,
        requests=health.requests,
        successes=health.successes,
        failures=health.failures,
        context_window_tokens=link.provider.context_window_tokens,
        # Only providers that hold tool arguments to their schemas define the property.
        enforces_tool_schemas=bool(getattr(link.provider, "enforces_tool_schemas", False)),
        forces_tool_calls=bool(getattr(link.provider, "forces_tool_calls", False)),
    )
    if health.last_error_at is not None:
        stamp = Timestamp()
        stamp.FromDatetime(health.last_error_at)
        message.last_error_at.CopyFrom(stamp)
    return message


def quarry_error(error: ChainError) -> status.QuarryError:
    """The one mapping of a failed routed request to the status the caller sees."""
    metadata = {"attempts": _attempts_json(error.attempts)} if error.attempts else {}
    if isinstance(error, RouteNotFound):
        return status.NotFound(error.message, metadata={"route": error.route})
    if isinstance(error, RequestTooLarge):
        return InvalidArgument(
            error.message,
            reason=CONTEXT_WINDOW_EXCEEDED,
            violations=[FieldViolation("messages", error.message)],
            metadata={
                **metadata,
                "provider": error.provider,
                "model": error.model,
                "context_window_tokens": str(error.context_window_tokens),
            },
        )
    if isinstance(error, RequestRejected):
        return InvalidArgument(
            error.message,
            reason="REQUEST_REJECTED_BY_PROVIDER",
            violations=[FieldViolation("messages", error.message)],
            metadata=metadata,
        )
    if isinstance(error, DeadlineReached):
        return status.DeadlineExceeded(error.message, metadata=metadata)
    if isinstance(error, AllProvidersFailed) and error.rate_limited_everywhere:
        return status.ResourceExhausted(
            "every provider of the route is rate limited",
            reason="RATE_LIMITED",
            retry_after_s=error.retry_after_s or _DEFAULT_RETRY_AFTER_S,
            metadata=metadata,
        )
    retry_after = error.retry_after_s if isinstance(error, AllProvidersFailed) else None
    return status.Unavailable(
        error.message, reason=error.reason, retry_after_s=retry_after, metadata=metadata
    )


def _attempts_json(attempts: list[Attempt]) -> str:
    return json.dumps(
        [
            {
                "provider": a.provider,
                "model": a.model,
                "outcome": a.outcome.value,
                "try_number": a.try_number,
                "latency_ms": round(a.latency_ms, 1),
                "error": a.error,
            }
            for a in attempts
        ]
    )


def _message(message: pb.Message, index: int) -> Message:
    path = f"messages[{index}]"
    role = _ROLES.get(message.role)
    if role is None:
        raise InvalidArgument.for_field(f"{path}.role", "must be system, user, assistant or tool")
    if message.tool_calls and role is not Role.ASSISTANT:
        raise InvalidArgument.for_field(f"{path}.tool_calls", "only assistant messages call tools")
    if role is Role.TOOL and not message.tool_call_id:
        raise InvalidArgument.for_field(
            f"{path}.tool_call_id", "a tool message must name the call it answers"
        )
    calls = []
    for number, call in enumerate(message.tool_calls):
        if not call.id:
            raise InvalidArgument.for_field(f"{path}.tool_calls[{number}].id", "must not be empty")
        if not TOOL_NAME.match(call.name):
            raise InvalidArgument.for_field(
                f"{path}.tool_calls[{number}].name", "must match ^[A-Za-z0-9_-]{1,128}$"
            )
        calls.append(ToolCall(id=call.id, name=call.name, arguments_json=call.arguments_json))
    return Message(
        role=role,
        text=message.text,
        tool_calls=tuple(calls),
        tool_call_id=message.tool_call_id,
        is_error=message.is_error,
    )


def _tool(tool: pb.Tool, index: int, schemas: SchemaChecker) -> Tool:
    if not TOOL_NAME.match(tool.name):
        raise InvalidArgument.for_field(f"tools[{index}].name", "must match ^[A-Za-z0-9_-]{1,128}$")
    parameters = parse_schema(
        tool.parameters_json,
        f"tools[{index}].parameters_json",
        require_object=True,
        schemas=schemas,
    )
    return Tool(
        name=tool.name,
        description=tool.description,
        parameters=parameters,
        parameters_tokens=count_text_tokens(tool.parameters_json),
    )


MAX_TOOLS_CHARS = 65_536
"""All tools of one request together: names, descriptions and parameter schemas, in characters.
Each distinct schema is checked once (`MAX_SCHEMA_CHARS` each); without a total one request could
bring a thousand distinct ones (minutes of the event loop)."""


def _check_tools_size(tools: Any) -> None:
    total = sum(len(t.name) + len(t.description) + len(t.parameters_json) for t in tools)
    if total > MAX_TOOLS_CHARS:
        raise InvalidArgument.for_field(
            "tools",
            f"{total} characters of names, descriptions and schemas in all; "
            f"the limit is {MAX_TOOLS_CHARS}",
        )


def _check_unique_tools(tools: tuple[Tool, ...]) -> None:
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        if tool.name in seen:
            raise InvalidArgument.for_field(
                f"tools[{index}].name", f"{shown(tool.name)} is declared twice"
            )
        seen.add(tool.name)


def _tool_choice(choice: pb.ToolChoice, tools: tuple[Tool, ...]) -> ToolChoice:
    mode = _CHOICES.get(choice.mode)
    if mode is None:
        raise InvalidArgument.for_field("tool_choice.mode", "unknown tool choice mode")
    names = {t.name for t in tools}
    allowed = tuple(choice.allowed)
    for index, name in enumerate(allowed):
        if name not in names:
            raise InvalidArgument.for_field(
                f"tool_choice.allowed[{index}]", "must name one of the offered tools"
            )
        if name in allowed[:index]:
            raise InvalidArgument.for_field(f"tool_choice.allowed[{index}]", "is named twice")
    if mode is ToolChoiceMode.NAMED and choice.name not in names:
        raise InvalidArgument.for_field("tool_choice.name", "must name one of the offered tools")
    if mode is ToolChoiceMode.NAMED and allowed and choice.name not in allowed:
        raise InvalidArgument.for_field("tool_choice.name", "must be one of the allowed tools")
    if mode is ToolChoiceMode.REQUIRED and not tools:
        raise InvalidArgument.for_field("tool_choice.mode", "REQUIRED needs at least one tool")
    return ToolChoice(
        mode=mode, name=choice.name if mode is ToolChoiceMode.NAMED else "", allowed=allowed
    )


MAX_TOP_LOGPROBS = 20
"""OpenAI's bound on `top_logprobs`."""


def _top_logprobs(request: Any) -> int | None:
    if not isinstance(request, pb.GenerateRequest) or not request.HasField("top_logprobs"):
        return None
    if not 1 <= request.top_logprobs <= MAX_TOP_LOGPROBS:
        raise InvalidArgument.for_field("top_logprobs", f"must be 1..{MAX_TOP_LOGPROBS}")
    return int(request.top_logprobs)


def _max_tokens(request: Any) -> int | None:
    if not request.HasField("max_output_tokens"):
        return None
    if request.max_output_tokens <= 0:
        raise InvalidArgument.for_field("max_output_tokens", "must be positive")
    return int(request.max_output_tokens)


def _temperature(request: Any) -> float | None:
    if not request.HasField("temperature"):
        return None
    if not 0 <= request.temperature <= 2:
        raise InvalidArgument.for_field("temperature", "must be between 0 and 2")
    return float(request.temperature)
