"""Fusion of the dense and keyword sides: every candidate is scored on both sides, then blended."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.search_tool.engine.base import Fusion, FusionMethod
from services.search_tool.fusion import (
    Candidate,
    Completion,
    fuse,
    keyword_scores_needed,
    missing_sides,
)

DENSE = [[Candidate("d1", 0.80), Candidate("d2", 0.78), Candidate("both", 0.60)]]
KEYWORD = [Candidate("k1", 12.0), Candidate("both", 6.0)]
COMPLETION = Completion(dense={"k1": 0.79}, keyword={"d1": 1.0})
"""k1 is BM25's best hit and nearly as close as d1 to the query; d2 contains no query word."""


def _ids(fusion: Fusion, completion: Completion | None = COMPLETION) -> list[str]:
    return [f.id for f in fuse(DENSE, KEYWORD, fusion, completion)]


def test_missing_sides_names_the_candidates_each_side_must_score() -> None:
    keyword_only, dense_only = missing_sides(DENSE, KEYWORD)
    assert keyword_only == ["k1"]
    assert dense_only == ["d1", "d2"]


@pytest.mark.parametrize("method", list(FusionMethod))
def test_a_keyword_only_hit_with_a_close_vector_wins_once_its_cosine_is_known(
    method: FusionMethod,
) -> None:
    assert _ids(Fusion(method, alpha=0.5))[0] == "k1"


def test_without_completion_a_keyword_only_hit_sinks_below_every_dense_hit() -> None:
    ranking = _ids(Fusion(FusionMethod.LINEAR, alpha=0.7), completion=None)
    assert ranking.index("k1") > ranking.index("d2")


def test_linear_blends_cosine_with_bm25_scaled_by_the_best_candidate() -> None:
    fused = {
        f.id: f for f in fuse(DENSE, KEYWORD, Fusion(FusionMethod.LINEAR, alpha=0.6), COMPLETION)
    }
    assert fused["k1"].score == pytest.approx(0.6 * 0.79 + 0.4 * 1.0)
    assert fused["d1"].score == pytest.approx(0.6 * 0.80 + 0.4 * 1.0 / 12.0)
    assert fused["d2"].score == pytest.approx(0.6 * 0.78)
    assert (fused["d2"].dense_score, fused["d2"].keyword_score) == (0.78, 0.0)
    assert (fused["k1"].dense_score, fused["k1"].keyword_score) == (0.79, 12.0)


def test_minmax_scales_each_side_to_the_unit_range_over_the_candidates() -> None:
    fused = {
        f.id: f.score
        for f in fuse(DENSE, KEYWORD, Fusion(FusionMethod.MINMAX, alpha=0.5), COMPLETION)
    }
    assert fused["k1"] == pytest.approx(0.5 * (0.79 - 0.60) / 0.20 + 0.5 * 1.0)
    assert fused["both"] == pytest.approx(0.5 * 0.0 + 0.5 * 6.0 / 12.0)
    assert fused["d2"] == pytest.approx(0.5 * 0.9 + 0.0)


def test_zscore_blends_standardised_sides() -> None:
    fused = {
        f.id: f.score
        for f in fuse(DENSE, KEYWORD, Fusion(FusionMethod.ZSCORE, alpha=1.0), COMPLETION)
    }
    dense = [0.80, 0.78, 0.60, 0.79]
    mean = sum(dense) / 4
    spread = (sum((d - mean) ** 2 for d in dense) / 4) ** 0.5
    assert fused["both"] == pytest.approx((0.60 - mean) / spread)


def test_rrf_ranks_every_candidate_on_both_sides_and_ties_share_a_rank() -> None:
    fused = {
        f.id: f.score for f in fuse(DENSE, KEYWORD, Fusion(FusionMethod.RRF, rrf_k=10), COMPLETION)
    }
    # dense ranks: d1 1, k1 2, d2 3, both 4; keyword: k1 1, both 2, d1 3, d2 4 (only one at 0)
    assert fused["k1"] == pytest.approx(1 / 12 + 1 / 11)
    assert fused["d2"] == pytest.approx(1 / 13 + 1 / 14)
    tied = fuse(
        [[Candidate("a", 0.5), Candidate("b", 0.5)]],
        [Candidate("a", 1.0)],
        Fusion(FusionMethod.RRF, rrf_k=10),
        Completion({}, {}),
    )
    assert [f.score for f in tied] == pytest.approx([1 / 11 + 1 / 11, 1 / 11 + 1 / 12])


def test_a_single_list_keeps_its_own_scores() -> None:
    fused = fuse(DENSE, None, Fusion(FusionMethod.RRF))
    assert [(f.id, f.score) for f in fused] == [("d1", 0.80), ("d2", 0.78), ("both", 0.60)]


def test_variations_without_a_keyword_side_fuse_by_rrf_or_take_the_best_cosine() -> None:
    lists = [[Candidate("a", 0.9), Candidate("b", 0.5)], [Candidate("b", 0.95)]]
    by_rank = fuse(lists, None, Fusion(FusionMethod.RRF, rrf_k=60))
    assert [f.id for f in by_rank] == ["b", "a"]
    by_cosine = fuse(lists, None, Fusion(FusionMethod.LINEAR))
    assert [(f.id, f.score) for f in by_cosine] == [("b", 0.95), ("a", 0.9)]
    assert all(f.keyword_score is None for f in by_cosine)


def test_no_bm25_is_needed_when_the_keyword_side_holds_every_match() -> None:
    needed = keyword_scores_needed(
        DENSE, KEYWORD, Fusion(FusionMethod.LINEAR, alpha=0.7), 1, all_matches=True, cosines={}
    )
    assert needed == []


def test_a_dense_only_candidate_is_needed_only_if_its_best_possible_bm25_reaches_the_page() -> None:
    dense = [[Candidate("close", 0.90), Candidate("far", 0.10), Candidate("both", 0.50)]]
    keyword = [Candidate("k1", 10.0), Candidate("both", 9.0), Candidate("k3", 8.0)]
    linear = Fusion(FusionMethod.LINEAR, alpha=0.5)
    cosines = {"k1": 0.40, "k3": 0.30}
    # exact: k1 0.7, both 0.7, k3 0.55; at most: close 0.45 + 0.4, far 0.05 + 0.4
    assert keyword_scores_needed(dense, keyword, linear, 2, all_matches=False, cosines=cosines) == [
        "close"
    ]
    assert keyword_scores_needed(dense, keyword, linear, 3, all_matches=False, cosines=cosines) == [
        "close"
    ]
    # too few exact scores for the page, or a method that normalises over everyone: all needed
    assert keyword_scores_needed(dense, keyword, linear, 4, all_matches=False, cosines=cosines) == [
        "close",
        "far",
    ]
    rrf = Fusion(FusionMethod.RRF)
    assert keyword_scores_needed(dense, keyword, rrf, 1, all_matches=False, cosines=cosines) == [
        "close",
        "far",
    ]


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    st.lists(st.floats(0.1, 30.0), min_size=1, max_size=30),
    st.integers(0, 30),
    st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    st.integers(1, 12),
    st.randoms(use_true_random=False),
)
@settings(max_examples=400)
def test_leaving_out_the_bm25_nobody_needs_keeps_the_page_exactly(
    cosines: list[float],
    bm25: list[float],
    shared: int,
    alpha: float,
    depth: int,
    rng: Any,
) -> None:
    """Random sides sharing `shared` chunks; every dense-only chunk's true BM25 is at most the
    keyword side's lowest (or 0): the first `depth` fused entries, scores and order included,
    are the same with the full completion and with only the needed BM25."""
    depth = min(depth, len(bm25))
    keyword_scores = sorted(bm25, reverse=True)
    keyword = [Candidate(f"k{i}", s) for i, s in enumerate(keyword_scores)]
    shared = min(shared, len(keyword), len(cosines))
    ids = [f"k{i}" for i in range(shared)] + [f"d{i}" for i in range(len(cosines) - shared)]
    dense = [
        sorted((Candidate(i, c) for i, c in zip(ids, cosines, strict=True)), key=lambda c: -c.score)
    ]
    keyword_only, dense_only = missing_sides(dense, keyword)
    lowest = keyword_scores[-1]
    true_bm25 = {i: rng.choice([0.0, lowest, lowest, rng.uniform(0.0, lowest)]) for i in dense_only}
    true_bm25 = {i: s for i, s in true_bm25.items() if s > 0}
    completion_cosines = {i: rng.uniform(0.0, 1.0) for i in keyword_only}
    full = Completion(dense=completion_cosines, keyword=true_bm25)
    fusion = Fusion(FusionMethod.LINEAR, alpha=alpha)
    needed = keyword_scores_needed(
        dense, keyword, fusion, depth, all_matches=False, cosines=completion_cosines
    )
    partial = Completion(
        dense=completion_cosines, keyword={i: s for i, s in true_bm25.items() if i in needed}
    )
    page = fuse(dense, keyword, fusion, full)[:depth]
    assert fuse(dense, keyword, fusion, partial)[:depth] == page
