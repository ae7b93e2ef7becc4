"""GenAI spans (one per request, one per attempt) and metrics, through an in-process gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.common import semconv
from services.common.telemetry import setup_telemetry
from tests.llm_gateway.gateway_fixtures import (
    gateway_settings,
    running_gateway,
    scripted_entry,
    user,
)


def _metric_points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


async def test_request_and_attempt_spans_and_metrics_follow_the_genai_conventions(
    tmp_path: Path,
) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "replies:\n  - error: {status: 503, message: upstream 503}\n  - text: never\n"
    )
    entry = scripted_entry(str(script), name="flaky", model="flaky-1", retry={"max_attempts": 1})
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    telemetry = setup_telemetry("llm_gateway", span_exporter=spans, metric_reader=reader)
    settings = gateway_settings([entry], {"agent": ["flaky", "extractive"]})
    async with running_gateway(settings, telemetry) as stub:
        await stub.Generate(
            pb.GenerateRequest(messages=[user("hello there")], max_output_tokens=64)
        )

    finished = {span.name: span for span in spans.get_finished_spans()}
    request = finished["chat agent"]
    failed, answered = finished["chat flaky-1"], finished["chat extractive-v1"]
    assert sorted(finished) == sorted(
        [
            "chat agent",
            "chat flaky-1",
            "chat extractive-v1",
            "/quarry.llmgateway.v1.LlmGatewayService/Generate",
        ]
    ), "one span per attempt, no duplicates"
    assert failed.parent is not None
    assert failed.parent.span_id == request.context.span_id
    assert answered.parent is not None
    assert answered.parent.span_id == request.context.span_id

    attributes: dict[str, Any] = dict(answered.attributes or {})
    assert attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert attributes[semconv.GEN_AI_PROVIDER_NAME] == "extractive"
    assert attributes[semconv.GEN_AI_REQUEST_MODEL] == "extractive-v1"
    assert attributes[semconv.GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0
    assert attributes[semconv.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
    assert dict(failed.attributes or {})[semconv.ERROR_TYPE] == "RetryableProviderError"
    request_attributes: dict[str, Any] = dict(request.attributes or {})
    assert request_attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] > 0

    durations = _metric_points(reader, semconv.METRIC_OPERATION_DURATION)
    by_provider = {p.attributes[semconv.GEN_AI_PROVIDER_NAME]: p for p in durations}
    assert set(by_provider) == {"scripted", "extractive"}
    assert by_provider["scripted"].attributes[semconv.ERROR_TYPE] == "RetryableProviderError"
    assert semconv.ERROR_TYPE not in by_provider["extractive"].attributes
    tokens = _metric_points(reader, semconv.METRIC_TOKEN_USAGE)
    assert {p.attributes[semconv.GEN_AI_TOKEN_TYPE] for p in tokens} == {"input", "output"}
    assert all(p.sum > 0 for p in tokens)
    telemetry.shutdown()
