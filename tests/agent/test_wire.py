"""Settings sources and the protobuf edge: defaults, filter values, results round trip."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.protobuf import struct_pb2
from quarry.agent.v1 import agent_pb2
from quarry.common.v1 import search_pb2

from services.agent import wire
from services.agent.config import AgentSettings
from services.agent.run import Mode
from services.agent.search import Breadcrumb, SearchHit
from services.common.settings import load_settings


def test_settings_come_from_the_agent_section_and_quarry_agent_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "quarry.yaml"
    config.write_text("agent:\n  route: fast-route\n  loop:\n    thinking_max_iterations: 7\n")
    monkeypatch.setenv("QUARRY_AGENT_SEARCH_TOOL_ADDRESS", "search:9000")
    settings = load_settings(AgentSettings, config)
    assert settings.route == "fast-route"
    assert settings.loop.thinking_max_iterations == 7
    assert settings.search_tool_address == "search:9000"
    assert settings.llm_gateway_address == "127.0.0.1:50052"
    assert settings.server.port == 50053


def test_request_defaults_fast_mode_ten_results_configured_collection() -> None:
    request = wire.run_request(
        agent_pb2.StreamRunRequest(query=" q "), default_collection="docs", default_limit=10
    )
    assert (request.collection, request.query, request.mode, request.limit) == (
        "docs",
        "q",
        Mode.FAST,
        10,
    )


def test_filter_values_keep_integers_lists_and_booleans() -> None:
    condition = search_pb2.FilterCondition(
        field="metadata.year",
        operator=search_pb2.FILTER_OPERATOR_IN,
        value=struct_pb2.Value(
            list_value=struct_pb2.ListValue(
                values=[struct_pb2.Value(number_value=2024), struct_pb2.Value(number_value=1.5)]
            )
        ),
    )
    flag = search_pb2.FilterCondition(
        field="metadata.stable",
        operator=search_pb2.FILTER_OPERATOR_EQUALS,
        value=struct_pb2.Value(bool_value=True),
    )
    message = search_pb2.Filter(groups=[search_pb2.FilterGroup(conditions=[condition, flag])])
    groups = wire.filter_groups(message, "filter", [])
    values = [c.value for c in groups[0].conditions]
    assert values == [[2024, 1.5], True]
    assert isinstance(values[0][0], int)  # type: ignore[index]
    assert wire.filter_message(groups) == message


def test_a_search_hit_survives_the_round_trip_through_protobuf() -> None:
    hit = SearchHit(
        id="d__chunk_1",
        document_id="d",
        chunk_index=1,
        title="T",
        text="x",
        score=0.5,
        source="s",
        entity_type="e",
        url="u",
        created_at=datetime(2024, 1, 2, tzinfo=UTC),
        breadcrumbs=(Breadcrumb("b", "B", "folder"),),
        metadata={"n": 3, "f": 1.5, "ok": True, "s": "v"},
        dense_score=0.7,
    )
    assert wire.search_hit(wire.search_result(hit)) == hit
