"""Document-aware hybrid fusion on SciFact, offline: each variant chosen on train, shown on test.

    python bench/fusion_lab.py --out bench/results/scifact-fusion-lab.json

Issue 10 §1 asks for HYBRID nDCG@10 ≥ 0.74 on SciFact test with every parameter chosen on train.
`make eval` measures the engine's chunk-level fusion; this lab asks whether *document* evidence
lifts it: SciFact's 5,183 abstracts are 12,095 chunks, so a document's BM25 and dense evidence is
split over its chunks. Each variant is replayed over engine-like candidates, chosen on the 809
train queries and reported on the 300 test queries, with a paired bootstrap of its per-query
difference to the chunk-level baseline on test.

Inputs (built by `bench/chunking_lab.py` and reused; built here the same way when absent): the
200 / 40 collection with the chunk alone as keyword text (`keyword_context_chunks` 0, as these
results were measured; the product now adds the neighbours, `bench/context_lab.py`) under
`var/eval/chunking/200-40`, and the cached vectors. Per query, exactly as a HYBRID search does: the
top 100 chunks by exact cosine ∪ the top 100 by the engine's own BM25 (`keyword_candidates`), every
candidate scored on both sides. Document-level BM25 (`bm25(doc)`) comes from a LanceDB FTS index
built with the engine's configuration over each abstract's full text (title and body) in
`var/eval/fusion-lab` — the per-document keyword side the product does not have.

Variants (`mx` = divided by the best candidate's score, as `linear` fusion does):

* `linear`: α·cos + (1 − α)·mx(bm25) — the engine's fusion, the baseline.
* `doc_max`: each side of a chunk mixed with its document's best chunk (over all its chunks):
  α·((1 − βd)·cos + βd·max cos) + (1 − α)·mx((1 − βk)·bm25 + βk·max bm25).
* `candidate_doc_max`: the same, the document maxima taken over the candidates only (what an
  engine knows without reading the document's other chunks).
* `doc_bm25`: the keyword side mixed with the document's full-text BM25:
  α·((1 − βd)·cos + βd·max cos) + (1 − α)·((1 − βk)·mx(bm25) + βk·mx(bm25(doc))).
* `doc_bm25_sum`: the same with the sum of the document's chunk BM25s instead of bm25(doc).
* `centroid`: the dense side mixed with the cosine of the document's mean chunk vector.
* `doc_bm25_zscore`: `doc_bm25` over z-scored sides.
* `title_boost`: field weighting, α·cos + (1 − α)·mx(bm25 + w·bm25(title)) — what a title field
  boosted by w in a multi-field match adds (the title's BM25 over the documents' titles).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt
import pyarrow as pa
from lancedb.index import FTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.eval_scifact import ndcg_at, recall_at
from bench.harness import RESULTS_DIR, VAR_DIR, emit, load_scifact, machine, note, settings_for
from bench.scifact_collection import COLLECTION, build_collection, cached_embedder
from services.search_tool.config import ChunkingSettings
from services.search_tool.engine.lancedb.retrieval import keyword_candidates
from services.search_tool.engine.lancedb.rows import VECTOR_COLUMN

Floats = npt.NDArray[Any]
CANDIDATES = 100
BM25_DEPTH = 3_000
"""Chunks (and documents) scored by BM25 per query; deeper ones count as 0."""
ALL_ALPHAS = [round(a * 0.05, 2) for a in range(21)]
ALPHAS = [round(0.4 + a * 0.05, 2) for a in range(11)]
BETAS = [0.0, 0.25, 0.5, 0.75, 1.0]
TITLE_BOOSTS = [0.0, 0.1, 0.25, 0.5, 1.0]
BOOTSTRAP = 2_000


@dataclass(frozen=True)
class Query:
    """One query's candidates and every feature a variant may fuse."""

    split: str
    relevant: dict[str, int]
    documents: npt.NDArray[np.int64]
    """Document number of each candidate chunk."""
    rows: npt.NDArray[np.int64]
    """Row address of each candidate (the final tie-break, as the engine's)."""
    features: dict[str, Floats]


Scorer = Callable[[Query], Floats]


def _mx(x: Floats) -> Floats:
    top = float(x.max()) if len(x) else 0.0
    return x / top if top > 0 else np.zeros_like(x)


def _z(x: Floats) -> Floats:
    spread = float(x.std())
    return (x - x.mean()) / spread if spread > 0 else np.zeros_like(x)


async def _bm25(table: Any, text: str, column: str | None = None) -> dict[int, float]:
    if column is None:  # the engine's own keyword query
        ranked, _ = await keyword_candidates(table, text, None, BM25_DEPTH, None)
        return {int(c.id): c.score for c in ranked}
    found = await (
        table.query()
        .nearest_to_text(text, columns=column)
        .select(["_score"])
        .with_row_id()
        .limit(BM25_DEPTH)
        .to_arrow()
    )
    rows, scores = found.column("_rowid").to_pylist(), found.column("_score").to_pylist()
    return {int(r): float(s) for r, s in zip(rows, scores, strict=True)}


async def _document_table(corpus: Sequence[dict[str, Any]]) -> Any:
    """Each abstract's full text in its own FTS-indexed row (the engine's FTS configuration)."""
    db = await lancedb.connect_async(str(VAR_DIR / "eval" / "fusion-lab"))
    texts = [f"{d['title']}\n{d['text']}" if d.get("title") else d["text"] for d in corpus]
    data = pa.table(
        {
            "document_id": [d["_id"] for d in corpus],
            "full_text": texts,
            "title": [d.get("title", "") for d in corpus],
        }
    )
    table = await db.create_table("documents", data, mode="overwrite")
    for column in ("full_text", "title"):
        await table.create_index(
            column, config=FTS(with_position=False), replace=True, name=f"{column}_idx"
        )
    return table


async def load_queries(data_dir: Path) -> tuple[list[Query], list[str]]:
    train, test = load_scifact(split="train"), load_scifact(split="test")
    embedder = cached_embedder()
    chunk_alone = ChunkingSettings(chunk_tokens=200, overlap_tokens=40, keyword_context_chunks=0)
    settings = settings_for(data_dir).model_copy(update={"chunking": chunk_alone})
    await build_collection(data_dir, test, embedder, settings)
    chunks = await (await lancedb.connect_async(str(data_dir))).open_table(COLLECTION)
    stored = await chunks.query().select(["document_id", VECTOR_COLUMN]).with_row_id().to_arrow()
    rows = np.array(stored.column("_rowid").to_pylist(), dtype=np.int64)
    names, doc_of = np.unique(
        np.array(stored.column("document_id").to_pylist()), return_inverse=True
    )
    vectors = stored.column(VECTOR_COLUMN).combine_chunks().values.to_numpy()
    vectors = vectors.reshape(len(rows), -1).astype(np.float32)
    centroids = np.zeros((len(names), vectors.shape[1]), dtype=np.float32)
    np.add.at(centroids, doc_of, vectors)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    position = {int(r): i for i, r in enumerate(rows)}
    number = {str(n): i for i, n in enumerate(names)}
    documents = await _document_table(test.corpus)
    document_rows = await documents.query().select(["document_id"]).with_row_id().to_arrow()
    lab_document = {
        int(r): number[str(d)]
        for r, d in zip(
            document_rows.column("_rowid").to_pylist(),
            document_rows.column("document_id").to_pylist(),
            strict=True,
        )
    }
    asked = [(s.split, q, t, s.qrels[q]) for s in (train, test) for q, t in s.queries.items()]
    query_vectors = await embedder.embed([t for _, _, t, _ in asked])
    embedder.save()
    queries: list[Query] = []
    for (split, _, text, relevant), vector in zip(asked, query_vectors, strict=True):
        cos = (vectors @ vector).astype(np.float32)
        bm25 = np.zeros(len(rows), dtype=np.float32)
        for row, score in (await _bm25(chunks, text)).items():
            bm25[position[row]] = score
        doc_bm25 = np.zeros(len(names), dtype=np.float32)
        for row, score in (await _bm25(documents, text, "full_text")).items():
            doc_bm25[lab_document[row]] = score
        title_bm25 = np.zeros(len(names), dtype=np.float32)
        for row, score in (await _bm25(documents, text, "title")).items():
            title_bm25[lab_document[row]] = score
        keyword_top = np.nonzero(bm25)[0]
        keyword_top = keyword_top[np.argsort(-bm25[keyword_top], kind="stable")][:CANDIDATES]
        candidates = np.union1d(np.argsort(-cos, kind="stable")[:CANDIDATES], keyword_top)
        owner = doc_of[candidates]
        max_cos = np.full(len(names), -1.0, dtype=np.float32)
        np.maximum.at(max_cos, doc_of, cos)
        max_bm25 = np.zeros(len(names), dtype=np.float32)
        np.maximum.at(max_bm25, doc_of, bm25)
        sum_bm25 = np.zeros(len(names), dtype=np.float32)
        np.add.at(sum_bm25, doc_of, bm25)
        cand_max_cos = np.full(len(names), -1.0, dtype=np.float32)
        np.maximum.at(cand_max_cos, owner, cos[candidates])
        cand_max_bm25 = np.zeros(len(names), dtype=np.float32)
        np.maximum.at(cand_max_bm25, owner, bm25[candidates])
        features = {
            "cos": cos[candidates],
            "bm25": bm25[candidates],
            "max_cos": max_cos[owner],
            "max_bm25": max_bm25[owner],
            "sum_bm25": sum_bm25[owner],
            "cand_max_cos": cand_max_cos[owner],
            "cand_max_bm25": cand_max_bm25[owner],
            "doc_bm25": doc_bm25[owner],
            "title_bm25": title_bm25[owner],
            "centroid_cos": (centroids[owner] @ vector).astype(np.float32),
        }
        queries.append(Query(split, relevant, owner, rows[candidates], features))
    return queries, [str(n) for n in names]


def ranking(query: Query, scores: Floats, names: list[str]) -> list[str]:
    """Documents by their best chunk (first occurrence), ties broken by row address."""
    order = np.lexsort((query.rows, -scores))
    owners = query.documents[order]
    _, first = np.unique(owners, return_index=True)
    return [names[i] for i in owners[np.sort(first)][:100]]


def per_query(queries: list[Query], split: str, scorer: Scorer, names: list[str]) -> Floats:
    return np.array(
        [ndcg_at(ranking(q, scorer(q), names), q.relevant) for q in queries if q.split == split],
        dtype=np.float32,
    )


def figures(queries: list[Query], split: str, scorer: Scorer, names: list[str]) -> dict[str, float]:
    ndcg, recall = [], []
    for q in queries:
        if q.split == split:
            ranked = ranking(q, scorer(q), names)
            ndcg.append(ndcg_at(ranked, q.relevant))
            recall.append(recall_at(ranked, q.relevant))
    return {
        "ndcg@10": round(float(np.mean(ndcg)), 4),
        "recall@100": round(float(np.mean(recall)), 4),
    }


def variants() -> dict[str, tuple[list[tuple[float, ...]], Callable[..., Scorer]]]:
    """Name → (parameter grid, scorer for one point of it)."""
    two: list[tuple[float, ...]] = list(itertools.product(ALPHAS, BETAS))
    three: list[tuple[float, ...]] = list(itertools.product(ALPHAS, BETAS, BETAS))

    def linear(a: float) -> Scorer:
        return lambda q: a * q.features["cos"] + (1 - a) * _mx(q.features["bm25"])

    def doc_max(a: float, bd: float, bk: float, prefix: str = "") -> Scorer:
        def score(q: Query) -> Floats:
            f = q.features
            dense = (1 - bd) * f["cos"] + bd * f[prefix + "max_cos"]
            return a * dense + (1 - a) * _mx((1 - bk) * f["bm25"] + bk * f[prefix + "max_bm25"])

        return score

    def doc_keyword(a: float, bd: float, bk: float, feature: str = "doc_bm25") -> Scorer:
        def score(q: Query) -> Floats:
            f = q.features
            dense = (1 - bd) * f["cos"] + bd * f["max_cos"]
            return a * dense + (1 - a) * ((1 - bk) * _mx(f["bm25"]) + bk * _mx(f[feature]))

        return score

    def centroid(a: float, g: float) -> Scorer:
        def score(q: Query) -> Floats:
            f = q.features
            return a * ((1 - g) * f["cos"] + g * f["centroid_cos"]) + (1 - a) * _mx(f["bm25"])

        return score

    def title_boost(a: float, w: float) -> Scorer:
        def score(q: Query) -> Floats:
            f = q.features
            return a * f["cos"] + (1 - a) * _mx(f["bm25"] + w * f["title_bm25"])

        return score

    def doc_keyword_z(a: float, bd: float, bk: float) -> Scorer:
        def score(q: Query) -> Floats:
            f = q.features
            dense = _z((1 - bd) * f["cos"] + bd * f["max_cos"])
            return a * dense + (1 - a) * _z((1 - bk) * f["bm25"] + bk * f["doc_bm25"])

        return score

    return {
        "dense": ([()], lambda: lambda q: q.features["cos"]),
        "bm25_chunk": ([()], lambda: lambda q: q.features["bm25"]),
        "bm25_document": ([()], lambda: lambda q: q.features["doc_bm25"]),
        "linear": ([(a,) for a in ALL_ALPHAS], linear),
        "doc_max": (three, doc_max),
        "candidate_doc_max": (three, lambda a, bd, bk: doc_max(a, bd, bk, "cand_")),
        "doc_bm25": (three, doc_keyword),
        "doc_bm25_sum": (three, lambda a, bd, bk: doc_keyword(a, bd, bk, "sum_bm25")),
        "centroid": (two, centroid),
        "doc_bm25_zscore": (three, doc_keyword_z),
        "title_boost": (list(itertools.product(ALPHAS, TITLE_BOOSTS)), title_boost),
    }


def bootstrap(difference: Floats, seed: int = 0) -> list[float]:
    """95 % interval of the mean per-query difference (paired bootstrap)."""
    rng = np.random.default_rng(seed)
    means = [
        float(difference[rng.integers(0, len(difference), len(difference))].mean())
        for _ in range(BOOTSTRAP)
    ]
    return [round(float(v), 4) for v in np.percentile(means, [2.5, 97.5])]


def paired_difference(difference: Floats) -> dict[str, Any]:
    """A variant's per-query difference to its baseline on test: mean, 95 % interval, and how many
    queries it ranks better and worse."""
    return {
        "mean": round(float(difference.mean()), 4),
        "ci95": bootstrap(difference),
        "wins": int((difference > 1e-9).sum()),
        "losses": int((difference < -1e-9).sum()),
    }


async def evaluate(data_dir: Path) -> dict[str, Any]:
    queries, names = await load_queries(data_dir)
    note(f"features of {len(queries)} queries ready")
    results: dict[str, Any] = {}
    baseline: Floats | None = None
    for name, (grid, make) in variants().items():
        on_train = {p: figures(queries, "train", make(*p), names)["ndcg@10"] for p in grid}
        best = max(grid, key=lambda p: on_train[p])
        scorer = make(*best)
        test = per_query(queries, "test", scorer, names)
        entry: dict[str, Any] = {
            "chosen_on_train": list(best),
            "train": figures(queries, "train", scorer, names),
            "test": figures(queries, "test", scorer, names),
            "grid_points": len(grid),
        }
        if name == "linear":
            baseline = test
        elif baseline is not None:
            entry["test_minus_linear"] = paired_difference(test - baseline)
        results[name] = entry
        note(f"{name}: chosen {best}, train {entry['train']}, test {entry['test']}")
    return {
        "benchmark": "scifact-fusion-lab",
        "dataset": "BEIR SciFact: chosen on train (809 queries), reported on test (300)",
        "candidates_per_side": CANDIDATES,
        "variants": results,
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "scifact-fusion-lab.json")
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "eval" / "chunking" / "200-40")
    args = parser.parse_args()
    emit(asyncio.run(evaluate(args.data_dir)), args.out)


if __name__ == "__main__":
    main()
