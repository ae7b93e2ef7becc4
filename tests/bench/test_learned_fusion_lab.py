"""The learned-fusion lab's arithmetic: its features, its nDCG and its learner (no data, no I/O)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.eval_scifact import Replay, ndcg_at
from bench.learned_fusion_lab import (
    FEATURES,
    build_split,
    fit_softmax,
    per_query_ndcg,
    query_features,
    subset,
)
from services.search_tool.engine.lancedb.search import ScoredCandidates
from services.search_tool.fusion import Candidate, Completion


def _replay(
    dense: dict[str, float],
    keyword: dict[str, float],
    completion: Completion,
    documents: dict[str, str],
) -> Replay:
    ranked_dense = [Candidate(i, s) for i, s in sorted(dense.items(), key=lambda x: -x[1])]
    ranked_keyword = [Candidate(i, s) for i, s in sorted(keyword.items(), key=lambda x: -x[1])]
    return Replay(ScoredCandidates([ranked_dense], ranked_keyword, completion), documents)


def test_features_score_every_candidate_on_both_sides_and_take_document_maxima() -> None:
    replay = _replay(
        dense={"1": 0.8, "2": 0.5},
        keyword={"2": 4.0, "3": 8.0},
        completion=Completion(dense={"3": 0.3}, all_keyword_matches=True),  # chunk 1: no query word
        documents={"1": "a", "2": "a", "3": "b"},
    )
    documents, x = query_features(replay)
    assert documents == ["a", "a", "b"]
    column = {name: x[:, FEATURES.index(name)] for name in FEATURES}
    assert column["cos"].tolist() == [0.8, 0.5, 0.3]
    assert column["kw"].tolist() == [0.0, 0.5, 1.0]  # BM25 over the best candidate's
    assert column["doc_cos"].tolist() == [0.8, 0.8, 0.3]
    assert column["doc_kw"].tolist() == [0.5, 0.5, 1.0]
    # document a has two candidate chunks (the most), b one
    assert column["doc_chunks"].tolist() == pytest.approx([1.0, 1.0, math.log2(2) / math.log2(3)])
    assert column["rr_dense"].tolist() == pytest.approx([60 / 61, 60 / 62, 60 / 63])


def _two_queries() -> tuple[dict[str, Replay], dict[str, dict[str, int]]]:
    # q1: the relevant document "r" is only second by cosine but first by BM25
    q1 = _replay(
        dense={"1": 0.9, "2": 0.6},
        keyword={"2": 9.0},
        completion=Completion(dense={}, all_keyword_matches=True),
        documents={"1": "x", "2": "r"},
    )
    # q2: both relevant documents are behind an irrelevant one on both sides
    q2 = _replay(
        dense={"5": 0.9, "6": 0.7, "7": 0.2},
        keyword={"5": 6.0, "7": 5.0},
        completion=Completion(dense={}, all_keyword_matches=False),  # 6 given 5.0
        documents={"5": "y", "6": "s", "7": "t"},
    )
    qrels = {"q1": {"r": 1}, "q2": {"s": 2, "t": 1}}
    return {"q1": q1, "q2": q2}, qrels


def test_vectorised_ndcg_equals_the_eval_ndcg_of_documents_ranked_by_their_best_chunk() -> None:
    replays, qrels = _two_queries()
    split = build_split(replays, qrels)
    weights = np.array([0.75, 0.25])
    got = per_query_ndcg(split, weights, [FEATURES.index("cos"), FEATURES.index("kw")])
    expected = []
    for query in ("q1", "q2"):
        documents, x = query_features(replays[query])
        score = 0.75 * x[:, 0] + 0.25 * x[:, 1]
        ranking: list[str] = []
        for i in np.argsort(-score, kind="stable"):
            if documents[i] not in ranking:
                ranking.append(documents[i])
        expected.append(ndcg_at(ranking, qrels[query]))
    assert got.tolist() == pytest.approx(expected)
    # q1: BM25 carries "r" to the top at α 0.75 (0.45 + 0.25 > 0.675); q2: s and t behind y
    assert got[0] == pytest.approx(1.0)
    assert got[1] < 1.0


def test_subset_keeps_the_chosen_queries_with_their_own_figures() -> None:
    replays, qrels = _two_queries()
    split = build_split(replays, qrels)
    columns = [FEATURES.index("cos"), FEATURES.index("kw")]
    weights = np.array([1.0, 0.2])
    whole = per_query_ndcg(split, weights, columns)
    only_second = subset(split, np.array([False, True]))
    assert only_second.queries == ["q2"]
    assert per_query_ndcg(only_second, weights, columns).tolist() == pytest.approx([whole[1]])


def test_softmax_learner_puts_weight_on_the_feature_that_separates_relevant_documents() -> None:
    rng = np.random.default_rng(1)
    replays: dict[str, Replay] = {}
    qrels: dict[str, dict[str, int]] = {}
    for q in range(40):
        # cosine is noise; the relevant document is the one with the highest BM25
        dense = {f"{q}-{d}": float(rng.uniform(0.2, 0.8)) for d in range(8)}
        keyword = {f"{q}-{d}": float(rng.uniform(1.0, 5.0)) for d in range(8)}
        best = max(keyword, key=lambda c: keyword[c])
        replays[str(q)] = _replay(
            dense, keyword, Completion({}, all_keyword_matches=True), {c: f"doc{c}" for c in dense}
        )
        qrels[str(q)] = {f"doc{best}": 1}
    split = build_split(replays, qrels)
    names = ["cos", "kw"]
    weights = fit_softmax(split, names, l2=1e-4)
    assert weights[1] > weights[0]
    columns = [FEATURES.index(n) for n in names]
    learned = per_query_ndcg(split, weights, columns).mean()
    assert learned > 0.9
    assert per_query_ndcg(split, np.array([1.0, 0.0]), columns).mean() < learned - 0.3
