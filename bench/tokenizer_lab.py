"""The keyword side's tokenizer chosen on SciFact train together with the fusion, reported on test.

    nice -n 19 python bench/tokenizer_lab.py --out bench/results/scifact-tokenizer-lab.json

Issue 10 §1: BM25's k1 / b are not exposed by LanceDB 0.40's FTS index, but its tokenizer is
(`lancedb.index.FTS`: base tokenizer, stemming, stop words, ASCII folding). The tokenizer decides
which query words can match at all: SciFact's claims are full of hyphenated and Greek-lettered
terms (`IL-10`, `β-cells`), numbers and stop-word-like content words. For each variant of the
grid below the default collection (200 / 40 chunks, built by `bench/chunking_lab.py` under
`var/eval/chunking/200-40`, copied so that collection is untouched) gets its BM25 index rebuilt
with that tokenizer, the engine's scored candidates of every train and test query are collected
again (the dense side does not change), and replayed through the 92 fusion settings `make eval`
chooses from. The (tokenizer, fusion) pair with the best train nDCG@10 is chosen; each
variant's train-best fusion is reported on test with a paired bootstrap 95 % interval of its
per-query difference to the product's tokenizer (the first variant). Nothing is chosen on test.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lancedb.index import FTS

from bench.chunking_lab import LAB_DIR as CHUNKING_DIR
from bench.chunking_lab import TrainChoices, keyword_alone, replays_for
from bench.eval_scifact import collect_replays, fusion_grid
from bench.harness import RESULTS_DIR, VAR_DIR, emit, load_scifact, machine, note, settings_for
from bench.scifact_collection import COLLECTION, cached_embedder
from services.search_tool.engine.lancedb.engine import LanceDBEngine
from services.search_tool.engine.lancedb.indexes import FTS_INDEX
from services.search_tool.engine.lancedb.rows import SEARCH_TEXT_COLUMN

TOKENIZERS: dict[str, dict[str, Any]] = {
    "product (simple, English stem, stop words, ASCII folding)": {},
    "no stemming": {"stem": False},
    "stop words kept": {"remove_stop_words": False},
    "no stemming, stop words kept": {"stem": False, "remove_stop_words": False},
    "whitespace (hyphenated terms kept whole)": {"base_tokenizer": "whitespace"},
    "no ASCII folding": {"ascii_folding": False},
}
"""Each variant overrides the product's `FTS(with_position=False)`; the product's comes first."""
LAB_DIR = VAR_DIR / "eval" / "tokenizer"


async def replays_with(tokenizer: dict[str, Any], train: Any, test: Any) -> tuple[Any, Any]:
    """Train and test replays with the BM25 index rebuilt under `tokenizer`."""
    embedder = cached_embedder()
    engine = await LanceDBEngine.open(LAB_DIR, policy=settings_for(LAB_DIR).engine.index_policy())
    try:
        table = await engine._table(COLLECTION)  # the lab rebuilds one index of its own copy
        await table.create_index(
            SEARCH_TEXT_COLUMN,
            config=FTS(with_position=False, **tokenizer),
            replace=True,
            name=FTS_INDEX,
        )
        return (
            await collect_replays(engine, embedder, train),
            await collect_replays(engine, embedder, test),
        )
    finally:
        await engine.close()


async def evaluate(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    train, test = load_scifact(split="train"), load_scifact(split="test")
    await replays_for(200, 40, train, test)  # builds var/eval/chunking/200-40 when absent
    if LAB_DIR.exists():
        shutil.rmtree(LAB_DIR)
    shutil.copytree(CHUNKING_DIR / "200-40", LAB_DIR)
    choices = TrainChoices(train, test, "test_minus_product")
    for name, tokenizer in variants.items():
        train_replays, test_replays = await replays_with(tokenizer, train, test)
        entry = choices.add(
            name,
            train_replays,
            test_replays,
            describe={"fts_overrides": tokenizer},
            measures={"keyword_alone": keyword_alone(train_replays, test_replays, train, test)},
        )
        note(f"tokenizer {name}: {entry}")
    return {
        "benchmark": "scifact-tokenizer-lab",
        "dataset": "BEIR SciFact, 200 / 40 chunks: (BM25 tokenizer, fusion) chosen on train "
        "(809 queries), reported on test (300)",
        "fusion_grid_points": len(fusion_grid()),
        "tokenizers": choices.results,
        "chosen_on_train": choices.best_on_train(),
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "scifact-tokenizer-lab.json")
    parser.add_argument(
        "--only", action="append", default=None, help="variant names to run (repeatable)"
    )
    args = parser.parse_args()
    variants = {n: t for n, t in TOKENIZERS.items() if not args.only or n in args.only}
    emit(asyncio.run(evaluate(variants)), args.out)


if __name__ == "__main__":
    main()
