import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quarry.common.v1 import search_pb2 as _search_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    MODE_FAST: _ClassVar[Mode]
    MODE_THINKING: _ClassVar[Mode]

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_ANSWERED: _ClassVar[StopReason]
    STOP_REASON_FORCED_ANSWER: _ClassVar[StopReason]
    STOP_REASON_BUDGET_EXHAUSTED: _ClassVar[StopReason]
    STOP_REASON_FALLBACK_ANSWER: _ClassVar[StopReason]

class QuestionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUESTION_OUTCOME_UNSPECIFIED: _ClassVar[QuestionOutcome]
    QUESTION_OUTCOME_ANSWERED: _ClassVar[QuestionOutcome]
    QUESTION_OUTCOME_NOT_ACKNOWLEDGED: _ClassVar[QuestionOutcome]
    QUESTION_OUTCOME_NOT_ANSWERED: _ClassVar[QuestionOutcome]

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_COMPLETED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]
    RUN_STATUS_INTERRUPTED: _ClassVar[RunStatus]
MODE_UNSPECIFIED: Mode
MODE_FAST: Mode
MODE_THINKING: Mode
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_ANSWERED: StopReason
STOP_REASON_FORCED_ANSWER: StopReason
STOP_REASON_BUDGET_EXHAUSTED: StopReason
STOP_REASON_FALLBACK_ANSWER: StopReason
QUESTION_OUTCOME_UNSPECIFIED: QuestionOutcome
QUESTION_OUTCOME_ANSWERED: QuestionOutcome
QUESTION_OUTCOME_NOT_ACKNOWLEDGED: QuestionOutcome
QUESTION_OUTCOME_NOT_ANSWERED: QuestionOutcome
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELLED: RunStatus
RUN_STATUS_INTERRUPTED: RunStatus

class ConversationTurn(_message.Message):
    __slots__ = ("question", "answer")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    question: str
    answer: str
    def __init__(self, question: _Optional[str] = ..., answer: _Optional[str] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("max_iterations", "max_tokens")
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    max_iterations: int
    max_tokens: int
    def __init__(self, max_iterations: _Optional[int] = ..., max_tokens: _Optional[int] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("collection", "query", "filter", "mode", "limit", "history", "budget", "route", "tools", "temperature", "seed")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    collection: str
    query: str
    filter: _search_pb2.Filter
    mode: Mode
    limit: int
    history: _containers.RepeatedCompositeFieldContainer[ConversationTurn]
    budget: Budget
    route: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    temperature: float
    seed: int
    def __init__(self, collection: _Optional[str] = ..., query: _Optional[str] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., mode: _Optional[_Union[Mode, str]] = ..., limit: _Optional[int] = ..., history: _Optional[_Iterable[_Union[ConversationTurn, _Mapping]]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., route: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., temperature: _Optional[float] = ..., seed: _Optional[int] = ...) -> None: ...

class StreamRunRequest(_message.Message):
    __slots__ = ("collection", "query", "filter", "mode", "limit", "history", "budget", "route", "tools", "temperature", "seed", "question_windows")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    QUESTION_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    collection: str
    query: str
    filter: _search_pb2.Filter
    mode: Mode
    limit: int
    history: _containers.RepeatedCompositeFieldContainer[ConversationTurn]
    budget: Budget
    route: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    temperature: float
    seed: int
    question_windows: QuestionWindows
    def __init__(self, collection: _Optional[str] = ..., query: _Optional[str] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., mode: _Optional[_Union[Mode, str]] = ..., limit: _Optional[int] = ..., history: _Optional[_Iterable[_Union[ConversationTurn, _Mapping]]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., route: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., temperature: _Optional[float] = ..., seed: _Optional[int] = ..., question_windows: _Optional[_Union[QuestionWindows, _Mapping]] = ...) -> None: ...

class QuestionWindows(_message.Message):
    __slots__ = ("acknowledge_timeout_s", "answer_timeout_s")
    ACKNOWLEDGE_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    ANSWER_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    acknowledge_timeout_s: float
    answer_timeout_s: float
    def __init__(self, acknowledge_timeout_s: _Optional[float] = ..., answer_timeout_s: _Optional[float] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("result_id", "title", "url", "web")
    RESULT_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    WEB_FIELD_NUMBER: _ClassVar[int]
    result_id: str
    title: str
    url: str
    web: bool
    def __init__(self, result_id: _Optional[str] = ..., title: _Optional[str] = ..., url: _Optional[str] = ..., web: _Optional[bool] = ...) -> None: ...

class Answer(_message.Message):
    __slots__ = ("text", "citations", "confidence", "unanswered_parts")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    UNANSWERED_PARTS_FIELD_NUMBER: _ClassVar[int]
    text: str
    citations: _containers.RepeatedCompositeFieldContainer[Citation]
    confidence: float
    unanswered_parts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, text: _Optional[str] = ..., citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ..., confidence: _Optional[float] = ..., unanswered_parts: _Optional[_Iterable[str]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "model_calls", "searches", "tool_calls", "cost_usd")
    class ToolCallsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    model_calls: int
    searches: int
    tool_calls: _containers.ScalarMap[str, int]
    cost_usd: float
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_read_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ..., model_calls: _Optional[int] = ..., searches: _Optional[int] = ..., tool_calls: _Optional[_Mapping[str, int]] = ..., cost_usd: _Optional[float] = ...) -> None: ...

class AnsweredBy(_message.Message):
    __slots__ = ("provider", "model", "fallback", "fallback_reason")
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_REASON_FIELD_NUMBER: _ClassVar[int]
    provider: str
    model: str
    fallback: bool
    fallback_reason: str
    def __init__(self, provider: _Optional[str] = ..., model: _Optional[str] = ..., fallback: _Optional[bool] = ..., fallback_reason: _Optional[str] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("answer", "results", "stop_reason", "usage", "iterations", "run_id", "answered_by", "steps", "duration_ms")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    answer: Answer
    results: _containers.RepeatedCompositeFieldContainer[_search_pb2.SearchResult]
    stop_reason: StopReason
    usage: Usage
    iterations: int
    run_id: str
    answered_by: AnsweredBy
    steps: _containers.RepeatedCompositeFieldContainer[StepRecord]
    duration_ms: int
    def __init__(self, answer: _Optional[_Union[Answer, _Mapping]] = ..., results: _Optional[_Iterable[_Union[_search_pb2.SearchResult, _Mapping]]] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., iterations: _Optional[int] = ..., run_id: _Optional[str] = ..., answered_by: _Optional[_Union[AnsweredBy, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[StepRecord, _Mapping]]] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class StartedEvent(_message.Message):
    __slots__ = ("run_id", "collection", "mode", "route", "step")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    collection: str
    mode: Mode
    route: str
    step: int
    def __init__(self, run_id: _Optional[str] = ..., collection: _Optional[str] = ..., mode: _Optional[_Union[Mode, str]] = ..., route: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class ThinkingEvent(_message.Message):
    __slots__ = ("iteration", "text", "answered_by", "step")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    text: str
    answered_by: AnsweredBy
    step: int
    def __init__(self, iteration: _Optional[int] = ..., text: _Optional[str] = ..., answered_by: _Optional[_Union[AnsweredBy, _Mapping]] = ..., step: _Optional[int] = ...) -> None: ...

class SearchingEvent(_message.Message):
    __slots__ = ("iteration", "query", "strategy", "filter", "result_count", "total_count", "duration_ms", "error", "rerank", "expansion", "step")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    RESULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RERANK_FIELD_NUMBER: _ClassVar[int]
    EXPANSION_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    query: _search_pb2.SearchQuery
    strategy: _search_pb2.RetrievalStrategy
    filter: _search_pb2.Filter
    result_count: int
    total_count: int
    duration_ms: int
    error: str
    rerank: RerankSummary
    expansion: QueryExpansion
    step: int
    def __init__(self, iteration: _Optional[int] = ..., query: _Optional[_Union[_search_pb2.SearchQuery, _Mapping]] = ..., strategy: _Optional[_Union[_search_pb2.RetrievalStrategy, str]] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., result_count: _Optional[int] = ..., total_count: _Optional[int] = ..., duration_ms: _Optional[int] = ..., error: _Optional[str] = ..., rerank: _Optional[_Union[RerankSummary, _Mapping]] = ..., expansion: _Optional[_Union[QueryExpansion, _Mapping]] = ..., step: _Optional[int] = ...) -> None: ...

class QueryExpansion(_message.Message):
    __slots__ = ("passage", "failed", "duration_ms", "reused")
    PASSAGE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    REUSED_FIELD_NUMBER: _ClassVar[int]
    passage: str
    failed: bool
    duration_ms: int
    reused: bool
    def __init__(self, passage: _Optional[str] = ..., failed: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., reused: _Optional[bool] = ...) -> None: ...

class RerankSummary(_message.Message):
    __slots__ = ("judged", "answering", "failed", "duration_ms")
    JUDGED_FIELD_NUMBER: _ClassVar[int]
    ANSWERING_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    judged: int
    answering: int
    failed: int
    duration_ms: int
    def __init__(self, judged: _Optional[int] = ..., answering: _Optional[int] = ..., failed: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class ReadingEvent(_message.Message):
    __slots__ = ("iteration", "result_id", "document_id", "first_chunk", "chunks_shown", "chunk_count", "duration_ms", "error", "step")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    RESULT_ID_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_CHUNK_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_SHOWN_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    result_id: str
    document_id: str
    first_chunk: int
    chunks_shown: int
    chunk_count: int
    duration_ms: int
    error: str
    step: int
    def __init__(self, iteration: _Optional[int] = ..., result_id: _Optional[str] = ..., document_id: _Optional[str] = ..., first_chunk: _Optional[int] = ..., chunks_shown: _Optional[int] = ..., chunk_count: _Optional[int] = ..., duration_ms: _Optional[int] = ..., error: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class CountingEvent(_message.Message):
    __slots__ = ("iteration", "filter", "group_by", "document_count", "exact", "duration_ms", "error", "step")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    filter: _search_pb2.Filter
    group_by: _containers.RepeatedScalarFieldContainer[str]
    document_count: int
    exact: bool
    duration_ms: int
    error: str
    step: int
    def __init__(self, iteration: _Optional[int] = ..., filter: _Optional[_Union[_search_pb2.Filter, _Mapping]] = ..., group_by: _Optional[_Iterable[str]] = ..., document_count: _Optional[int] = ..., exact: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., error: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class CalculatingEvent(_message.Message):
    __slots__ = ("iteration", "expression", "result", "error", "step")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    expression: str
    result: str
    error: str
    step: int
    def __init__(self, iteration: _Optional[int] = ..., expression: _Optional[str] = ..., result: _Optional[str] = ..., error: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class DoneEvent(_message.Message):
    __slots__ = ("response", "step")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    response: RunResponse
    step: int
    def __init__(self, response: _Optional[_Union[RunResponse, _Mapping]] = ..., step: _Optional[int] = ...) -> None: ...

class ErrorEvent(_message.Message):
    __slots__ = ("code", "message", "retryable", "retry_after")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retryable: bool
    retry_after: _duration_pb2.Duration
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class QuestionEvent(_message.Message):
    __slots__ = ("run_id", "question_id", "text", "iteration", "acknowledge_within_ms", "answer_within_ms", "step")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGE_WITHIN_MS_FIELD_NUMBER: _ClassVar[int]
    ANSWER_WITHIN_MS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    question_id: str
    text: str
    iteration: int
    acknowledge_within_ms: int
    answer_within_ms: int
    step: int
    def __init__(self, run_id: _Optional[str] = ..., question_id: _Optional[str] = ..., text: _Optional[str] = ..., iteration: _Optional[int] = ..., acknowledge_within_ms: _Optional[int] = ..., answer_within_ms: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class QuestionClosedEvent(_message.Message):
    __slots__ = ("question_id", "outcome", "answer", "waited_ms", "step")
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    WAITED_MS_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    question_id: str
    outcome: QuestionOutcome
    answer: str
    waited_ms: int
    step: int
    def __init__(self, question_id: _Optional[str] = ..., outcome: _Optional[_Union[QuestionOutcome, str]] = ..., answer: _Optional[str] = ..., waited_ms: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class AnswerQuestionRequest(_message.Message):
    __slots__ = ("run_id", "question_id", "text")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    question_id: str
    text: str
    def __init__(self, run_id: _Optional[str] = ..., question_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class AnswerQuestionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AcknowledgeQuestionRequest(_message.Message):
    __slots__ = ("run_id", "question_id")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    QUESTION_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    question_id: str
    def __init__(self, run_id: _Optional[str] = ..., question_id: _Optional[str] = ...) -> None: ...

class AcknowledgeQuestionResponse(_message.Message):
    __slots__ = ("answer_within_ms",)
    ANSWER_WITHIN_MS_FIELD_NUMBER: _ClassVar[int]
    answer_within_ms: int
    def __init__(self, answer_within_ms: _Optional[int] = ...) -> None: ...

class StreamRunResponse(_message.Message):
    __slots__ = ("started", "thinking", "searching", "done", "error", "calculating", "reading", "counting", "question", "question_closed", "web_searching", "summarizing")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    SEARCHING_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CALCULATING_FIELD_NUMBER: _ClassVar[int]
    READING_FIELD_NUMBER: _ClassVar[int]
    COUNTING_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    QUESTION_CLOSED_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCHING_FIELD_NUMBER: _ClassVar[int]
    SUMMARIZING_FIELD_NUMBER: _ClassVar[int]
    started: StartedEvent
    thinking: ThinkingEvent
    searching: SearchingEvent
    done: DoneEvent
    error: ErrorEvent
    calculating: CalculatingEvent
    reading: ReadingEvent
    counting: CountingEvent
    question: QuestionEvent
    question_closed: QuestionClosedEvent
    web_searching: WebSearchingEvent
    summarizing: SummarizingEvent
    def __init__(self, started: _Optional[_Union[StartedEvent, _Mapping]] = ..., thinking: _Optional[_Union[ThinkingEvent, _Mapping]] = ..., searching: _Optional[_Union[SearchingEvent, _Mapping]] = ..., done: _Optional[_Union[DoneEvent, _Mapping]] = ..., error: _Optional[_Union[ErrorEvent, _Mapping]] = ..., calculating: _Optional[_Union[CalculatingEvent, _Mapping]] = ..., reading: _Optional[_Union[ReadingEvent, _Mapping]] = ..., counting: _Optional[_Union[CountingEvent, _Mapping]] = ..., question: _Optional[_Union[QuestionEvent, _Mapping]] = ..., question_closed: _Optional[_Union[QuestionClosedEvent, _Mapping]] = ..., web_searching: _Optional[_Union[WebSearchingEvent, _Mapping]] = ..., summarizing: _Optional[_Union[SummarizingEvent, _Mapping]] = ...) -> None: ...

class WebSearchingEvent(_message.Message):
    __slots__ = ("iteration", "query", "result_count", "provider", "cached", "duration_ms", "error", "step")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    RESULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    query: str
    result_count: int
    provider: str
    cached: bool
    duration_ms: int
    error: str
    step: int
    def __init__(self, iteration: _Optional[int] = ..., query: _Optional[str] = ..., result_count: _Optional[int] = ..., provider: _Optional[str] = ..., cached: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., error: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class SummarizingEvent(_message.Message):
    __slots__ = ("iteration", "result_ids", "focus", "point_count", "cited_ids", "input_chars", "duration_ms", "error", "step")
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    RESULT_IDS_FIELD_NUMBER: _ClassVar[int]
    FOCUS_FIELD_NUMBER: _ClassVar[int]
    POINT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CITED_IDS_FIELD_NUMBER: _ClassVar[int]
    INPUT_CHARS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    iteration: int
    result_ids: _containers.RepeatedScalarFieldContainer[str]
    focus: str
    point_count: int
    cited_ids: _containers.RepeatedScalarFieldContainer[str]
    input_chars: int
    duration_ms: int
    error: str
    step: int
    def __init__(self, iteration: _Optional[int] = ..., result_ids: _Optional[_Iterable[str]] = ..., focus: _Optional[str] = ..., point_count: _Optional[int] = ..., cited_ids: _Optional[_Iterable[str]] = ..., input_chars: _Optional[int] = ..., duration_ms: _Optional[int] = ..., error: _Optional[str] = ..., step: _Optional[int] = ...) -> None: ...

class ToolCallRecord(_message.Message):
    __slots__ = ("call_id", "name", "arguments_json", "validated_arguments_json", "started_at", "duration_ms", "result_ids", "error", "total_count", "previewed_ids", "output", "results", "web")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    VALIDATED_ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    RESULT_IDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREVIEWED_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    WEB_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    arguments_json: str
    validated_arguments_json: str
    started_at: _timestamp_pb2.Timestamp
    duration_ms: int
    result_ids: _containers.RepeatedScalarFieldContainer[str]
    error: str
    total_count: int
    previewed_ids: _containers.RepeatedScalarFieldContainer[str]
    output: str
    results: _containers.RepeatedCompositeFieldContainer[_search_pb2.SearchResult]
    web: bool
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments_json: _Optional[str] = ..., validated_arguments_json: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration_ms: _Optional[int] = ..., result_ids: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ..., total_count: _Optional[int] = ..., previewed_ids: _Optional[_Iterable[str]] = ..., output: _Optional[str] = ..., results: _Optional[_Iterable[_Union[_search_pb2.SearchResult, _Mapping]]] = ..., web: _Optional[bool] = ...) -> None: ...

class StepRecord(_message.Message):
    __slots__ = ("index", "text", "tool_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "answered_by", "started_at", "model_ms", "duration_ms", "offered_tools", "compacted")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    MODEL_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    OFFERED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCallRecord]
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    answered_by: AnsweredBy
    started_at: _timestamp_pb2.Timestamp
    model_ms: int
    duration_ms: int
    offered_tools: _containers.RepeatedScalarFieldContainer[str]
    compacted: bool
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCallRecord, _Mapping]]] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_read_tokens: _Optional[int] = ..., cache_write_tokens: _Optional[int] = ..., answered_by: _Optional[_Union[AnsweredBy, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., model_ms: _Optional[int] = ..., duration_ms: _Optional[int] = ..., offered_tools: _Optional[_Iterable[str]] = ..., compacted: _Optional[bool] = ...) -> None: ...

class RunRecord(_message.Message):
    __slots__ = ("run_id", "collection", "status", "request", "response", "steps", "events", "started_at", "ended_at", "error_code", "error_message", "caller", "loop_settings_json", "context_window_tokens", "route")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    LOOP_SETTINGS_JSON_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    collection: str
    status: RunStatus
    request: RunRequest
    response: RunResponse
    steps: _containers.RepeatedCompositeFieldContainer[StepRecord]
    events: _containers.RepeatedCompositeFieldContainer[StreamRunResponse]
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    error_code: str
    error_message: str
    caller: str
    loop_settings_json: str
    context_window_tokens: int
    route: str
    def __init__(self, run_id: _Optional[str] = ..., collection: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., request: _Optional[_Union[RunRequest, _Mapping]] = ..., response: _Optional[_Union[RunResponse, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[StepRecord, _Mapping]]] = ..., events: _Optional[_Iterable[_Union[StreamRunResponse, _Mapping]]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., caller: _Optional[str] = ..., loop_settings_json: _Optional[str] = ..., context_window_tokens: _Optional[int] = ..., route: _Optional[str] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class GetRunResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: RunRecord
    def __init__(self, run: _Optional[_Union[RunRecord, _Mapping]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("collection", "started_after", "started_before", "status", "page_size", "page_token")
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    STARTED_AFTER_FIELD_NUMBER: _ClassVar[int]
    STARTED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    collection: str
    started_after: _timestamp_pb2.Timestamp
    started_before: _timestamp_pb2.Timestamp
    status: RunStatus
    page_size: int
    page_token: str
    def __init__(self, collection: _Optional[str] = ..., started_after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[RunStatus, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class RunSummary(_message.Message):
    __slots__ = ("run_id", "collection", "query", "status", "started_at", "ended_at", "stop_reason", "steps", "input_tokens", "output_tokens", "error_code", "caller")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    COLLECTION_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    collection: str
    query: str
    status: RunStatus
    started_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    stop_reason: StopReason
    steps: int
    input_tokens: int
    output_tokens: int
    error_code: str
    caller: str
    def __init__(self, run_id: _Optional[str] = ..., collection: _Optional[str] = ..., query: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., steps: _Optional[int] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., error_code: _Optional[str] = ..., caller: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next_page_token")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunSummary]
    next_page_token: str
    def __init__(self, runs: _Optional[_Iterable[_Union[RunSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
