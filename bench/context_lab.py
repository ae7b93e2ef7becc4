"""How far a chunk's keyword text reaches into its neighbours, chosen on SciFact train together
with the fusion, reported on test.

    nice -n 19 python bench/context_lab.py --chunking 200/40 --chunking 128/24 --chunking 256/48

Issue 10 §1: the fusion lab (`bench/fusion_lab.py`) found document-level keyword evidence the one
signal that lifts HYBRID: a claim's words are spread over an abstract's chunks. The product's
form of it needs no second index: each chunk's keyword (BM25) text is its own text followed by
the document's text from `n` chunks before it to `n` chunks after it
(`chunking.keyword_context_chunks`, `chunking.Chunker`), so the chunk that holds a word still
outranks the neighbours that only see it. For each `n` of the grid the corpus is ingested through
the product's ingest (200 / 40 chunks; the dense side is the same for every `n`) into its own
collection under `var/eval/chunking/200-40[-context<n>]`, and the engine's scored candidates of
every train and test query are replayed through the 92 fusion settings `make eval` chooses from.
The (n, fusion) pair with the best train nDCG@10 is chosen; every `n`'s train-best fusion is
reported on test with a paired bootstrap 95 % interval of its per-query difference to `n` = 0
(the chunk alone). Nothing is chosen on test.

`--chunking SIZE/OVERLAP` (repeatable) runs the same grid on other chunk sizes (collections under
`var/eval/chunking/<size>-<overlap>[-context<n>]`, shared with `bench/chunking_lab.py`) and
reports the joint train choice of (chunking, n, fusion) beside the choice at the configured
chunking: whether the lift holds when a document is split into more or fewer chunks, and what
train would pick if the chunk size were tuned with it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.chunking_lab import TrainChoices, keyword_alone, replays_for
from bench.eval_scifact import fusion_grid
from bench.harness import RESULTS_DIR, emit, load_scifact, machine, note
from services.search_tool.config import ChunkingSettings

CONTEXTS = [0, 1, 2, 3]
"""Neighbouring chunks on each side in a chunk's keyword text; the chunk alone (0) first."""
CONFIGURED = ChunkingSettings()


async def evaluate(contexts: list[int], chunkings: list[tuple[int, int]]) -> dict[str, Any]:
    choices = {
        f"{size}/{overlap}": await _chunking(size, overlap, contexts) for size, overlap in chunkings
    }
    results = {chunking: by_context.results for chunking, by_context in choices.items()}
    runs = [(c, n) for c, by_context in results.items() for n in by_context]
    joint = max(runs, key=lambda run: results[run[0]][run[1]]["train"]["ndcg@10"])
    configured = f"{CONFIGURED.chunk_tokens}/{CONFIGURED.overlap_tokens}"
    report: dict[str, Any] = {
        "benchmark": "scifact-context-lab",
        "dataset": "BEIR SciFact: (keyword context, fusion) chosen on train (809 queries), "
        "reported on test (300)",
        "fusion_grid_points": len(fusion_grid()),
        "configured_chunking": configured,
        "contexts": results.get(configured),
        "chosen_on_train": None,
        "other_chunkings": {c: r for c, r in results.items() if c != configured},
        "joint_choice_on_train": {
            "chunking": joint[0],
            "keyword_context_chunks": int(joint[1]),
            **results[joint[0]][joint[1]],
        },
        "machine": machine(),
    }
    if configured in choices:
        report["chosen_on_train"] = int(choices[configured].best_on_train())
    return report


async def _chunking(size: int, overlap: int, contexts: list[int]) -> TrainChoices:
    """Every context at one chunking, each against the chunk alone (the first context)."""
    train, test = load_scifact(split="train"), load_scifact(split="test")
    choices = TrainChoices(train, test, "test_minus_chunk_alone")
    for context in contexts:
        train_replays, test_replays, report = await replays_for(
            size, overlap, train, test, context=context
        )
        entry = choices.add(
            str(context),
            train_replays,
            test_replays,
            describe={"keyword_context_chunks": context, "chunks": report.get("chunks")},
            measures={"keyword_alone": keyword_alone(train_replays, test_replays, train, test)},
        )
        note(f"{size}/{overlap}, keyword context {context}: {entry}")
    return choices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "scifact-context-lab.json")
    parser.add_argument(
        "--context",
        type=int,
        action="append",
        default=None,
        help="neighbouring chunks on each side (repeatable; the first is the intervals' baseline)",
    )
    parser.add_argument(
        "--chunking",
        action="append",
        default=None,
        help="SIZE/OVERLAP (repeatable; default: the configured chunking only)",
    )
    args = parser.parse_args()
    chunkings = [
        (int(size), int(overlap))
        for size, overlap in (
            c.split("/")
            for c in args.chunking or [f"{CONFIGURED.chunk_tokens}/{CONFIGURED.overlap_tokens}"]
        )
    ]
    emit(asyncio.run(evaluate(args.context or CONTEXTS, chunkings)), args.out)


if __name__ == "__main__":
    main()
