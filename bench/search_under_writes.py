"""Search latency while a collection is being written: what a caller searching a 100,000-chunk
collection sees while another caller upserts a document every few seconds.

    python bench/search_under_writes.py [--out bench/results/search_under_writes.json]
                                        [--write-every 5] [--phase-s 60]

The collection is `bench/search_latency.py`'s (built there if missing), copied to a scratch data
directory first (the writes change it). One search tool subprocess serves it. After the warm-up
(the collection is read into memory), one client sends the filtered HYBRID searches of
`bench/search_latency.py` at a steady pace (`SEARCHES_PER_S`, each a SciFact claim it has not sent
before, so each embeds its query), through two phases of `--phase-s` each:

* `quiet` — no writes;
* `writing` — another client upserts one document (three sentence windows of a SciFact abstract,
  the collection's metadata keys) every `--write-every` seconds, rotating over ten ids, so each
  write replaces an earlier one: more than `engine.settle_after_s` apart, so the search tool's
  maintenance runs after each (`engine/lancedb/maintenance.py`).

Reported per phase: the searches' p50 / p95 / p99 / max (while writing, also grouped by how long
after the last write they were sent), the upserts' latencies, the CPU seconds the search tool's
process spent (utime + stime from `/proc/<pid>/stat`, what an operator's `top` shows) and what its
log says it did (maintenance runs, compactions, index builds, reads into memory and how long each
took), with the machine's load. The phases are not interleaved: maintenance started by the
last write runs on after it, so a quiet phase after a writing one would not be quiet.

The collection sits exactly at `engine.vectors_in_memory`'s default bound (100,000 chunks), and
the writes add chunks, so the search tool is started with the bound at `HELD_BOUND`: what is
measured is the cost of the writes, not of the collection outgrowing the bound (its searches then
take LanceDB's path: `bench/search_breakdown.py`). Every `QUARRY_SEARCH_TOOL_*` variable set is
recorded in the result; the same variables (`..._ENGINE__SETTLE_FRACTION`, `..._SETTLE_FRAGMENTS`)
measure other maintenance settings.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    emit,
    load_scifact,
    machine,
    note,
    percentile,
    search_tool_process,
    warm_up,
)
from bench.local_model_stack import cpu_seconds
from bench.search_latency import (
    CATEGORIES,
    COLLECTION,
    ROWS,
    SOURCES,
    default_data_dir,
    distinct_queries,
    ensure_loaded,
    sentence_windows,
    timed_search,
)
from services.search_tool.config import ChunkingSettings

SEARCHES_PER_S = 5.0
"""A steady caller, not a saturating one: the latency a search sees, not the throughput."""
WRITE_IDS = 10
SINCE_WRITE = (("0-0.5s", 0.0, 0.5), ("0.5-1s", 0.5, 1.0), ("1-2s", 1.0, 2.0), ("2s+", 2.0, 1e9))
"""How long after the last answered write a search was sent: the groups reported."""
WARMUP_S = 60.0
WARMUP_LEAST = 20
RESULTS = RESULTS_DIR / "search_under_writes.json"
HELD_BOUND = "110000"


def summary(values: list[float]) -> dict[str, float | int]:
    return {
        "count": len(values),
        "p50_ms": round(percentile(values, 50), 1),
        "p95_ms": round(percentile(values, 95), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "max_ms": round(max(values), 1) if values else float("nan"),
    }


def document(n: int, windows: list[str]) -> search_tool_pb2.Document:
    """The n-th write: one of `WRITE_IDS` ids, each write replacing that id's earlier version."""
    text = " ".join(windows[(3 * n + i) % len(windows)] for i in range(3))
    return search_tool_pb2.Document(
        id=f"written-{n % WRITE_IDS}",
        title=f"Written document {n}",
        text=text,
        source=SOURCES[n % len(SOURCES)],
        entity_type="abstract",
        metadata={
            "year": search_pb2.MetadataValue(int_value=2015 + n % 10),
            "category": search_pb2.MetadataValue(string_value=CATEGORIES[n % len(CATEGORIES)]),
            "is_review": search_pb2.MetadataValue(bool_value=n % 5 == 0),
        },
    )


async def searcher(
    stub: Any, queries: list[str], seconds: float
) -> tuple[list[float], list[float]]:
    """Searches at `SEARCHES_PER_S` for `seconds` (a slow answer delays the next, as for a caller
    that waits for its answer); their latencies and when each was sent (monotonic)."""
    latencies: list[float] = []
    sent: list[float] = []
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        sent.append(time.monotonic())
        ms, _ = await timed_search(stub, queries.pop())
        latencies.append(ms)
        pause = (len(latencies) / SEARCHES_PER_S) - (time.monotonic() - started)
        if pause > 0:
            await asyncio.sleep(pause)
    return latencies, sent


async def writer(
    stub: Any, windows: list[str], every_s: float, stop: asyncio.Event, answered: list[float]
) -> list[float]:
    """Upserts every `every_s` until `stop`; their latencies. `answered` gets when each write
    was answered (monotonic)."""
    latencies: list[float] = []
    n = 0
    while not stop.is_set():
        started = time.perf_counter()
        await stub.UpsertDocuments(
            search_tool_pb2.UpsertDocumentsRequest(
                collection=COLLECTION, documents=[document(n, windows)]
            ),
            timeout=60,
        )
        latencies.append((time.perf_counter() - started) * 1000)
        answered.append(time.monotonic())
        n += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every_s)
    return latencies


def since_last_write(
    latencies: list[float], sent: list[float], answered: list[float]
) -> dict[str, dict[str, float | int]]:
    """The searches grouped by how long after the last answered write they were sent."""
    groups: dict[str, list[float]] = {label: [] for label, _, _ in SINCE_WRITE}
    for ms, at in zip(latencies, sent, strict=True):
        before = [t for t in answered if t <= at]
        if not before:
            continue
        age = at - before[-1]
        for label, low, high in SINCE_WRITE:
            if low <= age < high:
                groups[label].append(ms)
    return {label: summary(values) for label, values in groups.items() if values}


def maintenance_seen(lines: list[str]) -> dict[str, Any]:
    """What the search tool's log says it did: index maintenance runs, compactions, index builds
    and the times its collection was read into memory (and how long each read took)."""
    messages = []
    for line in lines:
        with contextlib.suppress(ValueError):
            messages.append(json.loads(line).get("message", ""))
    held = [float(m.rsplit(" in ", 1)[1].split()[0]) for m in messages if m.startswith("holding ")]
    return {
        "maintenance_runs": sum(m == "indexes converged" for m in messages),
        "compactions": sum(m == "collection compacted" for m in messages),
        "bm25_builds": sum(m == "bm25 index built" for m in messages),
        "vector_index_builds": sum(m == "vector index built" for m in messages),
        "held_reads": len(held),
        "held_read_s": sorted(held),
    }


async def phase(
    stub: Any,
    pid: int,
    log: list[str],
    queries: list[str],
    seconds: float,
    write: tuple[list[str], float] | None,
) -> dict[str, Any]:
    cpu_before, wall_before, lines_before = cpu_seconds(pid), time.monotonic(), len(log)
    stop = asyncio.Event()
    answered: list[float] = []
    writes = asyncio.create_task(writer(stub, *write, stop, answered)) if write else None
    latencies, sent = await searcher(stub, queries, seconds)
    stop.set()
    written = await writes if writes else []
    out: dict[str, Any] = {
        "searches": summary(latencies),
        "search_tool_cpu_s": round(cpu_seconds(pid) - cpu_before, 1),
        "wall_s": round(time.monotonic() - wall_before, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "search_tool_log": maintenance_seen(log[lines_before:]),
    }
    if write:
        out["upserts"] = summary(written)
        out["searches_by_time_since_the_last_write"] = since_last_write(latencies, sent, answered)
    return out


def fresh_copy(source: Path, work: Path) -> None:
    """The collection to write into: a copy, so the cached one stays as built."""
    if work.exists():
        shutil.rmtree(work)
    note(f"copying {source} to {work}")
    shutil.copytree(source, work)


async def run(source: Path, work: Path, every_s: float, phase_s: float) -> dict[str, Any]:
    await ensure_loaded(source, ChunkingSettings().keyword_context_chunks)
    await asyncio.to_thread(fresh_copy, source, work)
    scifact = load_scifact()
    queries = distinct_queries(scifact)
    needed = int(2 * phase_s * SEARCHES_PER_S) + 10
    if len(queries) < needed:
        raise SystemExit(f"{needed} distinct queries needed, {len(queries)} available")
    pending = list(reversed(queries))
    measured = set(queries)
    warm_texts = [d["title"] for d in scifact.corpus if d["title"] not in measured]
    windows = sentence_windows([d["text"] for d in scifact.corpus], 3 * 1000)
    pids: list[int] = []
    log: list[str] = []
    async with (
        search_tool_process(work, started=pids.append, log=log) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        await warm_up(
            lambda text: timed_search(stub, text),
            warm_texts,
            seconds=WARMUP_S,
            least=WARMUP_LEAST,
        )
        note("quiet phase")
        quiet = await phase(stub, pids[0], log, pending, phase_s, None)
        note("writing phase")
        writing = await phase(stub, pids[0], log, pending, phase_s, (windows, every_s))
    await asyncio.to_thread(shutil.rmtree, work, ignore_errors=True)
    ratio = writing["searches"]["p50_ms"] / quiet["searches"]["p50_ms"]
    return {
        "benchmark": "search_under_writes",
        "rows": ROWS,
        "search_tool_environment": {
            k: v for k, v in sorted(os.environ.items()) if k.startswith("QUARRY_SEARCH_TOOL_")
        },
        "searches_per_s": SEARCHES_PER_S,
        "write_every_s": every_s,
        "phase_s": phase_s,
        "quiet": quiet,
        "writing": writing,
        "p50_ratio_writing_to_quiet": round(ratio, 2),
        "p95_ratio_writing_to_quiet": round(
            writing["searches"]["p95_ms"] / quiet["searches"]["p95_ms"], 2
        ),
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--write-every", type=float, default=5.0)
    parser.add_argument("--phase-s", type=float, default=60.0)
    parser.add_argument(
        "--source", type=Path, default=None, help="the 100k collection (search_latency's)"
    )
    parser.add_argument("--work-dir", type=Path, default=VAR_DIR / "bench" / "search_under_writes")
    args = parser.parse_args()
    os.environ.setdefault("QUARRY_SEARCH_TOOL_ENGINE__VECTORS_IN_MEMORY", HELD_BOUND)
    source = args.source or default_data_dir(ChunkingSettings().keyword_context_chunks)
    emit(asyncio.run(run(source, args.work_dir, args.write_every, args.phase_s)), args.out)


if __name__ == "__main__":
    main()
