"""The one telemetry setup: tracer and meter providers, OTLP export, gRPC interceptors.

Export happens only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (the OTLP exporters read the standard
`OTEL_*` variables themselves). Tests pass their own in-memory exporter instead.

With nowhere to send them, spans and metrics are not recorded at all: the providers are the API's
no-op ones, which still carry the caller's W3C trace context through the process (the interceptors
extract and inject it, and log lines keep the caller's `trace_id`). Recording spans nobody can read
costs every request time for nothing (the gateway figure is in the CHANGELOG).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry import metrics, trace
from opentelemetry.instrumentation.grpc import aio_client_interceptors, aio_server_interceptor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"


@dataclass
class Telemetry:
    """The providers one process (or one in-process test server) reports through."""

    tracer_provider: trace.TracerProvider
    meter_provider: metrics.MeterProvider

    def tracer(self, name: str) -> trace.Tracer:
        return self.tracer_provider.get_tracer(name)

    def meter(self, name: str) -> metrics.Meter:
        return self.meter_provider.get_meter(name)

    def server_interceptors(self) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
        interceptor = aio_server_interceptor(tracer_provider=self.tracer_provider)  # type: ignore[no-untyped-call]
        return [interceptor]

    def client_interceptors(self) -> Sequence[grpc.aio.ClientInterceptor]:
        provider = self.tracer_provider
        return aio_client_interceptors(tracer_provider=provider)  # type: ignore[no-untyped-call, no-any-return]

    @property
    def recording(self) -> bool:
        """Whether spans are recorded (an exporter is configured)."""
        return isinstance(self.tracer_provider, TracerProvider)

    def shutdown(self) -> None:
        if isinstance(self.tracer_provider, TracerProvider):
            self.tracer_provider.shutdown()
        if isinstance(self.meter_provider, MeterProvider):
            self.meter_provider.shutdown()


def setup_telemetry(
    service_name: str,
    *,
    span_exporter: SpanExporter | None = None,
    metric_reader: MetricReader | None = None,
    install_global: bool = False,
) -> Telemetry:
    """Providers for `service_name`: OTLP when configured, else the given test exporters, else
    no-op providers that only propagate context."""
    resource = Resource.create({SERVICE_NAME: service_name})
    processors: list[SpanProcessor] = []
    readers: list[MetricReader] = []
    if span_exporter is not None:
        processors.append(SimpleSpanProcessor(span_exporter))
    if metric_reader is not None:
        readers.append(metric_reader)
    if os.environ.get(OTLP_ENDPOINT_ENV):
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        processors.append(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    tracer_provider: trace.TracerProvider = trace.NoOpTracerProvider()
    if processors:
        tracer_provider = TracerProvider(resource=resource)
        for processor in processors:
            tracer_provider.add_span_processor(processor)
    meter_provider: metrics.MeterProvider = metrics.NoOpMeterProvider()
    if readers:
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if install_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
