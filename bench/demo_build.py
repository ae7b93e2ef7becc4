"""The demo collection's first build (what dominates the first `make run`), and a second run.

    python bench/demo_build.py [--out bench/results/demo_build.json]

A search tool subprocess on a fresh data directory (`var/bench/demo_build/`, wiped first) gets the
whole demo corpus through `ensure_demo_collection` (the one ingest pipeline); then the same call
again, which finds every document unchanged (the cost of a later `make run`).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import RESULTS_DIR, VAR_DIR, emit, machine, note, search_tool_process
from quarry_cli.demo.build import ensure_demo_collection
from quarry_cli.demo.corpus import build_corpus


async def main(out: Path) -> None:
    data = VAR_DIR / "bench" / "demo_build"
    shutil.rmtree(data, ignore_errors=True)
    corpus = build_corpus()
    load_before = machine()["load_average_1m"]
    async with search_tool_process(data) as address:
        note(f"building the demo collection ({len(corpus)} documents) at {address} ...")
        started = time.monotonic()
        first = await ensure_demo_collection(address, corpus=corpus, timeout_s=600)
        first_s = time.monotonic() - started
        started = time.monotonic()
        again = await ensure_demo_collection(address, corpus=corpus, timeout_s=600)
        again_s = time.monotonic() - started
    emit(
        {
            "bench": "demo_build",
            "documents": first.documents,
            "chunks": first.chunks,
            "first_build_s": round(first_s, 1),
            "chunks_per_s": round(first.chunks / first_s, 1),
            "unchanged_rerun_s": round(again_s, 2),
            "rerun_built": again.built,
            "load_average_1m_before": load_before,
            "machine": machine(),
        },
        out,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "demo_build.json")
    asyncio.run(main(parser.parse_args().out))
