"""`bench/search_under_writes.py`: its writes replace one another with the collection's own
metadata keys, searches are grouped by the time since the last answered write, and the search
tool's CPU time is read as `top` reads it (`bench.local_model_stack.cpu_seconds`, which it
calls)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import search_under_writes as bench
from bench.local_model_stack import cpu_seconds
from bench.search_latency import CATEGORIES, SOURCES


def test_writes_rotate_over_ten_ids_with_the_collections_metadata_keys() -> None:
    windows = [f"window {i}." for i in range(30)]
    written = [bench.document(n, windows) for n in range(25)]
    assert len({d.id for d in written}) == bench.WRITE_IDS
    assert written[0].id == written[10].id == written[20].id
    assert all(set(d.metadata) == {"year", "category", "is_review"} for d in written)
    assert {d.source for d in written} <= set(SOURCES)
    assert {d.metadata["category"].string_value for d in written} <= set(CATEGORIES)
    assert written[1].text == "window 3. window 4. window 5."


def test_searches_are_grouped_by_time_since_the_last_answered_write() -> None:
    answered = [10.0, 15.0]
    sent = [9.0, 10.2, 10.7, 11.5, 14.0, 15.1]
    latencies = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    groups = bench.since_last_write(latencies, sent, answered)
    # 9.0 comes before any write and is left out; 14.0 is 4 s after the write at 10.0
    assert {label: g["count"] for label, g in groups.items()} == {
        "0-0.5s": 2,
        "0.5-1s": 1,
        "1-2s": 1,
        "2s+": 1,
    }
    assert groups["0-0.5s"]["max_ms"] == 6.0
    assert groups["2s+"]["p50_ms"] == 5.0


def test_cpu_seconds_counts_what_a_busy_process_spends() -> None:
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.time() + 0.6\nwhile time.time() < end: pass",
        ]
    )
    try:
        before = cpu_seconds(busy.pid)
        time.sleep(0.4)
        spent = cpu_seconds(busy.pid) - before
    finally:
        busy.wait()
    assert spent >= 0.1
    assert cpu_seconds(os.getpid()) > 0
