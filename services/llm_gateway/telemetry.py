"""GenAI spans and metrics of the gateway: one span per request, one per provider attempt.

Names come from `services.common.semconv`. The vendor SDKs are not instrumented (no
`opentelemetry-instrumentation-openai/anthropic` is installed or enabled), so each attempt appears
exactly once, as the span made here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from opentelemetry import metrics, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from services.common import semconv
from services.common.telemetry import Telemetry
from services.llm_gateway.model import ChatRequest, ChatResponse, Usage

_SCOPE = "quarry.llm_gateway"
_DURATION_BUCKETS = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)


@dataclass
class AttemptRecord:
    """What an attempt span learns while the attempt runs."""

    span: Span
    labels: dict[str, str]
    """Metric attributes: operation, provider and requested model."""
    started: float = field(default_factory=time.perf_counter)
    error_type: str = ""


class GatewayTelemetry:
    """Spans and metrics for routed requests; a no-op when no telemetry is configured."""

    def __init__(self, telemetry: Telemetry | None = None) -> None:
        if telemetry is None:
            self._tracer: trace.Tracer = trace.NoOpTracer()
            meter: metrics.Meter = metrics.NoOpMeter(_SCOPE)
        else:
            self._tracer = telemetry.tracer(_SCOPE)
            meter = telemetry.meter(_SCOPE)
        self._duration = meter.create_histogram(
            semconv.METRIC_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration",
            explicit_bucket_boundaries_advisory=list(_DURATION_BUCKETS),
        )
        self._tokens = meter.create_histogram(
            semconv.METRIC_TOKEN_USAGE,
            unit="{token}",
            description="Measures number of input and output tokens used",
            explicit_bucket_boundaries_advisory=list(_TOKEN_BUCKETS),
        )

    @contextmanager
    def request_span(self, operation: str, route: str, request: ChatRequest) -> Iterator[Span]:
        """The span of one gateway request: `chat {route}`; errors set `error.type`."""
        with self._tracer.start_as_current_span(
            f"{semconv.CHAT} {route}",
            kind=SpanKind.INTERNAL,
            attributes={
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
                "quarry.llm_gateway.route": route,
                "quarry.llm_gateway.rpc": operation,
                **_request_attributes(request),
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as error:
                _mark_error(span, type(error).__name__)
                raise

    @contextmanager
    def attempt_span(
        self, *, provider_kind: str, model: str, request: ChatRequest, try_number: int
    ) -> Iterator[AttemptRecord]:
        """The client span of one try against one provider: `chat {model}`, plus the metrics."""
        attributes: dict[str, str | int | float] = {
            semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
            semconv.GEN_AI_PROVIDER_NAME: provider_kind,
            semconv.GEN_AI_REQUEST_MODEL: model,
            "quarry.llm_gateway.try_number": try_number,
            **_request_attributes(request),
        }
        with self._tracer.start_as_current_span(
            f"{semconv.CHAT} {model}",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            labels = {
                semconv.GEN_AI_OPERATION_NAME: semconv.OP_CHAT,
                semconv.GEN_AI_PROVIDER_NAME: provider_kind,
                semconv.GEN_AI_REQUEST_MODEL: model,
            }
            record = AttemptRecord(span=span, labels=labels)
            try:
                yield record
            except BaseException as error:
                record.error_type = record.error_type or type(error).__name__
                _mark_error(span, record.error_type)
                raise
            finally:
                self._record_duration(record)

    def record_response(self, record: AttemptRecord, response: ChatResponse) -> None:
        """Usage, finish reason and response model on the attempt span; token metrics."""
        span = record.span
        span.set_attribute(semconv.GEN_AI_RESPONSE_MODEL, response.model)
        span.set_attribute(semconv.GEN_AI_RESPONSE_FINISH_REASONS, [response.stop_reason.value])
        _set_usage(span, response.usage)
        common = {**record.labels, semconv.GEN_AI_RESPONSE_MODEL: response.model}
        self._tokens.record(
            response.usage.input_tokens, {**common, semconv.GEN_AI_TOKEN_TYPE: "input"}
        )
        self._tokens.record(
            response.usage.output_tokens, {**common, semconv.GEN_AI_TOKEN_TYPE: "output"}
        )

    def record_request_result(self, span: Span, provider: str, response: ChatResponse) -> None:
        """What answered, on the request span."""
        span.set_attribute("quarry.llm_gateway.provider", provider)
        span.set_attribute(semconv.GEN_AI_RESPONSE_MODEL, response.model)
        span.set_attribute(semconv.GEN_AI_RESPONSE_FINISH_REASONS, [response.stop_reason.value])
        _set_usage(span, response.usage)

    def _record_duration(self, record: AttemptRecord) -> None:
        labels = dict(record.labels)
        if record.error_type:
            labels[semconv.ERROR_TYPE] = record.error_type
        self._duration.record(time.perf_counter() - record.started, labels)


def _request_attributes(request: ChatRequest) -> dict[str, str | int | float]:
    attributes: dict[str, str | int | float] = {}
    if request.max_output_tokens is not None:
        attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] = request.max_output_tokens
    if request.temperature is not None:
        attributes[semconv.GEN_AI_REQUEST_TEMPERATURE] = request.temperature
    if request.seed is not None:
        attributes[semconv.GEN_AI_REQUEST_SEED] = request.seed
    return attributes


def _set_usage(span: Span, usage: Usage) -> None:
    span.set_attribute(semconv.GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens)
    span.set_attribute(semconv.GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens)
    span.set_attribute(semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cache_read_tokens)
    span.set_attribute(semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, usage.cache_write_tokens)


def _mark_error(span: Span, error_type: str) -> None:
    span.set_attribute(semconv.ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, error_type))
