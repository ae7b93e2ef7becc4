"""A garbage-collection probe for `python -m bench.load_e2e --gc-probe` (never part of a service).

Python imports `sitecustomize` at start-up from `PYTHONPATH`; the bench puts this directory
there for the three service processes. Every collection's generation, pause and wall-clock end
are recorded through `gc.callbacks`, and written at exit to `$QUARRY_BENCH_GC_PROBE_DIR/<service>-
<pid>.json`, so the bench can say how long the collector stopped each service's event loop while
a level was offered (a full collection walks the whole heap: see `server.gc_freeze`).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

_OUT = os.environ.get("QUARRY_BENCH_GC_PROBE_DIR")
_started: list[float] = [0.0]
_collections: list[tuple[int, float, float]] = []
"""(generation, pause in ms, wall-clock end) of each collection."""


def _callback(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        pause_ms = (time.perf_counter() - _started[0]) * 1000
        _collections.append((int(info["generation"]), pause_ms, time.time()))


def _service() -> str:
    """`agent` for `python -m services.agent` (argv[0] is `.../services/agent/__main__.py`)."""
    return Path(sys.argv[0]).parent.name if sys.argv and sys.argv[0] else "python"


def _write() -> None:
    if _OUT:
        path = Path(_OUT) / f"{_service()}-{os.getpid()}.json"
        path.write_text(json.dumps({"service": _service(), "collections": _collections}))


if _OUT:
    gc.callbacks.append(_callback)
    atexit.register(_write)
