"""`bench/load_e2e.py` runs from a clone: the three real services as processes, a collection
ingested through the API, a level offered, and one JSON object that says what callers saw — and,
with `--gc-probe`, how long each service's garbage collector stopped its event loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.load_e2e import gc_pauses

REPO = Path(__file__).resolve().parents[2]


def test_a_short_load_run_answers_refuses_nothing_at_low_load_and_reports_each_services_gc(
    tmp_path: Path,
) -> None:
    out = tmp_path / "load.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.load_e2e", "--levels", "4", "--duration", "3",
         "--documents", "24", "--client-processes", "2", "--idle", "0", "--gc-probe",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["collection"]["documents"] == 24
    assert result["gc_probe"] is True
    (level,) = result["levels"]
    assert level["concurrent"] == 4
    assert level["answered"] > 0
    assert level["errors_by_code"] == {}
    assert level["lost_to_timeouts"] == 0
    assert level["refused"] == 0  # 4 callers are well under the agent's 16 runs at once
    pauses = level["gc_pauses"]
    assert sorted(pauses) == ["agent", "llm_gateway", "search_tool"]
    assert pauses["agent"]["collections"] > 0  # answering runs allocates: the probe saw it


def test_gc_pauses_counts_only_the_collections_inside_the_level(tmp_path: Path) -> None:
    (tmp_path / "agent-1.json").write_text(
        json.dumps(
            {
                "service": "agent",
                "collections": [[2, 40.0, 5.0], [0, 1.5, 11.0], [2, 7.25, 12.0], [2, 90.0, 30.0]],
            }
        )
    )
    (tmp_path / "llm_gateway-2.json").write_text(
        json.dumps({"service": "llm_gateway", "collections": []})
    )
    assert gc_pauses(tmp_path, 10.0, 20.0) == {
        "agent": {
            "collections": 2,
            "full_collections": 1,
            "longest_full_ms": 7.2,
            "longest_young_ms": 1.5,
        },
        "llm_gateway": {
            "collections": 0,
            "full_collections": 0,
            "longest_full_ms": None,
            "longest_young_ms": 0.0,
        },
    }
