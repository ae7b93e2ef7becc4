"""What the first search finds for a question asked in other words than the documents use: the
48 paraphrased questions of `bench/answer_quality_questions.py` over the demo collection, each
with the documents that answer it.

    python bench/first_search.py [--data-dir var/bench-answer-quality] [--build]
                                 [--variant question-framing] [--beir DIR:WORK_DIR ...]

For KEYWORD, SEMANTIC and HYBRID (the configured fusion) the page of 10 hits a search returns is
replayed exactly as the engine ranks it (`engine.scored_candidates` + `fusion.fuse`, as
`bench/eval_beir.py` does), and the rank of the first hit whose document answers the question
gives: answering document at rank 1, within the top 3, within the top 10, and MRR@10.

`--variant NAME` measures one deterministic query rewrite (`VARIANTS`) paired against the
unchanged question on the same questions: the difference of each figure with its 95 % paired
bootstrap interval (questions resampled). `--beir DIR:WORK_DIR` also measures the variant on a
BEIR-format collection already built by `bench/eval_beir.py` in WORK_DIR (nDCG@10 of each
strategy, paired), the held-out check a variant must pass before it is adopted: 48 questions are
too few to adopt anything on alone.

The demo collection is read from `--data-dir` (`bench/answer_quality.py` builds it there);
`--build` brings it up to date first through an in-process search tool (only what changed is
embedded). Query vectors are cached in `<data-dir>/first-search-vectors.npz`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.answer_quality_questions import QUESTIONS
from bench.embedding_cache import CachedEmbedder
from bench.eval_scifact import Replay, ndcg_at, replayed
from bench.harness import RESULTS_DIR, VAR_DIR, emit, load_beir, machine, note, settings_for
from bench.scifact_collection import cached_embedder
from services.search_tool.engine.base import EngineQuery, Fusion, FusionMethod, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.fusion import fuse

COLLECTION = "python-docs"
PAGE = 10
CANDIDATES = 200
"""Chunks a BEIR query's replay ranks (as `bench/eval_beir.py`: documents for nDCG@10)."""
BOOTSTRAP_SAMPLES = 2_000
RESULTS = RESULTS_DIR / "first_search.json"

_FRAMING = re.compile(
    r"^\s*(?:(?:how|what|which|where|when|why)\b(?:\s+(?:do|does|can|could|should|would|is|are)"
    r"\s+(?:i|you|we|one)\b|\s+to\b)?|is\s+there\s+(?:a|an|any)\s+(?:way|function|method)\s+to"
    r"|(?:can|could|should|do)\s+(?:i|you|we)\b)\s*",
    re.IGNORECASE,
)


def question_framing_removed(text: str) -> str:
    """The question without its interrogative opening ("How do I", "What", "Is there a way to")
    and final question mark: what the user wants, in the words left. Unchanged when nothing is
    left."""
    stripped = _FRAMING.sub("", text, count=1).rstrip().rstrip("?").strip()
    return stripped or text


VARIANTS: dict[str, Callable[[str], str]] = {"question-framing": question_framing_removed}


def strategies(configured: Fusion) -> dict[str, Fusion]:
    return {
        "KEYWORD": Fusion(FusionMethod.LINEAR, alpha=0.0),
        "SEMANTIC": Fusion(FusionMethod.LINEAR, alpha=1.0),
        "HYBRID": configured,
    }


async def replays_of(
    engine: LanceDBEngine,
    embedder: CachedEmbedder,
    collection: str,
    texts: dict[str, str],
    limit: int = PAGE,
) -> dict[str, Replay]:
    """Each query's scored candidates (both sides) for a page of `limit`, to fuse as any
    strategy."""
    ids = sorted(texts)
    vectors = await embedder.embed([texts[q] for q in ids])
    embedder.save()
    out: dict[str, Replay] = {}
    for query_id, vector in zip(ids, vectors, strict=True):
        query = EngineQuery(Strategy.HYBRID, texts[query_id], np.stack([vector]), limit=limit)
        scored, chunks = await engine.scored_candidates(collection, query)
        out[query_id] = Replay(scored, {a: c.document_id for a, c in chunks.items()})
    return out


def first_answer_rank(replay: Replay, fusion: Fusion, answering: set[str]) -> int | None:
    """1-based rank of the first hit of the page whose document answers, or None."""
    s = replay.scored
    page = fuse(s.dense, s.keyword, fusion, s.completion)[:PAGE]
    for rank, hit in enumerate(page, start=1):
        if replay.documents.get(hit.id) in answering:
            return rank
    return None


def per_question(ranks: dict[str, int | None]) -> dict[str, dict[str, float]]:
    """Per question: at 1, top 3, top 10 (1/0) and reciprocal rank (0 beyond the page)."""
    return {
        q: {
            "at_1": float(r == 1),
            "top_3": float(r is not None and r <= 3),
            "top_10": float(r is not None),
            "mrr@10": 1.0 / r if r else 0.0,
        }
        for q, r in ranks.items()
    }


def summary(rows: dict[str, dict[str, float]]) -> dict[str, float]:
    n = len(rows)
    return {m: round(sum(r[m] for r in rows.values()) / n, 3) for m in next(iter(rows.values()))}


def paired(a: dict[str, float], b: dict[str, float], *, seed: int = 7) -> dict[str, Any]:
    """Mean of a - b over the queries and its 95 % bootstrap interval (queries resampled)."""
    ids = sorted(a)
    deltas = [a[q] - b[q] for q in ids]
    rng = random.Random(seed)
    means = sorted(
        sum(deltas[rng.randrange(len(ids))] for _ in ids) / len(ids)
        for _ in range(BOOTSTRAP_SAMPLES)
    )
    return {
        "mean": round(sum(deltas) / len(ids), 4),
        "ci95": [
            round(means[int(0.025 * BOOTSTRAP_SAMPLES)], 4),
            round(means[int(0.975 * BOOTSTRAP_SAMPLES) - 1], 4),
        ],
        "better": sum(d > 0 for d in deltas),
        "worse": sum(d < 0 for d in deltas),
    }


async def demo_figures(
    data_dir: Path, embedder: CachedEmbedder, variant: str | None
) -> dict[str, Any]:
    settings = settings_for(data_dir)
    fusions = strategies(settings.fusion.to_fusion())
    answering = {f"q{i:02d}": set(q.documents) for i, q in enumerate(QUESTIONS, start=1)}
    texts = {f"q{i:02d}": q.text for i, q in enumerate(QUESTIONS, start=1)}
    engine = await LanceDBEngine.open(data_dir, policy=settings.engine.index_policy())
    try:
        chunks = (await engine.describe(COLLECTION)).chunk_count
        runs = {"question": await replays_of(engine, embedder, COLLECTION, texts)}
        if variant:
            rewritten = {q: VARIANTS[variant](t) for q, t in texts.items()}
            runs[variant] = await replays_of(engine, embedder, COLLECTION, rewritten)
    finally:
        await engine.close()
    rows = {
        run: {
            label: per_question(
                {q: first_answer_rank(r, fusion, answering[q]) for q, r in replays.items()}
            )
            for label, fusion in fusions.items()
        }
        for run, replays in runs.items()
    }
    result: dict[str, Any] = {
        "questions": len(QUESTIONS),
        "chunks": chunks,
        "figures": {run: {s: summary(r) for s, r in by.items()} for run, by in rows.items()},
        "hybrid_minus_better_side": {
            m: paired(
                {q: v[m] for q, v in rows["question"]["HYBRID"].items()},
                {q: v[m] for q, v in rows["question"]["SEMANTIC"].items()},
            )
            for m in ("at_1", "mrr@10")
        },
        "first_hit_rank": {
            s: {q: _rank(v) for q, v in r.items()} for s, r in rows["question"].items()
        },
    }
    if variant:
        result["variant_minus_question"] = {
            s: {
                m: paired(
                    {q: v[m] for q, v in rows[variant][s].items()},
                    {q: v[m] for q, v in rows["question"][s].items()},
                )
                for m in ("at_1", "top_3", "top_10", "mrr@10")
            }
            for s in fusions
        }
        result["rewritten"] = {texts[q]: VARIANTS[variant](texts[q]) for q in sorted(texts)[:6]}
    return result


def _rank(row: dict[str, float]) -> int | None:
    return round(1 / row["mrr@10"]) if row["mrr@10"] else None


async def beir_figures(dataset: Path, name: str, work_dir: Path, variant: str) -> dict[str, Any]:
    """nDCG@10 of each strategy on a built BEIR collection, the question vs the variant, paired."""
    data = load_beir(dataset, split="test")
    data_dir = work_dir / "lance"
    embedder = cached_embedder(work_dir / "vectors.npz")
    settings = settings_for(data_dir)
    fusions = strategies(settings.fusion.to_fusion())
    engine = await LanceDBEngine.open(data_dir, policy=settings.engine.index_policy())
    try:
        original = await replays_of(engine, embedder, name, data.queries, CANDIDATES)
        rewritten_texts = {q: VARIANTS[variant](t) for q, t in data.queries.items()}
        changed = sum(rewritten_texts[q] != t for q, t in data.queries.items())
        rewritten = await replays_of(engine, embedder, name, rewritten_texts, CANDIDATES)
    finally:
        await engine.close()
    out: dict[str, Any] = {"queries": len(data.queries), "queries_rewritten": changed}
    for label, fusion in fusions.items():
        a = {q: ndcg_at(r, data.qrels[q]) for q, r in replayed(rewritten, fusion).items()}
        b = {q: ndcg_at(r, data.qrels[q]) for q, r in replayed(original, fusion).items()}
        out[label] = {
            "ndcg@10_question": round(sum(b.values()) / len(b), 4),
            "ndcg@10_variant": round(sum(a.values()) / len(a), 4),
            "variant_minus_question": paired(a, b),
        }
    note(f"{name}: {out}")
    return out


async def build(data_dir: Path) -> None:
    from bench.harness import running_search_tool
    from quarry_cli.demo.build import ensure_demo_collection

    async with running_search_tool(settings_for(data_dir)) as address:
        status = await ensure_demo_collection(address, collection=COLLECTION, timeout_s=1800)
    note(f"demo collection: {status}")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.build:
        await build(args.data_dir)
    embedder = cached_embedder(args.data_dir / "first-search-vectors.npz")
    result: dict[str, Any] = {
        "bench": "first_search",
        "command": " ".join(["python bench/first_search.py", *sys.argv[1:]]),
        "page": PAGE,
        "variant": args.variant,
        **await demo_figures(args.data_dir, embedder, args.variant),
    }
    if args.variant and args.beir:
        result["held_out"] = {}
        for spec in args.beir:
            dataset, work_dir = spec.split(":", 1)
            name = Path(dataset).name
            result["held_out"][name] = await beir_figures(
                Path(dataset), name, Path(work_dir), args.variant
            )
    result["machine"] = machine()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "bench-answer-quality")
    parser.add_argument("--build", action="store_true", help="bring the demo collection up to date")
    parser.add_argument("--variant", choices=sorted(VARIANTS))
    parser.add_argument("--beir", action="append", default=[], metavar="DATASET:WORK_DIR")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    emit(asyncio.run(run(args)), args.out)


if __name__ == "__main__":
    main()
