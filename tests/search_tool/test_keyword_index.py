"""The BM25 index held in memory (`engine/keyword_index.py`): the terms, scores, order and match
counts of LanceDB's own full-text index on the same texts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lancedb.index import FTS

from bench.harness import SCIFACT_DIR
from services.search_tool.engine import bm25
from services.search_tool.engine.keyword_index import KeywordIndex, KnownTexts, Postings

HOSTILE = [
    "Straße café naïve Æsir ﬁve x²y — ¼ of ½ and ¾ cups",
    "being here the cells DOES grow: does, doing, done",
    "x" * 39 + " " + "y" * 40 + " " + "é" * 20,
    "IL-10 β-cells TNF-α p53 HNF4A 14 1.4 1,400 3'UTR",
    "the of and a an to",  # stop words only: no term
    "",
    "tides tides tides rivers كتاب",
    "ＦＵＬＬ ｗｉｄｔｈ ① Ⅻ №5 µg μg ℌ ᴬ йод Ærø",
    "हिन्दी भाषा தமிழ் ไทย ⓐ e\u0301cole كِتَابٌ ۡ",
]


def _texts(count: int) -> list[str]:
    """SciFact abstracts when the shared data set is there (else made-up sentences), and the
    hostile texts above."""
    texts: list[str] = []
    corpus = SCIFACT_DIR / "corpus.jsonl"
    if corpus.exists():
        with corpus.open(encoding="utf-8") as lines:
            for line in lines:
                row = json.loads(line)
                texts.append(f"{row['title']}\n{row['text']}")
                if len(texts) == count:
                    break
    rng = np.random.default_rng(7)
    words = ["cell", "growth", "tumor", "vitamin", "bone", "density", "aspirin", "risk", "cancer"]
    while len(texts) < count:
        texts.append(" ".join(rng.choice(words, size=int(rng.integers(3, 40)))))
    return texts + HOSTILE


QUERIES = [
    "cell growth",
    "vitamin D and bone density in the elderly",
    "IL-10 β-cells",
    "aspirin aspirin cancer risk",
    "the of and",
    "¼ cups",
    "HNF4A mutations can cause diabetes in mutant carriers by the age of 14 years",
    '"tumor suppressor" p53',
    "Straße naive",
    "µg of йод in भाषा",
    "كِتَابٌ ۡ",
    "zzzz-not-a-word",
]


@pytest.fixture
async def lance_table(tmp_path: Path) -> tuple[object, list[str]]:
    """The texts in a LanceDB table with the product's full-text index, all rows indexed."""
    texts = _texts(800)
    db = await lancedb.connect_async(str(tmp_path))
    table = await db.create_table(
        "t", pa.table({"row": list(range(len(texts))), "search_text": texts})
    )
    await table.create_index("search_text", config=FTS(with_position=False))
    return table, texts


async def _lance_ranking(table: object, text: str) -> list[tuple[int, float]]:
    found = await (
        table.query()  # type: ignore[attr-defined]
        .nearest_to_text(text.replace('"', " "))
        .select(["row", "_score"])
        .limit(100_000)
        .to_arrow()
    )
    return list(
        zip(found.column("row").to_pylist(), found.column("_score").to_pylist(), strict=True)
    )


async def test_scores_order_and_match_counts_equal_lancedbs_full_text_index(
    lance_table: tuple[object, list[str]],
) -> None:
    table, texts = lance_table
    index = KeywordIndex.build(texts)
    for text in QUERIES + texts[:40]:
        theirs = await _lance_ranking(table, text)
        ranked = index.ranked(text, len(texts))
        assert ranked.matched == len(theirs), text
        ours = dict(zip(ranked.rows.tolist(), ranked.scores.tolist(), strict=True))
        assert set(ours) == {row for row, _ in theirs}, text
        for row, score in theirs:  # float32 in Lance
            assert ours[row] == pytest.approx(score, rel=2e-6), (text, row)
        # the same order, up to rows tied in float32
        assert ranked.scores.tolist() == pytest.approx([s for _, s in theirs], rel=2e-6), text


async def test_a_limit_keeps_the_best_rows_and_the_lowest_rows_among_ties() -> None:
    index = KeywordIndex.build(["tides"] * 5 + ["tides tides", "rivers"])
    ranked = index.ranked("tides", 3)
    assert ranked.rows.tolist() == [5, 0, 1]  # the two-occurrence row, then ties by position
    assert ranked.matched == 6
    within = index.ranked("tides", 2, np.asarray([1, 3, 4, 6]))
    assert within.rows.tolist() == [1, 3]
    assert within.matched == 3


def test_a_query_without_a_known_term_matches_nothing() -> None:
    index = KeywordIndex.build(["tides and rivers", "lakes"])
    for text in ("", "the of and", "oceans"):
        ranked = index.ranked(text, 10)
        assert ranked.matched == 0
        assert ranked.rows.tolist() == []
    empty = KeywordIndex.build([])
    assert empty.ranked("tides", 10).matched == 0


def test_scores_are_the_reference_formula_with_the_rows_statistics() -> None:
    texts = _texts(60)
    index = KeywordIndex.build(texts)
    counts = [bm25.term_counts(t) for t in texts]
    documents = Counter(term for c in counts for term in c.counts)
    with_terms = sum(1 for c in counts if c.length)  # Lance counts only rows with a term
    assert with_terms < len(texts)
    avgdl = sum(c.length for c in counts) / with_terms
    for text in QUERIES:
        weights = bm25.weights(bm25.query_terms(text), documents, with_terms)
        expected = [bm25.score(c.counts, c.length, weights, avgdl) for c in counts]
        assert index.scores(text) == pytest.approx(expected, rel=1e-6), text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=60), min_size=1, max_size=5))
def test_counting_a_collections_terms_at_once_equals_tokenizing_each_text(
    texts: list[str],
) -> None:
    texts = texts + [t.upper() for t in texts] + ["Straße ¼ İstanbul ǅ"]
    assert bm25.many_term_counts(texts) == [Counter(bm25.tokens(t)) for t in texts]


def test_the_arrays_are_what_memory_holds() -> None:
    index = KeywordIndex.build(["tides and rivers", "rivers"])
    arrays = (
        index.starts,
        index.positions,
        index.shares,
        index.counts,
        index.lengths,
        index.digests,
    )
    assert index.nbytes == sum(a.nbytes for a in arrays)
    assert index.nbytes > 0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(range(len(HOSTILE) + 12)), min_size=1, max_size=30),
    st.lists(st.booleans(), min_size=30, max_size=30),
    st.lists(st.sampled_from(range(len(HOSTILE) + 12)), max_size=10),
    st.randoms(use_true_random=False),
)
def test_an_index_refreshed_after_a_write_scores_as_one_built_afresh(
    before: list[int], kept_flags: list[bool], added: list[int], rng: Any
) -> None:
    """Rows deleted, rows added, the new rows placed anywhere: the refreshed index gives every
    query exactly the scores, order and match counts of an index built over the new rows."""
    pool = _texts(12)
    old_texts = [pool[i] for i in before]
    kept = np.flatnonzero(np.asarray(kept_flags[: len(before)]))
    added_texts = [pool[i] for i in added]
    rows = len(kept) + len(added_texts)
    slots = list(range(rows))
    rng.shuffle(slots)
    placed = np.sort(np.asarray(slots[: len(kept)], dtype=np.intp))  # kept rows keep their order
    added_at = np.asarray(slots[len(kept) :], dtype=np.intp)
    new_texts = [""] * rows
    for row, at in zip(kept, placed, strict=True):
        new_texts[at] = old_texts[row]
    for text, at in zip(added_texts, added_at, strict=True):
        new_texts[at] = text
    refreshed = KeywordIndex.build(old_texts).refreshed(kept, placed, added_texts, added_at)
    afresh = KeywordIndex.build(new_texts)
    assert refreshed.rows == afresh.rows == rows
    assert refreshed.lengths.tolist() == afresh.lengths.tolist()
    for query in QUERIES:
        assert refreshed.scores(query).tolist() == afresh.scores(query).tolist(), query
        mine, theirs = refreshed.ranked(query, 5), afresh.ranked(query, 5)
        assert mine.rows.tolist() == theirs.rows.tolist()
        assert mine.matched == theirs.matched


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from(range(len(HOSTILE) + 12)), min_size=1, max_size=25),
    st.lists(st.sampled_from(range(len(HOSTILE) + 12)), min_size=1, max_size=25),
    st.integers(min_value=1, max_value=8),
)
def test_texts_an_index_has_counted_are_not_tokenized_again_and_score_as_afresh(
    before: list[int], after: list[int], batch: int
) -> None:
    """A whole read after every row moved (a compaction): the texts the old index holds take
    their counts from it, only the others are tokenized, and the index is the one built afresh."""
    pool = _texts(12)
    known = KnownTexts(KeywordIndex.build([pool[i] for i in before]))
    texts = [pool[i] for i in after]
    postings = Postings(known.terms)
    for start in range(0, len(texts), batch):
        postings.add(texts[start : start + batch], known)
    reused = postings.index()
    afresh = KeywordIndex.build(texts)
    assert postings.tokenized == sum(i not in before for i in after)
    assert reused.lengths.tolist() == afresh.lengths.tolist()
    assert reused.digests.tolist() == afresh.digests.tolist()
    for query in QUERIES:
        assert reused.scores(query).tolist() == afresh.scores(query).tolist(), query
        assert reused.ranked(query, 5).rows.tolist() == afresh.ranked(query, 5).rows.tolist()
