"""Telemetry setup: record when there is somewhere to export, else only pass context through."""

from __future__ import annotations

import logging
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.common.log import JsonFormatter
from services.common.server import ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.telemetry import OTLP_ENDPOINT_ENV, Telemetry, setup_telemetry

FRONT = "test.v1.Front"
BACK = "test.v1.Back"
CALLER_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_TRACEPARENT = f"00-{CALLER_TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture(autouse=True)
def _no_otlp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OTLP_ENDPOINT_ENV, raising=False)


async def _two_hops(telemetry: Telemetry) -> tuple[str, str]:
    """Caller → front service → back service, both built with `telemetry`; returns the trace id
    the front handler saw as current and the traceparent the back service received."""
    back_seen: list[str] = []

    async def back(request: bytes, context: Any) -> bytes:
        metadata = dict(context.invocation_metadata() or ())
        back_seen.append(str(metadata.get("traceparent", "")))
        return b"ok"

    def register_back(server: grpc.aio.Server) -> None:
        handler = grpc.unary_unary_rpc_method_handler(back)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(BACK, {"Call": handler})]
        )

    back_server = build_server(
        [ServiceRegistration(BACK, register_back)], ServerSettings(), telemetry
    )
    await back_server.start()
    downstream = grpc.aio.insecure_channel(
        back_server.address, interceptors=telemetry.client_interceptors()
    )

    async def front(request: bytes, context: Any) -> bytes:
        seen = f"{trace.get_current_span().get_span_context().trace_id:032x}"
        await downstream.unary_unary(f"/{BACK}/Call", None, None)(b"")
        return seen.encode()

    def register_front(server: grpc.aio.Server) -> None:
        handler = grpc.unary_unary_rpc_method_handler(front)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(FRONT, {"Call": handler})]
        )

    front_server = build_server(
        [ServiceRegistration(FRONT, register_front)], ServerSettings(), telemetry
    )
    await front_server.start()
    try:
        async with grpc.aio.insecure_channel(front_server.address) as channel:
            reply = await channel.unary_unary(f"/{FRONT}/Call", None, None)(
                b"", metadata=(("traceparent", CALLER_TRACEPARENT),)
            )
    finally:
        await downstream.close(None)
        await front_server.stop(0)
        await back_server.stop(0)
    return bytes(reply).decode(), back_seen[0]


async def test_without_an_exporter_no_span_is_recorded() -> None:
    telemetry = setup_telemetry("probe")

    span = telemetry.tracer("probe").start_span("work")

    assert not telemetry.recording
    assert not span.is_recording()


async def test_without_an_exporter_the_callers_trace_passes_through_to_downstream_calls() -> None:
    telemetry = setup_telemetry("probe")

    seen_by_front, traceparent_at_back = await _two_hops(telemetry)

    assert seen_by_front == CALLER_TRACE_ID
    assert traceparent_at_back.split("-")[1] == CALLER_TRACE_ID


async def test_with_an_exporter_spans_are_recorded_under_the_callers_trace() -> None:
    exporter = InMemorySpanExporter()
    telemetry = setup_telemetry("probe", span_exporter=exporter)

    seen_by_front, traceparent_at_back = await _two_hops(telemetry)

    assert telemetry.recording
    assert seen_by_front == CALLER_TRACE_ID
    assert traceparent_at_back.split("-")[1] == CALLER_TRACE_ID
    spans = exporter.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in spans} == {CALLER_TRACE_ID}
    assert {s.name for s in spans} >= {f"/{FRONT}/Call", f"/{BACK}/Call"}


async def test_without_an_exporter_log_lines_keep_the_callers_trace_id() -> None:
    telemetry = setup_telemetry("probe")
    records: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(JsonFormatter("probe").format(record))

    logger = logging.getLogger("probe.telemetry")
    handler = Capture()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    parent = trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=int(CALLER_TRACE_ID, 16),
            span_id=0x00F067AA0BA902B7,
            is_remote=True,
            trace_flags=trace.TraceFlags(1),
        )
    )
    try:
        with trace.use_span(parent), telemetry.tracer("probe").start_as_current_span("work"):
            logger.info("inside")
    finally:
        logger.removeHandler(handler)

    assert CALLER_TRACE_ID in records[0]
