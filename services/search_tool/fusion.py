"""Fusing the dense and keyword sides of a search into one ranking.

Each side retrieves its own candidates; a HYBRID fusion scores every candidate on *both* sides
(`Completion`). A keyword-only candidate gets its exact cosine (its stored vector is at hand).
A dense-only candidate is not among the keyword side's best: its BM25 is at most the keyword
list's lowest score, and the fusion gives it that bound (0 when the keyword list is shorter than
asked, so holds every chunk with a query word). Its BM25 is not looked up: that lookup was a round
of its own (at 100,000 chunks under a filter, 6.8 ms of a 23 ms search), and the bound ranks as
well (nDCG@10, the exact BM25 against the bound, paired over each collection's judged queries,
100 candidates a side: SciFact +0.0038 [0.0001, 0.0083], Cranfield +0.0001, NPL −0.0002,
CISI −0.0034 [−0.0086, 0.0018]; 200 a side: SciFact −0.0024 [−0.0077, 0.0031], CISI −0.0009
[−0.0029, 0.0001]; taking 0 instead lost on CISI). Without any completion a chunk one side missed
would get 0 there and sink below everything the other side found, however well it matched
(SciFact query 517: BM25's third hit fell out of a linear fusion's top 100).

Methods, all over the union of the candidates (`dense` is the best cosine over the query vectors):

* `linear`: `alpha * dense + (1 - alpha) * bm25 / max bm25` — a convex combination of the cosine
  (already in [0, 1] for these models) and BM25 scaled by its best candidate (Bruch et al. 2023,
  "An Analysis of Fusion Functions for Hybrid Retrieval": TM2C2, the theoretical minimum 0).
* `minmax`: the same blend after min-max scaling both sides over the candidates (LanceDB's and
  Elasticsearch's linear retriever normalisation).
* `zscore`: the same blend of each side's z-score over the candidates (Qdrant's DBSF in spirit).
* `rrf`: `sum over sides of 1 / (k + rank)`, each side ranking every candidate.

Without a completion (SEMANTIC with variations), RRF sums over the dense lists and the other
methods take the best cosine. A single list keeps its own scores.

A blend's dense weight is the configured `alpha` only for a query written in the scripts the
embedder was trained on (`read_by_the_embedder`): MiniLM, trained on English, gives vectors of
Chinese, Japanese, Korean or Russian text that rank far below BM25 (Debian package descriptions,
nDCG@10 SEMANTIC 0.24–0.37 against KEYWORD 0.67–0.82 when the rule was set), and at alpha 0.7
they pulled HYBRID below KEYWORD on all four (by 0.02–0.12). A query's dense weight is
therefore `alpha` times the share of its letters in the embedder's scripts, and at least
`UNREAD_DENSE_SHARE` of `alpha`: enough to order what BM25 ties or does not match at all, too
little to outweigh it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

import regex

from services.search_tool.engine.base import Fusion, FusionMethod

UNREAD_DENSE_SHARE = 0.1
"""The least share of a blend's `alpha` a query keeps when the embedder reads none of its
letters: a tie-breaker, and the order of the chunks BM25 does not match."""
_LETTER = regex.compile(r"\p{L}")


class Candidate(NamedTuple):
    """One entry of one ranked list.

    Candidates and fused entries are named tuples, not frozen dataclasses: a hybrid search makes
    a few hundred of each, and a frozen dataclass takes 1.6x as long to build (1.04 vs 0.63 µs).
    """

    id: str
    """Chunk id."""
    score: float
    """The list's own score: cosine similarity or BM25."""


class Completion(NamedTuple):
    """What each side scores the candidates only the other side retrieved."""

    dense: Mapping[str, float]
    """Best cosine similarity over the query vectors of each keyword-only candidate."""
    all_keyword_matches: bool
    """The keyword list holds every chunk with a query word (it is shorter than asked): a
    dense-only candidate holds none, its BM25 is 0. Otherwise it is given the list's lowest BM25,
    the most it can have (`fuse`)."""


class Fused(NamedTuple):
    """A chunk's fused score and the parts it came from."""

    id: str
    """Chunk id."""
    score: float
    """Fused score (higher is better)."""
    dense_score: float | None
    """Best cosine similarity over the query vectors (None: the dense side did not run)."""
    keyword_score: float | None
    """BM25 score (0.0: no query word; None: the keyword side did not run, or did not find this
    chunk among its best and its BM25 was not looked up)."""


def keyword_only(dense: Sequence[Sequence[Candidate]], keyword: Sequence[Candidate]) -> list[str]:
    """The keyword candidates no dense list holds: the completion needs their cosines."""
    dense_ids = {c.id for ranking in dense for c in ranking}
    return [c.id for c in keyword if c.id not in dense_ids]


def all_keyword_matches(keyword: Sequence[Candidate], asked: int) -> bool:
    """Whether a keyword list asked for `asked` candidates holds every chunk with a query word."""
    return len(keyword) < asked


def absent_bm25(keyword: Sequence[Candidate], completion: Completion | None) -> float:
    """The BM25 `fuse` gives a candidate the keyword list does not hold: with a completion, 0 if
    the list holds every match, else the list's lowest (the most it can have); without, 0."""
    if completion is None or completion.all_keyword_matches or not keyword:
        return 0.0
    return min(c.score for c in keyword)


def fuse(
    dense: Sequence[Sequence[Candidate]],
    keyword: Sequence[Candidate] | None,
    fusion: Fusion,
    completion: Completion | None = None,
) -> list[Fused]:
    """One ranking from dense lists (one per query vector) and an optional keyword list.

    Each list must be ordered best first. With both sides, `completion` must hold the cosine of
    every keyword-only candidate (`keyword_only`); without it a missed side counts as 0.
    """
    lists = [*dense, *([keyword] if keyword is not None else [])]
    best_dense = _best_dense(dense)
    keyword_scores = {c.id: c.score for c in keyword or ()}
    if len(lists) == 1:
        only = lists[0]
        return [Fused(c.id, c.score, best_dense.get(c.id), keyword_scores.get(c.id)) for c in only]
    if keyword is None:
        return _sorted(_dense_only(dense, best_dense, fusion), best_dense, None)
    ids = list(best_dense.keys() | keyword_scores.keys())
    if completion is not None:
        best_dense = {**completion.dense, **best_dense}
    absent = absent_bm25(keyword, completion)
    dense_side = [best_dense.get(i, 0.0) for i in ids]
    keyword_side = [keyword_scores.get(i, absent) for i in ids]
    fused = _fuse_sides(dense_side, keyword_side, fusion)
    exact = completion is not None and completion.all_keyword_matches
    return _sorted(
        dict(zip(ids, fused, strict=True)),
        best_dense,
        {i: keyword_scores.get(i, 0.0) for i in ids} if exact else keyword_scores,
    )


def _fuse_sides(dense: list[float], keyword: list[float], fusion: Fusion) -> list[float]:
    method = fusion.method
    if method is FusionMethod.RRF:
        return [
            1.0 / (fusion.rrf_k + d) + 1.0 / (fusion.rrf_k + k)
            for d, k in zip(_ranks(dense), _ranks(keyword), strict=True)
        ]
    if method is FusionMethod.LINEAR:
        top = max(keyword, default=0.0)
        scaled = [k / top for k in keyword] if top > 0 else [0.0] * len(keyword)
        return _blend(dense, scaled, fusion.alpha)
    if method is FusionMethod.MINMAX:
        return _blend(_minmax(dense), _minmax(keyword), fusion.alpha)
    return _blend(_zscore(dense), _zscore(keyword), fusion.alpha)


def _blend(dense: list[float], keyword: list[float], alpha: float) -> list[float]:
    return [alpha * d + (1.0 - alpha) * k for d, k in zip(dense, keyword, strict=True)]


def _ranks(scores: list[float]) -> list[int]:
    """1-based rank of each score, best first; ties share the better rank."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ranks = [0] * len(scores)
    previous: float | None = None
    rank = 0
    for position, i in enumerate(order, start=1):
        if scores[i] != previous:
            rank, previous = position, scores[i]
        ranks[i] = rank
    return ranks


def _minmax(scores: list[float]) -> list[float]:
    low, high = min(scores, default=0.0), max(scores, default=0.0)
    if high <= low:
        return [0.0] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def _zscore(scores: list[float]) -> list[float]:
    if not scores:
        return []
    mean = sum(scores) / len(scores)
    spread = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    if spread == 0:
        return [0.0] * len(scores)
    return [(s - mean) / spread for s in scores]


def _dense_only(
    dense: Sequence[Sequence[Candidate]], best: dict[str, float], fusion: Fusion
) -> dict[str, float]:
    """Several dense lists (the query's variations) and no keyword side."""
    if fusion.method is not FusionMethod.RRF:
        return best
    scores: dict[str, float] = {}
    for ranking in dense:
        for rank, c in enumerate(ranking, start=1):
            scores[c.id] = scores.get(c.id, 0.0) + 1.0 / (fusion.rrf_k + rank)
    return scores


def _sorted(
    scores: dict[str, float], dense: dict[str, float], keyword: dict[str, float] | None
) -> list[Fused]:
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    keyword_of = keyword.get if keyword is not None else (lambda _: None)
    return [Fused(i, score, dense.get(i), keyword_of(i)) for i, score in ranked]


def _best_dense(dense: Sequence[Sequence[Candidate]]) -> dict[str, float]:
    best: dict[str, float] = {}
    for ranking in dense:
        for c in ranking:
            if c.id not in best or c.score > best[c.id]:
                best[c.id] = c.score
    return best


def read_by_the_embedder(fusion: Fusion, query: str, scripts: frozenset[str] | None) -> Fusion:
    """`fusion` for one query: a blend's dense weight times the share of the query's letters
    written in `scripts` (the embedder's, None for any), at least `UNREAD_DENSE_SHARE` of it.
    RRF, which weighs no side, is returned as it is."""
    if fusion.method is FusionMethod.RRF:
        return fusion
    share = script_share(query, scripts)
    if share >= 1.0:
        return fusion
    return replace(fusion, alpha=fusion.alpha * max(share, UNREAD_DENSE_SHARE))


def script_share(text: str, scripts: frozenset[str] | None) -> float:
    """The share of the letters of `text` written in `scripts` (1 for None, or without letters)."""
    if scripts is None or (text.isascii() and "Latin" in scripts):
        return 1.0
    letters = _LETTER.findall(text)
    if not letters:
        return 1.0
    read = _in_scripts(scripts)
    return sum(1 for letter in letters if read.match(letter)) / len(letters)


@lru_cache(maxsize=16)
def _in_scripts(scripts: frozenset[str]) -> regex.Pattern[str]:
    if not scripts:
        return regex.compile(r"(?!)")
    return regex.compile("[" + "".join(rf"\p{{Script={s}}}" for s in sorted(scripts)) + "]")
