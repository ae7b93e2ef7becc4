"""A degraded search is visible to the caller, in the log and on the RPC's span: the servicer's
conversion and report of `Coverage` (Vespa's `root.coverage`; the engine side is in
`tests/search_tool/vespa/test_http_contract.py`)."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quarry.searchtool.v1 import search_tool_pb2

from services.search_tool.convert import coverage_to_proto
from services.search_tool.engine.base import Coverage, Degradation
from services.search_tool.servicer import _report_degraded


def test_a_degraded_coverage_converts_with_its_share_documents_and_reasons() -> None:
    proto = coverage_to_proto(
        Coverage(99.0, 990, frozenset({Degradation.TIMEOUT, Degradation.NON_IDEAL_STATE}))
    )
    assert (proto.percent, proto.documents_searched, proto.degraded) == (99.0, 990, True)
    assert list(proto.reasons) == [
        search_tool_pb2.COVERAGE_DEGRADATION_TIMEOUT,
        search_tool_pb2.COVERAGE_DEGRADATION_NON_IDEAL_STATE,
    ]


def test_full_coverage_converts_as_not_degraded() -> None:
    proto = coverage_to_proto(Coverage())
    assert (proto.percent, proto.degraded, list(proto.reasons)) == (100.0, False, [])


def test_a_degraded_search_is_logged_and_recorded_on_the_current_span(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    coverage = Coverage(50.0, 500, frozenset({Degradation.PARTIAL}))
    with (
        caplog.at_level(logging.WARNING, logger="services.search_tool.servicer"),
        provider.get_tracer("test").start_as_current_span("Search"),
    ):
        _report_degraded("docs", coverage)
    (span,) = exporter.get_finished_spans()
    assert span.attributes is not None
    assert span.attributes["quarry.search.coverage.degraded"] is True
    assert span.attributes["quarry.search.coverage.percent"] == 50.0
    assert list(span.attributes["quarry.search.coverage.reasons"]) == ["partial"]  # type: ignore[arg-type]
    (record,) = [r for r in caplog.records if "covered part" in r.getMessage()]
    assert record.__dict__["collection"] == "docs"
    assert record.__dict__["coverage_percent"] == 50.0
