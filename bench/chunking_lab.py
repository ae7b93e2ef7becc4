"""Chunk size chosen on SciFact train together with the fusion, reported on test.

    nice -n 19 python bench/chunking_lab.py --out bench/results/scifact-chunking-lab.json

Issue 10 §1: the fusion lab (`bench/fusion_lab.py`) found that document-level keyword evidence is
the only signal that lifts HYBRID on SciFact; the chunk size decides how much of a document one
chunk holds, on both sides. For each chunking of the grid the corpus is ingested through the
product's ingest (the configured chunker, each chunk embedded after its title) into its own
collection under `var/eval/chunking/<size>-<overlap>` (the embedder's vector cache is shared with
`make eval`: a chunk whose text is the same under two chunkings is embedded once). The engine's
scored candidates of every train and test query are then replayed through `fusion.fuse` for the
92 fusion settings `make eval` chooses from (`eval_scifact.fusion_grid`); the (chunking, fusion)
pair with the best train nDCG@10 is chosen; every chunking's train-best fusion is reported on
test with a paired bootstrap 95 % interval of its per-query difference to the configured default
(200 / 40 with its train-best fusion). Nothing is chosen on test.

The replays are kept (`var/eval/chunking/<size>-<overlap>/replays.pkl`) for
`bench/learned_fusion_lab.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.eval_scifact import (
    Replay,
    choose_fusion,
    fusion_grid,
    index_everything,
    ndcg_at,
    replay_splits,
    replayed,
    scores,
)
from bench.fusion_lab import paired_difference
from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    SciFact,
    emit,
    load_scifact,
    machine,
    note,
    settings_for,
)
from bench.scifact_collection import build_collection, cached_embedder
from services.search_tool.config import ChunkingSettings, SearchToolSettings

CHUNKINGS = [(200, 40), (256, 48), (128, 24)]
"""(chunk_tokens, overlap_tokens): the configured default first, then the alternatives."""
LAB_DIR = VAR_DIR / "eval" / "chunking"


def chunking_settings(
    data_dir: Path, size: int, overlap: int, context: int = 0
) -> SearchToolSettings:
    settings = settings_for(data_dir)
    chunking = ChunkingSettings(
        chunk_tokens=size, overlap_tokens=overlap, keyword_context_chunks=context
    )
    return settings.model_copy(update={"chunking": chunking})


async def replays_for(
    size: int, overlap: int, train: SciFact, test: SciFact, *, context: int = 0
) -> tuple[dict[str, Replay], dict[str, Replay], dict[str, Any]]:
    """Train and test replays on the collection chunked `size` / `overlap`, each chunk's keyword
    text reaching `context` chunks to either side (built when absent; kept replays are reused
    only while the collection needed no rewrite). This lab compares chunk sizes with the keyword
    side on the chunk alone (`context` 0), as its recorded results were measured;
    `bench/context_lab.py` varies the context."""
    data_dir = LAB_DIR / (f"{size}-{overlap}" + (f"-context{context}" if context else ""))
    stored = data_dir / "replays.pkl"
    embedder = cached_embedder()
    report = await build_collection(
        data_dir, test, embedder, chunking_settings(data_dir, size, overlap, context)
    )
    if stored.exists() and report["chunks_written"] == 0:
        with stored.open("rb") as f:
            train_replays, test_replays = pickle.load(f)
        return train_replays, test_replays, report
    report["index_refresh_s"] = await index_everything(data_dir)
    train_replays, test_replays = await replay_splits(data_dir, embedder, train, test)
    with stored.open("wb") as f:
        pickle.dump((train_replays, test_replays), f)
    return train_replays, test_replays, report


def per_query_ndcg(rankings: dict[str, list[str]], data: SciFact) -> np.ndarray:
    return np.array([ndcg_at(rankings.get(q, []), data.qrels[q]) for q in sorted(data.qrels)])


def train_chosen_fusion(
    train_replays: dict[str, Replay],
    test_replays: dict[str, Replay],
    train: SciFact,
    test: SciFact,
) -> tuple[dict[str, Any], np.ndarray]:
    """The grid's fusion chosen on train (`eval_scifact.choose_fusion`), its train and test
    scores, and its per-query test nDCG@10 (for paired intervals between variants)."""
    chosen, _, _ = choose_fusion(train_replays, train)
    fusion = fusion_grid()[chosen].to_fusion()
    test_rankings = replayed(test_replays, fusion)
    entry = {
        "chosen_fusion_on_train": chosen,
        "train": scores(replayed(train_replays, fusion), train),
        "test": scores(test_rankings, test),
    }
    return entry, per_query_ndcg(test_rankings, test)


class TrainChoices:
    """Variants compared the same way by every lab: each one's fusion chosen on train
    (`train_chosen_fusion`) and reported on test, with a paired bootstrap interval of its
    per-query difference to the first variant added (under `difference_key`)."""

    def __init__(self, train: SciFact, test: SciFact, difference_key: str) -> None:
        self._train = train
        self._test = test
        self._difference_key = difference_key
        self._baseline: np.ndarray | None = None
        self.results: dict[str, dict[str, Any]] = {}
        """Variant name → its entry, in the order added."""

    def add(
        self,
        name: str,
        train_replays: dict[str, Replay],
        test_replays: dict[str, Replay],
        *,
        describe: dict[str, Any],
        measures: dict[str, Any],
    ) -> dict[str, Any]:
        """Choose the variant's fusion on train and record it: `describe` (what the variant is)
        first, then the choice and its scores, then `measures`."""
        chosen, per_query = train_chosen_fusion(
            train_replays, test_replays, self._train, self._test
        )
        entry: dict[str, Any] = {**describe, **chosen, **measures}
        if self._baseline is None:
            self._baseline = per_query
        else:
            entry[self._difference_key] = paired_difference(per_query - self._baseline)
        self.results[name] = entry
        return entry

    def best_on_train(self) -> str:
        """The variant with the best train nDCG@10 (its train-chosen fusion's)."""
        return max(self.results, key=lambda n: self.results[n]["train"]["ndcg@10"])


def keyword_alone(
    train_replays: dict[str, Replay],
    test_replays: dict[str, Replay],
    train: SciFact,
    test: SciFact,
) -> dict[str, Any]:
    """The keyword side on its own (`linear` α 0), on train and on test."""
    keyword = fusion_grid()["linear_a0.0"].to_fusion()
    return {
        "train": scores(replayed(train_replays, keyword), train),
        "test": scores(replayed(test_replays, keyword), test),
    }


async def evaluate(chunkings: list[tuple[int, int]]) -> dict[str, Any]:
    train, test = load_scifact(split="train"), load_scifact(split="test")
    grid = fusion_grid()
    choices = TrainChoices(train, test, "test_minus_default")
    for size, overlap in chunkings:
        name = f"{size}/{overlap}"
        train_replays, test_replays, report = await replays_for(size, overlap, train, test)
        entry = choices.add(
            name,
            train_replays,
            test_replays,
            describe={"chunks": report.get("chunks")},
            measures={
                "sides_on_test": {
                    side: scores(replayed(test_replays, grid[label].to_fusion()), test)
                    for side, label in (
                        ("dense (linear a1.0)", "linear_a1.0"),
                        ("keyword (linear a0.0)", "linear_a0.0"),
                    )
                },
            },
        )
        note(f"chunking {name}: {entry}")
    return {
        "benchmark": "scifact-chunking-lab",
        "dataset": "BEIR SciFact: (chunking, fusion) chosen on train (809 queries), "
        "reported on test (300)",
        "fusion_grid_points": len(grid),
        "chunkings": choices.results,
        "chosen_on_train": choices.best_on_train(),
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "scifact-chunking-lab.json")
    parser.add_argument(
        "--chunking",
        action="append",
        default=None,
        help="SIZE/OVERLAP (repeatable; the first is the baseline of the intervals)",
    )
    args = parser.parse_args()
    chunkings = (
        [tuple(int(v) for v in c.split("/")) for c in args.chunking] if args.chunking else CHUNKINGS
    )
    emit(asyncio.run(evaluate([(s, o) for s, o in chunkings])), args.out)


if __name__ == "__main__":
    main()
