"""Fusion of the dense and keyword sides: every candidate is scored on both sides, then blended."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.search_tool.engine.base import Fusion, FusionMethod
from services.search_tool.fusion import (
    UNREAD_DENSE_SHARE,
    Candidate,
    Completion,
    absent_bm25,
    all_keyword_matches,
    fuse,
    keyword_only,
    read_by_the_embedder,
    script_share,
)

DENSE = [[Candidate("d1", 0.80), Candidate("d2", 0.78), Candidate("both", 0.60)]]
KEYWORD = [Candidate("k1", 12.0), Candidate("both", 6.0)]
COMPLETION = Completion(dense={"k1": 0.79}, all_keyword_matches=True)
"""k1 is BM25's best hit and nearly as close as d1 to the query; the keyword list holds every
match, so d1 and d2 contain no query word."""
TRUNCATED = Completion(dense={"k1": 0.79}, all_keyword_matches=False)
"""The same sides, the keyword list cut at what was asked: d1 and d2 may hold a query word."""


def _ids(fusion: Fusion, completion: Completion | None = COMPLETION) -> list[str]:
    return [f.id for f in fuse(DENSE, KEYWORD, fusion, completion)]


def test_keyword_only_names_the_candidates_whose_cosine_the_completion_needs() -> None:
    assert keyword_only(DENSE, KEYWORD) == ["k1"]


def test_a_keyword_list_shorter_than_asked_holds_every_match() -> None:
    assert all_keyword_matches(KEYWORD, 3)
    assert not all_keyword_matches(KEYWORD, 2)


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
    assert fused["d1"].score == pytest.approx(0.6 * 0.80)
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
    # dense ranks: d1 1, k1 2, d2 3, both 4; keyword: k1 1, both 2, d1 and d2 3 (both at 0)
    assert fused["k1"] == pytest.approx(1 / 12 + 1 / 11)
    assert fused["d2"] == pytest.approx(1 / 13 + 1 / 13)
    tied = fuse(
        [[Candidate("a", 0.5), Candidate("b", 0.5)]],
        [Candidate("a", 1.0)],
        Fusion(FusionMethod.RRF, rrf_k=10),
        Completion({}, all_keyword_matches=True),
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


def test_a_dense_only_candidate_of_a_cut_keyword_list_is_given_its_lowest_bm25() -> None:
    fused = {
        f.id: f for f in fuse(DENSE, KEYWORD, Fusion(FusionMethod.LINEAR, alpha=0.6), TRUNCATED)
    }
    assert fused["d1"].score == pytest.approx(0.6 * 0.80 + 0.4 * 6.0 / 12.0)
    assert fused["d2"].score == pytest.approx(0.6 * 0.78 + 0.4 * 6.0 / 12.0)
    assert fused["k1"].score == pytest.approx(0.6 * 0.79 + 0.4 * 1.0)
    # the bound ranks, it is not reported as the chunk's BM25: nobody looked it up
    assert (fused["d1"].dense_score, fused["d1"].keyword_score) == (0.80, None)
    assert (fused["both"].dense_score, fused["both"].keyword_score) == (0.60, 6.0)
    assert absent_bm25(KEYWORD, TRUNCATED) == 6.0
    assert absent_bm25(KEYWORD, COMPLETION) == 0.0
    assert absent_bm25(KEYWORD, None) == 0.0


@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    st.lists(st.floats(0.1, 30.0), min_size=1, max_size=30),
    st.integers(0, 30),
    st.sampled_from([0.0, 0.3, 0.7, 1.0]),
    st.randoms(use_true_random=False),
)
@settings(max_examples=400)
def test_the_bound_never_lowers_a_dense_only_candidate_and_moves_no_keyword_candidate(
    cosines: list[float],
    bm25: list[float],
    shared: int,
    alpha: float,
    rng: Any,
) -> None:
    """Random sides sharing `shared` chunks, every dense-only chunk's true BM25 at most the
    keyword list's lowest (it is not among the best): with `linear`, each chunk the keyword side
    found scores exactly what the true BM25 would give it, and each dense-only one at least."""
    keyword_scores = sorted(bm25, reverse=True)
    keyword = [Candidate(f"k{i}", s) for i, s in enumerate(keyword_scores)]
    shared = min(shared, len(keyword), len(cosines))
    ids = [f"k{i}" for i in range(shared)] + [f"d{i}" for i in range(len(cosines) - shared)]
    dense = [
        sorted((Candidate(i, c) for i, c in zip(ids, cosines, strict=True)), key=lambda c: -c.score)
    ]
    lowest = keyword_scores[-1]
    cosine_of = {i: rng.uniform(0.0, 1.0) for i in keyword_only(dense, keyword)}
    fusion = Fusion(FusionMethod.LINEAR, alpha=alpha)
    bound = {f.id: f.score for f in fuse(dense, keyword, fusion, Completion(cosine_of, False))}
    # the true BM25, looked up: a keyword list holding them would rank the same chunks
    looked_up = {
        i: rng.choice([0.0, lowest, rng.uniform(0.0, lowest)])
        for i in ids
        if i not in {c.id for c in keyword}
    }
    top = keyword_scores[0]
    for i, cosine in ((c.id, c.score) for c in dense[0]):
        if i in looked_up:
            exact = alpha * cosine + (1.0 - alpha) * (looked_up[i] / top)
            assert bound[i] >= exact
    for c in keyword:
        cosine = next((d.score for d in dense[0] if d.id == c.id), cosine_of.get(c.id, 0.0))
        assert bound[c.id] == alpha * cosine + (1.0 - alpha) * (c.score / top)


LATIN = frozenset({"Latin"})
LINEAR = Fusion(FusionMethod.LINEAR, alpha=0.7)


@pytest.mark.parametrize(
    "query", ["How do I read a CSV file?", "Straßenbahn in München", "café 2024", "1234 ?!"]
)
def test_a_query_in_the_embedders_script_keeps_the_configured_dense_weight(query: str) -> None:
    assert read_by_the_embedder(LINEAR, query, LATIN) == LINEAR


@pytest.mark.parametrize("query", ["日本の首都", "北京是首都", "서울의 인구", "столица России"])
def test_a_query_the_embedder_cannot_read_keeps_a_tenth_of_the_dense_weight(query: str) -> None:
    served = read_by_the_embedder(LINEAR, query, LATIN)
    assert served.method is FusionMethod.LINEAR
    assert served.alpha == pytest.approx(0.7 * UNREAD_DENSE_SHARE)


def test_a_mixed_query_weighs_the_dense_side_by_the_share_of_letters_it_reads() -> None:
    assert script_share("Python 使い方", LATIN) == pytest.approx(6 / 9)
    assert read_by_the_embedder(LINEAR, "Python 使い方", LATIN).alpha == pytest.approx(0.7 * 6 / 9)
    assert script_share("NF-κB activation", LATIN) == pytest.approx(13 / 14)


@pytest.mark.parametrize("method", [FusionMethod.MINMAX, FusionMethod.ZSCORE])
def test_every_blend_is_weighed_by_script_and_rrf_which_weighs_no_side_is_not(
    method: FusionMethod,
) -> None:
    blend = Fusion(method, alpha=0.5)
    assert read_by_the_embedder(blend, "日本", LATIN).alpha == pytest.approx(0.05)
    rrf = Fusion(FusionMethod.RRF, rrf_k=60, alpha=0.5)
    assert read_by_the_embedder(rrf, "日本", LATIN) == rrf


def test_an_embedder_of_every_script_keeps_the_configured_weight_for_any_query() -> None:
    assert read_by_the_embedder(LINEAR, "日本の首都", None) == LINEAR
    assert script_share("日本の首都", frozenset({"Han", "Hiragana"})) == 1.0
