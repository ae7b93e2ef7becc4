"""`make eval ENGINE=vespa` wiring, as far as it can be tested without a Vespa: without
`QUARRY_VESPA_URL` it stops with the reason; with it, the search tool it builds talks to that URL
through the Vespa engine (here a local recording server, not a Vespa)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import eval_scifact
from services.search_tool.engine.vespa import VespaEngine
from services.search_tool.server import open_engine
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply


def test_eval_on_vespa_without_the_url_stops_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("QUARRY_VESPA_URL", raising=False)
    monkeypatch.setattr(sys, "argv", ["eval_scifact.py", "--engine", "vespa"])
    with pytest.raises(SystemExit) as stopped:
        eval_scifact.main()
    assert "QUARRY_VESPA_URL" in str(stopped.value.code)
    assert "nothing was measured" in str(stopped.value.code)


async def test_eval_settings_open_a_vespa_engine_on_the_given_url(tmp_path: Path) -> None:
    def answer(request: Recorded) -> Reply:
        root = {"id": "toplevel", "relevance": 1.0, "fields": {"totalCount": 0}, "children": []}
        return Reply(200, {"root": root})

    server = RecordingServer(answer)
    await server.start()
    try:
        settings = eval_scifact.vespa_settings(tmp_path, server.url)
        assert settings.engine.kind == "vespa"
        engine = await open_engine(settings)
        try:
            assert isinstance(engine, VespaEngine)
            assert await engine.list_collections() == []
        finally:
            await engine.close()
        assert [r.path for r in server.requests] == ["/search/"]
        assert not (tmp_path / "scifact").exists()  # nothing was written to LanceDB
    finally:
        await server.close()
