import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_AUTO: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NAMED: _ClassVar[ToolChoiceMode]

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_END_TURN: _ClassVar[StopReason]
    STOP_REASON_TOOL_USE: _ClassVar[StopReason]
    STOP_REASON_MAX_TOKENS: _ClassVar[StopReason]
    STOP_REASON_CONTENT_FILTER: _ClassVar[StopReason]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SUCCESS: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RETRYABLE_ERROR: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_FATAL_ERROR: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CONTEXT_WINDOW_EXCEEDED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SKIPPED_BREAKER_OPEN: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_SKIPPED_CONTEXT_WINDOW: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CANCELLED: _ClassVar[AttemptOutcome]

class BreakerState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BREAKER_STATE_UNSPECIFIED: _ClassVar[BreakerState]
    BREAKER_STATE_CLOSED: _ClassVar[BreakerState]
    BREAKER_STATE_OPEN: _ClassVar[BreakerState]
    BREAKER_STATE_HALF_OPEN: _ClassVar[BreakerState]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
ROLE_TOOL: Role
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_AUTO: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_NAMED: ToolChoiceMode
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_END_TURN: StopReason
STOP_REASON_TOOL_USE: StopReason
STOP_REASON_MAX_TOKENS: StopReason
STOP_REASON_CONTENT_FILTER: StopReason
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_SUCCESS: AttemptOutcome
ATTEMPT_OUTCOME_RETRYABLE_ERROR: AttemptOutcome
ATTEMPT_OUTCOME_FATAL_ERROR: AttemptOutcome
ATTEMPT_OUTCOME_CONTEXT_WINDOW_EXCEEDED: AttemptOutcome
ATTEMPT_OUTCOME_SKIPPED_BREAKER_OPEN: AttemptOutcome
ATTEMPT_OUTCOME_SKIPPED_CONTEXT_WINDOW: AttemptOutcome
ATTEMPT_OUTCOME_CANCELLED: AttemptOutcome
BREAKER_STATE_UNSPECIFIED: BreakerState
BREAKER_STATE_CLOSED: BreakerState
BREAKER_STATE_OPEN: BreakerState
BREAKER_STATE_HALF_OPEN: BreakerState

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments_json: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "text", "tool_calls", "tool_call_id", "is_error")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    role: Role
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    is_error: bool
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "name", "allowed")
    MODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    name: str
    allowed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., name: _Optional[str] = ..., allowed: _Optional[_Iterable[str]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: float
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_read_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ..., cost_usd: _Optional[float] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("provider", "model", "outcome", "error", "latency_ms", "try_number")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    TRY_NUMBER_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    outcome: AttemptOutcome
    error: str
    latency_ms: float
    try_number: int
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., error: _Optional[str] = ..., latency_ms: _Optional[float] = ..., try_number: _Optional[int] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("route", "messages", "tools", "tool_choice", "max_output_tokens", "temperature", "seed", "parallel_tool_calls", "top_logprobs")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    route: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: ToolChoice
    max_output_tokens: int
    temperature: float
    seed: int
    parallel_tool_calls: bool
    top_logprobs: int
    def __init__(self, route: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., max_output_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., seed: _Optional[int] = ..., parallel_tool_calls: _Optional[bool] = ..., top_logprobs: _Optional[int] = ...) -> None: ...

class TokenLogprob(_message.Message):
    __slots__ = ("token", "logprob")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token: str
    logprob: float
    def __init__(self, token: _Optional[str] = ..., logprob: _Optional[float] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("message", "stop_reason", "context_window_exceeded", "usage", "provider", "model", "attempts", "first_token_logprobs", "provider_kind")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_KIND_FIELD_NUMBER: _ClassVar[int]
    message: Message
    stop_reason: StopReason
    context_window_exceeded: bool
    usage: Usage
    provider: str
    model: str
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    first_token_logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprob]
    provider_kind: str
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., context_window_exceeded: _Optional[bool] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., first_token_logprobs: _Optional[_Iterable[_Union[TokenLogprob, _Mapping]]] = ..., provider_kind: _Optional[str] = ...) -> None: ...

class StreamGenerateRequest(_message.Message):
    __slots__ = ("route", "messages", "tools", "tool_choice", "max_output_tokens", "temperature", "seed", "parallel_tool_calls")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    route: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: ToolChoice
    max_output_tokens: int
    temperature: float
    seed: int
    parallel_tool_calls: bool
    def __init__(self, route: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[ToolChoice, _Mapping]] = ..., max_output_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., seed: _Optional[int] = ..., parallel_tool_calls: _Optional[bool] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class ToolCallDelta(_message.Message):
    __slots__ = ("index", "id", "name", "arguments_delta")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_DELTA_FIELD_NUMBER: _ClassVar[int]
    index: int
    id: str
    name: str
    arguments_delta: str
    def __init__(self, index: _Optional[int] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_delta: _Optional[str] = ...) -> None: ...

class StreamGenerateResponse(_message.Message):
    __slots__ = ("text_delta", "tool_call_delta", "completed")
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_DELTA_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    text_delta: TextDelta
    tool_call_delta: ToolCallDelta
    completed: GenerateResponse
    def __init__(self, text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., tool_call_delta: _Optional[_Union[ToolCallDelta, _Mapping]] = ..., completed: _Optional[_Union[GenerateResponse, _Mapping]] = ...) -> None: ...

class GenerateStructuredRequest(_message.Message):
    __slots__ = ("route", "messages", "schema_json", "schema_name", "max_output_tokens", "temperature", "seed")
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    route: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    schema_json: str
    schema_name: str
    max_output_tokens: int
    temperature: float
    seed: int
    def __init__(self, route: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., schema_json: _Optional[str] = ..., schema_name: _Optional[str] = ..., max_output_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class GenerateStructuredResponse(_message.Message):
    __slots__ = ("json", "usage", "provider", "model", "attempts")
    JSON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    json: str
    usage: Usage
    provider: str
    model: str
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    def __init__(self, json: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProviderStatus(_message.Message):
    __slots__ = ("name", "kind", "model", "breaker_state", "consecutive_failures", "last_error", "last_error_at", "requests", "successes", "failures", "context_window_tokens", "enforces_tool_schemas", "forces_tool_calls")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BREAKER_STATE_FIELD_NUMBER: _ClassVar[int]
    CONSECUTIVE_FAILURES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_AT_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSES_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENFORCES_TOOL_SCHEMAS_FIELD_NUMBER: _ClassVar[int]
    FORCES_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    model: str
    breaker_state: BreakerState
    consecutive_failures: int
    last_error: str
    last_error_at: _timestamp_pb2.Timestamp
    requests: int
    successes: int
    failures: int
    context_window_tokens: int
    enforces_tool_schemas: bool
    forces_tool_calls: bool
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., model: _Optional[str] = ..., breaker_state: _Optional[_Union[BreakerState, str]] = ..., consecutive_failures: _Optional[int] = ..., last_error: _Optional[str] = ..., last_error_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., requests: _Optional[int] = ..., successes: _Optional[int] = ..., failures: _Optional[int] = ..., context_window_tokens: _Optional[int] = ..., enforces_tool_schemas: _Optional[bool] = ..., forces_tool_calls: _Optional[bool] = ...) -> None: ...

class RouteStatus(_message.Message):
    __slots__ = ("name", "chain")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    chain: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., chain: _Optional[_Iterable[str]] = ...) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("providers", "routes", "default_route")
    PROVIDERS_FIELD_NUMBER: _ClassVar[int]
    ROUTES_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ROUTE_FIELD_NUMBER: _ClassVar[int]
    providers: _containers.RepeatedCompositeFieldContainer[ProviderStatus]
    routes: _containers.RepeatedCompositeFieldContainer[RouteStatus]
    default_route: str
    def __init__(self, providers: _Optional[_Iterable[_Union[ProviderStatus, _Mapping]]] = ..., routes: _Optional[_Iterable[_Union[RouteStatus, _Mapping]]] = ..., default_route: _Optional[str] = ...) -> None: ...
