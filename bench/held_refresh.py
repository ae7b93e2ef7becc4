"""How soon a collection held in memory is held again after a write: the stale copy refreshed
(only the rows written are read) against the collection read whole, interleaved.

    python bench/held_refresh.py [--data-dir DIR] [--rounds 4] [--written 100]

Works on a copy of the 100,000-chunk collection `bench/search_latency.py` builds (run it once
first; the copy is removed at the end), opened as the search tool opens it (`open_engine`, the
configured `engine.vectors_in_memory` bound). Engine level, as `bench/search_breakdown.py`: a
client cannot see when the engine holds a collection, only that its searches are faster then.

1. The collection's indexes are brought up to date (`refresh`: a rebuild committing during a round
   would throw its read away), then it is searched twice at one version and read into memory
   (timed: the first read).
2. Each round rewrites `--written` existing chunks (an upsert of the same ids with new text and
   the same vectors: an edited document, the collection's size unchanged), then searches twice
   and waits for the rebuild, as a caller's next searches start it. Rounds rotate over `MODES`,
   so a drifting machine slows each alike: the product's refresh; the write followed by a
   compaction (`refresh`, as the settle does once writes pause: every row moves), so the product
   reads whole but tokenizes only the texts it does not know; and a whole read reusing nothing
   (`held._refreshed` and `held.KnownTexts` made to decline), the engine before session 10.

The engine's own settle (`engine.settle_after_s`: once writes to a collection pause, its indexes
are rebuilt and its fragments compacted) is off here, so that only the `compacted` rounds compact.

Prints one JSON object: seconds to hold the collection again per round and mode (with the held
entry's own log line: refreshed or read), medians, their ratio, the process's VmHWM, the load.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import RESULTS_DIR, VAR_DIR, emit, machine, note, settings_for
from bench.search_latency import COLLECTION, default_data_dir
from services.search_tool.documents import ChunkRecord
from services.search_tool.engine.base import EngineQuery, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb import held as held_module
from services.search_tool.engine.lancedb.rows import CHUNK_JSON_COLUMN, VECTOR_COLUMN, to_chunk
from services.search_tool.server import open_engine

MODES = ("refreshed", "compacted", "read_whole")
"""`refreshed`: the write alone, the product's refresh; `compacted`: the write, then the collection
compacted (every row at a new address), the product's whole read reusing the counted texts;
`read_whole`: the write alone, read whole with nothing reused (before session 10)."""


class _Lines(logging.Handler):
    """The held collections' log lines ("holding … read in / refreshed (…) in …")."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


async def _rewritten(engine: LanceDBEngine, count: int, round_: int) -> list[ChunkRecord]:
    """`count` existing chunks with a word added to their text, their vectors unchanged."""
    table = await engine._table(COLLECTION)
    rows = await table.query().select([CHUNK_JSON_COLUMN, VECTOR_COLUMN]).limit(count).to_arrow()
    records = []
    for text, vector in zip(
        rows.column(CHUNK_JSON_COLUMN).to_pylist(),
        rows.column(VECTOR_COLUMN).to_pylist(),
        strict=True,
    ):
        chunk = to_chunk(text)
        chunk = replace(chunk, text=f"{chunk.text} revision{round_}")
        records.append(ChunkRecord(chunk, np.asarray(vector, dtype=np.float32), f"r{round_}"))
    return records


async def _held_again(engine: LanceDBEngine, query: EngineQuery) -> float:
    """Search twice (the second starts the build), wait for it: seconds until it is held."""
    engine._held._rested.clear()  # every round rebuilds at once (the rest rules are not timed)
    engine._held._refresh_rested.clear()
    started = time.perf_counter()
    await engine.search(COLLECTION, query)
    await engine.search(COLLECTION, query)
    await engine._held.built(COLLECTION)
    return time.perf_counter() - started


async def run(source: Path, rounds: int, written: int, work: Path) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    note(f"copying {source} to {work}")
    await asyncio.to_thread(shutil.copytree, source, work)
    lines = _Lines()
    logging.getLogger(held_module.__name__).addHandler(lines)
    logging.getLogger(held_module.__name__).setLevel(logging.INFO)
    settings = settings_for(work)
    stream = settings.engine.model_copy(update={"settle_after_s": None})
    engine = await open_engine(settings.model_copy(update={"engine": stream}))
    assert isinstance(engine, LanceDBEngine)
    reusing = {name: getattr(held_module, name) for name in ("_refreshed", "KnownTexts")}

    async def declined(*_: Any) -> None:
        return None

    def unknown(*_: Any) -> None:
        return None

    try:
        await engine.refresh(COLLECTION)  # its indexes current: no rebuild commits mid-bench
        schema = await (await engine._table(COLLECTION)).schema()
        dimensions = schema.field(VECTOR_COLUMN).type.list_size
        vector = np.random.default_rng(7).standard_normal((1, dimensions)).astype(np.float32)
        query = EngineQuery(Strategy.HYBRID, "protein expression in tumor cells", vector, limit=10)
        first = await _held_again(engine, query)
        note(f"read in whole: {first:.1f} s")
        timings: dict[str, list[float]] = {mode: [] for mode in MODES}
        logged: list[str] = []
        for round_ in range(len(MODES) * rounds):
            mode = MODES[round_ % len(MODES)]
            reuse = mode != "read_whole"
            for name, declining in (("_refreshed", declined), ("KnownTexts", unknown)):
                setattr(held_module, name, reusing[name] if reuse else declining)
            await engine.upsert(COLLECTION, await _rewritten(engine, written, round_))
            if mode == "compacted":
                await engine.refresh(COLLECTION)  # as the settle does once writes pause
            lines.lines.clear()
            seconds = await _held_again(engine, query)
            timings[mode].append(round(seconds, 3))
            logged.extend(lines.lines)
            note(f"round {round_} {mode}: {seconds:.2f} s; {lines.lines}")
    finally:
        for name, original in reusing.items():
            setattr(held_module, name, original)
        await engine.close()
        shutil.rmtree(work, ignore_errors=True)
    medians = {mode: round(statistics.median(t), 3) for mode, t in timings.items()}
    return {
        "bench": "held_refresh",
        "collection": str(source),
        "chunks_rewritten_per_round": written,
        "first_read_s": round(first, 3),
        "held_again_s": timings,
        "median_s": medians,
        "ratio_to_read_whole": {
            mode: round(medians[mode] / medians["read_whole"], 3) for mode in MODES[:-1]
        },
        "held_log": logged,
        "vm_hwm_mb": _hwm_mb(),
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=default_data_dir(1))
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each mode")
    parser.add_argument("--written", type=int, default=100, help="chunks rewritten per round")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "held_refresh.json")
    parser.add_argument(
        "--work-dir", type=Path, default=VAR_DIR / "bench" / "held_refresh-copy", help="the copy"
    )
    args = parser.parse_args()
    if not (args.data_dir / f"{COLLECTION}.lance").exists():
        sys.exit(f"no {COLLECTION} under {args.data_dir}: run `python bench/search_latency.py`")
    emit(asyncio.run(run(args.data_dir, args.rounds, args.written, args.work_dir)), args.out)


if __name__ == "__main__":
    main()
