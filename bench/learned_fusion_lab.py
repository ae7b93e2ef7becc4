"""A fusion learned from the HYBRID candidates alone, chosen on SciFact train, shown on test.

    nice -n 19 python bench/learned_fusion_lab.py --chunking 200-40 --chunking 256-48 \
        --chunking 128-24 --out bench/results/scifact-learned-fusion-lab.json

Issue 10 §1, the engine-independent direction: no schema change, no read beyond what a HYBRID
search already has — its candidates (top `fusion.candidates` per side, each scored on both sides)
and the document each candidate chunk belongs to. Per candidate chunk:

* `cos`: best cosine over the query vectors; `kw`: BM25 / the best candidate's BM25 (as `linear`);
* `doc_cos`, `doc_kw`: the best `cos` / `kw` over the candidate chunks of the same document;
* `doc_chunks`: log2(1 + the document's candidate chunks) / log2(1 + the most any document has);
* `rr_dense`, `rr_kw`: 60 / (60 + rank) on each side (the reciprocal-rank terms of RRF, k 60);
* `z_cos`, `z_kw`: each side standardised over the candidates (z-scores, scaled by 1/4).

A chunk's score is a weighted sum w·x; documents are ranked by their best chunk, as every eval
does. The weights minimise a listwise softmax cross-entropy (ListNet's top-one loss; a document's
probability is the sum of its chunks', a smooth stand-in for "best chunk") with an L2 penalty,
by full-batch Adam. The model's complexity — which nested feature set, which penalty — is chosen
by 5-fold cross-validation on the train queries (held-out nDCG@10), and so is the chunking
when several are given (one per `--chunking`): the (chunking, feature set, penalty) with the best
cross-validated figure is the lab's choice. Each set is refitted on all of train and reported on
test, with a paired bootstrap 95 % interval of its per-query difference to the default of the
time (chunking 200 / 40, the chunk alone as keyword text, `linear` α 0.75; the product now adds
the neighbours, `bench/context_lab.py`). Coordinate ascent on nDCG@10 itself (Metzler &
Croft 2007, from the `linear` default, cos weight fixed) was tried first: it stalled at a
`linear` blend (kw weight 0.4; no single document-feature weight moved from 0 gains on train),
so it was dropped.
Replays come from `bench/chunking_lab.py` (`var/eval/chunking/<size>-<overlap>/replays.pkl`).
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.eval_scifact import Replay
from bench.fusion_lab import paired_difference
from bench.harness import RESULTS_DIR, VAR_DIR, emit, load_scifact, machine, note
from services.search_tool.fusion import absent_bm25

FEATURES = ["cos", "kw", "doc_cos", "doc_kw", "doc_chunks", "rr_dense", "rr_kw", "z_cos", "z_kw"]
MODELS = {
    "linear": ["cos", "kw"],
    "doc_max": ["cos", "kw", "doc_cos", "doc_kw"],
    "doc_max_count": ["cos", "kw", "doc_cos", "doc_kw", "doc_chunks"],
    "doc_max_count_ranks": ["cos", "kw", "doc_cos", "doc_kw", "doc_chunks", "rr_dense", "rr_kw"],
    "all": FEATURES,
}
"""Nested feature sets: the complexity cross-validation chooses from."""
SOFTMAX_SCALE = 20.0
"""Initial inverse temperature of the softmax learner (its weights start at 20 × `linear`)."""
SOFTMAX_STEPS = 200
SOFTMAX_RATE = 0.2
L2 = [1e-4, 1e-3, 1e-2]
"""L2 penalties the softmax learner's cross-validation chooses from."""
FOLDS = 5
RRF_K = 60
DEFAULT_CHUNKING = "200-40"
RECIPE = f"{MODELS}|{L2}|{SOFTMAX_STEPS}|{SOFTMAX_RATE}|{SOFTMAX_SCALE}|{FOLDS}"
"""Identifies the lab's settings: a chunking's results kept under `var/` are reused only when
they were computed with these (`var/eval/chunking/<chunking>/learned-fusion.json`)."""
Floats = npt.NDArray[np.float64]


@dataclass
class Split:
    """Every query's candidates in flat arrays (one row per candidate chunk)."""

    queries: list[str]
    x: Floats
    """Features, one column per `FEATURES`."""
    query: npt.NDArray[np.int64]
    """Query number of each row."""
    group: npt.NDArray[np.int64]
    """(query, document) number of each row; rows are sorted by it (each group contiguous)."""
    group_query: npt.NDArray[np.int64]
    group_gain: Floats
    """Relevance of each (query, document)."""
    idcg: Floats
    """Ideal DCG@10 of each query."""


def _ranks(scores: Floats) -> Floats:
    order = np.argsort(-scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    return ranks


def _z(x: Floats) -> Floats:
    spread = float(x.std())
    return (x - x.mean()) / spread / 4 if spread > 0 else np.zeros_like(x)


def query_features(replay: Replay) -> tuple[list[str], Floats]:
    """Each candidate's document and feature row, from the candidates alone."""
    s = replay.scored
    dense = {c.id: c.score for ranking in s.dense for c in ranking}
    keyword = {c.id: c.score for c in s.keyword or ()}
    ids = sorted(dense.keys() | keyword.keys())
    assert s.completion is not None
    cos = np.array([dense.get(i, s.completion.dense.get(i, 0.0)) for i in ids])
    absent = absent_bm25(s.keyword or [], s.completion)
    bm25 = np.array([keyword.get(i, absent) for i in ids])
    top = bm25.max() if len(bm25) else 0.0
    kw = bm25 / top if top > 0 else np.zeros_like(bm25)
    documents = [replay.documents[i] for i in ids]
    _, owner, counts = np.unique(documents, return_inverse=True, return_counts=True)
    doc_cos = np.full(counts.shape, -1.0)
    np.maximum.at(doc_cos, owner, cos)
    doc_kw = np.zeros(counts.shape)
    np.maximum.at(doc_kw, owner, kw)
    chunks = np.log2(1 + counts[owner]) / math.log2(1 + counts.max())
    x = np.stack(
        [
            cos,
            kw,
            doc_cos[owner],
            doc_kw[owner],
            chunks,
            RRF_K / (RRF_K + _ranks(cos)),
            RRF_K / (RRF_K + _ranks(bm25)),
            _z(cos),
            _z(bm25),
        ],
        axis=1,
    )
    return documents, x


def build_split(replays: dict[str, Replay], qrels: dict[str, dict[str, int]]) -> Split:
    queries = sorted(q for q in replays if q in qrels)
    xs, query_of, group_of, group_query, gains, idcg = [], [], [], [], [], []
    groups = 0
    for n, q in enumerate(queries):
        documents, x = query_features(replays[q])
        names, owner = np.unique(documents, return_inverse=True)
        by_document = np.argsort(owner, kind="stable")
        xs.append(x[by_document])
        query_of.append(np.full(len(x), n))
        group_of.append(owner[by_document] + groups)
        group_query.append(np.full(len(names), n))
        gains.append(np.array([qrels[q].get(str(d), 0) for d in names], dtype=np.float64))
        ideal = sorted(qrels[q].values(), reverse=True)[:10]
        idcg.append(sum(g / math.log2(i + 2) for i, g in enumerate(ideal)))
        groups += len(names)
    return Split(
        queries,
        np.concatenate(xs),
        np.concatenate(query_of),
        np.concatenate(group_of),
        np.concatenate(group_query),
        np.concatenate(gains),
        np.array(idcg),
    )


def per_query_ndcg(split: Split, weights: Floats, columns: list[int]) -> Floats:
    """nDCG@10 of every query, documents ranked by their best chunk's w·x."""
    score = split.x[:, columns] @ weights
    starts = np.flatnonzero(np.r_[True, split.group[1:] != split.group[:-1]])
    best = np.maximum.reduceat(score, starts)
    order = np.lexsort((-best, split.group_query))
    q = split.group_query[order]
    start = np.searchsorted(q, q, side="left")
    position = np.arange(len(order)) - start
    top = position < 10
    dcg = np.bincount(
        q[top],
        weights=split.group_gain[order][top] / np.log2(position[top] + 2),
        minlength=len(split.idcg),
    )
    return np.divide(dcg, split.idcg, out=np.zeros_like(dcg), where=split.idcg > 0)


def subset(split: Split, keep: npt.NDArray[np.bool_]) -> Split:
    """The queries `keep` marks (by query number)."""
    rows = keep[split.query]
    kept_groups = keep[split.group_query]
    new_query = np.cumsum(keep) - 1
    new_group = np.cumsum(kept_groups) - 1
    return Split(
        [q for q, k in zip(split.queries, keep, strict=True) if k],
        split.x[rows],
        new_query[split.query[rows]],
        new_group[split.group[rows]],
        new_query[split.group_query[kept_groups]],
        split.group_gain[kept_groups],
        split.idcg[keep],
    )


def fit_softmax(split: Split, names: list[str], l2: float) -> Floats:
    """Weights minimising a listwise softmax loss (ListNet's top-one / softmax cross-entropy)
    with an L2 penalty, by full-batch Adam. A document's probability is the sum of its candidate
    chunks' softmax probabilities (a smooth version of ranking a document by its best chunk);
    each query's loss is the gain-weighted negative log-probability of its relevant documents."""
    columns = [FEATURES.index(n) for n in names]
    x = split.x[:, columns]
    query_starts = np.flatnonzero(np.r_[True, split.query[1:] != split.query[:-1]])
    group_starts = np.flatnonzero(np.r_[True, split.group[1:] != split.group[:-1]])
    gain_total = np.bincount(split.group_query, weights=split.group_gain, minlength=len(split.idcg))
    row_gain = (split.group_gain / np.maximum(gain_total[split.group_query], 1e-12))[split.group]
    judged = (gain_total > 0)[split.query]
    queries = float((gain_total > 0).sum())
    weights = np.zeros(len(names))
    weights[0], weights[1] = 0.75 * SOFTMAX_SCALE, 0.25 * SOFTMAX_SCALE
    moment, second = np.zeros_like(weights), np.zeros_like(weights)
    for step in range(1, SOFTMAX_STEPS + 1):
        score = x @ weights
        top = np.maximum.reduceat(score, query_starts)[split.query]
        e = np.exp(score - top)
        per_query = np.add.reduceat(e, query_starts)[split.query]
        per_group = np.add.reduceat(e, group_starts)[split.group]
        gradient_rows = np.where(judged, e / per_query - row_gain * e / per_group, 0.0)
        gradient = x.T @ gradient_rows / queries + l2 * weights
        moment = 0.9 * moment + 0.1 * gradient
        second = 0.999 * second + 0.001 * gradient**2
        corrected = moment / (1 - 0.9**step), second / (1 - 0.999**step)
        weights = weights - SOFTMAX_RATE * corrected[0] / (np.sqrt(corrected[1]) + 1e-8)
    return weights


def cross_validated_softmax(split: Split, names: list[str], l2: float, seed: int = 0) -> float:
    """Mean nDCG@10 of the held-out folds."""
    rng = np.random.default_rng(seed)
    fold = rng.permutation(len(split.queries)) % FOLDS
    columns = [FEATURES.index(n) for n in names]
    held_out = []
    for k in range(FOLDS):
        weights = fit_softmax(subset(split, fold != k), names, l2)
        held_out.append(per_query_ndcg(subset(split, fold == k), weights, columns))
    return float(np.concatenate(held_out).mean())


def load_splits(chunking: str) -> tuple[Split, Split]:
    """Train and test of the replays `bench/chunking_lab.py` kept for `chunking`."""
    train_data, test_data = load_scifact(split="train"), load_scifact(split="test")
    with (VAR_DIR / "eval" / "chunking" / chunking / "replays.pkl").open("rb") as f:
        train_replays, test_replays = pickle.load(f)
    return build_split(train_replays, train_data.qrels), build_split(test_replays, test_data.qrels)


def evaluate(chunkings: list[str]) -> dict[str, Any]:
    """Every (chunking, feature set, penalty) cross-validated on train; the best is chosen."""
    _, default_test = load_splits(DEFAULT_CHUNKING)
    linear = [FEATURES.index("cos"), FEATURES.index("kw")]
    baseline = per_query_ndcg(default_test, np.array([0.75, 0.25]), linear)
    results: dict[str, Any] = {}
    for chunking in chunkings:
        kept = VAR_DIR / "eval" / "chunking" / chunking / "learned-fusion.json"
        if kept.exists() and json.loads(kept.read_text()).get("recipe") == RECIPE:
            results[chunking] = json.loads(kept.read_text())["models"]
            note(f"{chunking}: reusing {kept}")
            continue
        train, test = load_splits(chunking)
        note(f"{chunking}: {len(train.queries)} train / {len(test.queries)} test queries")
        models: dict[str, Any] = {}
        for name, features in MODELS.items():
            cv = {l2: cross_validated_softmax(train, features, l2) for l2 in L2}
            l2 = max(cv, key=lambda v: cv[v])
            weights = fit_softmax(train, features, l2)
            columns = [FEATURES.index(n) for n in features]
            on_test = per_query_ndcg(test, weights, columns)
            entry: dict[str, Any] = {
                "features": features,
                "cv_train_ndcg@10": {str(v): round(f, 4) for v, f in cv.items()},
                "l2": l2,
                "weights": {n: round(float(w), 3) for n, w in zip(features, weights, strict=True)},
                "train_ndcg@10": round(float(per_query_ndcg(train, weights, columns).mean()), 4),
                "test_ndcg@10": round(float(on_test.mean()), 4),
                "test_minus_default": paired_difference(on_test - baseline),
            }
            models[name] = entry
            note(f"{chunking} {name}: {entry}")
        results[chunking] = models
        kept.write_text(json.dumps({"recipe": RECIPE, "models": models}))
    cv_best = {
        (c, m): max(entry["cv_train_ndcg@10"].values())
        for c, models in results.items()
        for m, entry in models.items()
    }
    chunking, model = max(cv_best, key=lambda k: cv_best[k])
    return {
        "benchmark": "scifact-learned-fusion-lab",
        "dataset": "BEIR SciFact: chunking, feature set and penalty chosen on train (809 "
        f"queries, {FOLDS}-fold cross-validation), reported on test (300)",
        "baseline": f"chunking {DEFAULT_CHUNKING}, linear α 0.75: test nDCG@10 "
        f"{round(float(baseline.mean()), 4)}",
        "chunkings": results,
        "chosen_by_cross_validation": {"chunking": chunking, "model": model},
        "chosen_test_ndcg@10": results[chunking][model]["test_ndcg@10"],
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "scifact-learned-fusion-lab.json")
    parser.add_argument(
        "--chunking", action="append", default=None, help="SIZE-OVERLAP of replays (repeatable)"
    )
    args = parser.parse_args()
    emit(evaluate(args.chunking or [DEFAULT_CHUNKING]), args.out)


if __name__ == "__main__":
    main()
