"""How long one query's embedding takes with the shipped MiniLM graph (float matrix products) and
with the integer candidate (`bench/integer_minilm.py`), and how close the candidate's vectors are.

    python bench/query_embedding.py [--rounds 3] [--scifact DIR] [--out FILE]

The queries are what users send: SciFact's judged test queries and the 48 questions of
`bench/answer_quality_questions.py`. Each query is embedded alone (`embedder.embed([query])`, the
call a search makes: the embedder's small-request, all-core session) by every variant in turn,
query by query in one run, the variants' order rotating from query to query, so the machine's
load drifts over all of them alike. Per variant: p50 / p95 of the call, the per-query ratio to
the shipped graph (its median and 5th / 95th percentiles), and the cosine between its vector and
the shipped graph's (min, 1st percentile, median). The load average is taken before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.answer_quality_questions import QUESTIONS
from bench.harness import RESULTS_DIR, SCIFACT_DIR, emit, load_beir, machine, note
from bench.integer_minilm import IntegerQueryEmbedder, calibration_queries
from services.search_tool.embedding.minilm import MiniLmEmbedder

SHIPPED = "shipped"
WARM_UP = 20


def variants(scifact_dir: Path) -> dict[str, MiniLmEmbedder]:
    return {
        SHIPPED: MiniLmEmbedder(),
        "integer_u8": IntegerQueryEmbedder(unsigned=True),
        "integer_s8": IntegerQueryEmbedder(unsigned=False),
        "integer_u8_smoothed": IntegerQueryEmbedder(calibration=calibration_queries(scifact_dir)),
    }


def queries(scifact_dir: Path) -> list[str]:
    scifact = load_beir(scifact_dir, split="test")
    return [scifact.queries[q] for q in sorted(scifact.qrels)] + [q.text for q in QUESTIONS]


async def timed_rounds(
    embedders: dict[str, MiniLmEmbedder], texts: list[str], rounds: int
) -> tuple[dict[str, list[float]], dict[str, npt.NDArray[np.float32]]]:
    """Milliseconds per call of each variant (every round, every query), and each variant's
    vectors (from the first round)."""
    names = list(embedders)
    for text in texts[:WARM_UP]:
        for name in names:
            await embedders[name].embed([text])
    times: dict[str, list[float]] = {n: [] for n in names}
    vectors: dict[str, list[npt.NDArray[np.float32]]] = {n: [] for n in names}
    turn = 0
    for round_ in range(rounds):
        for text in texts:
            turn += 1
            for name in names[turn % len(names) :] + names[: turn % len(names)]:
                started = time.perf_counter()
                vector = await embedders[name].embed([text])
                times[name].append((time.perf_counter() - started) * 1e3)
                if round_ == 0:
                    vectors[name].append(vector[0])
        note(f"round {round_ + 1}/{rounds}: load {os.getloadavg()[0]:.2f}")
    return times, {n: np.stack(v) for n, v in vectors.items()}


def figures(
    times: dict[str, list[float]], vectors: dict[str, npt.NDArray[np.float32]]
) -> dict[str, Any]:
    shipped = np.asarray(times[SHIPPED])
    out: dict[str, Any] = {}
    for name, milliseconds in times.items():
        ms = np.asarray(milliseconds)
        row: dict[str, Any] = {
            "p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "mean_ms": round(float(ms.mean()), 2),
        }
        if name != SHIPPED:
            ratio = ms / shipped
            cosine = np.sum(vectors[name] * vectors[SHIPPED], axis=1)
            row["ratio_to_shipped"] = {
                "median": round(float(np.median(ratio)), 3),
                "p5": round(float(np.percentile(ratio, 5)), 3),
                "p95": round(float(np.percentile(ratio, 95)), 3),
            }
            row["p50_saving"] = round(1 - row["p50_ms"] / float(np.percentile(shipped, 50)), 3)
            row["cosine_to_shipped"] = {
                "min": round(float(cosine.min()), 5),
                "p1": round(float(np.percentile(cosine, 1)), 5),
                "median": round(float(np.median(cosine)), 5),
            }
        out[name] = row
    return out


async def run(rounds: int, scifact_dir: Path) -> dict[str, Any]:
    texts = queries(scifact_dir)
    embedders = variants(scifact_dir)
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        times, vectors = await timed_rounds(embedders, texts, rounds)
    finally:
        for embedder in embedders.values():
            embedder.close()
    load_after = [round(x, 2) for x in os.getloadavg()]
    return {
        "bench": "query_embedding",
        "command": " ".join(["python bench/query_embedding.py", *sys.argv[1:]]),
        "queries": len(texts),
        "rounds": rounds,
        "calls_per_variant": len(times[SHIPPED]),
        "variants": figures(times, vectors),
        "load_average_1_5_15": {"before": load_before, "after": load_after},
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes over the queries")
    parser.add_argument("--scifact", type=Path, default=SCIFACT_DIR, help="BEIR SciFact directory")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "query_embedding.json")
    args = parser.parse_args()
    emit(asyncio.run(run(args.rounds, args.scifact)), args.out)


if __name__ == "__main__":
    main()
