"""A BM25 index of a collection's keyword texts held in memory: a keyword query is a few array
sums, not an index lookup on disk.

Terms and scores are exactly `engine/bm25.py`'s (the embedded engine's tokenizer and Lance's
BM25: k1 1.2, b 0.75, a repeated query word counts again), with the statistics of the rows the
index was built from: N and the mean length count only rows holding a term, as Lance's index
does. Rows are positions 0..rows-1 in the order of the texts given.

Each posting stores one occurrence's share of the score, `idf(t) * (k1 + 1) * f / (f + k1 *
norm(d))` in float32 (Lance scores in float32 too), so a query adds up its terms' postings times
their counts in the query (`np.bincount`). SciFact (12,095 chunks, 1.07 M postings): 8.7 MB and
~0.2 ms a query.

The index also keeps each posting's count, each row's length and a digest of each row's text, so
that after a write no text it has counted is tokenized again: `refreshed` keeps rows by position
and counts only the rows written; a whole read of the collection (after a compaction moved every
row) takes the counts of every text whose digest it knows from `KnownTexts`. Every share is then
computed with the new statistics (a write changes N, the mean length and the terms' IDF).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from services.search_tool.engine import bm25


@dataclass(frozen=True)
class Ranked:
    """The best rows of one keyword query."""

    rows: npt.NDArray[np.intp]
    """Row positions, best first (ties: the lower position first)."""
    scores: npt.NDArray[np.float64]
    """Their BM25 scores."""
    matched: int
    """Rows holding any of the query's terms (every match, not only those ranked)."""


@dataclass(frozen=True)
class KeywordIndex:
    """Postings of every term, by term (see the module docstring)."""

    rows: int
    """Rows indexed (with a term or not)."""
    terms: dict[str, int]
    """Term -> its postings' slot."""
    starts: npt.NDArray[np.int64]
    """Slot i's postings are `[starts[i], starts[i + 1])` of `positions` and `shares`."""
    positions: npt.NDArray[np.int32]
    """Row of each posting."""
    shares: npt.NDArray[np.float32]
    """One query occurrence's BM25 share of each posting."""
    counts: npt.NDArray[np.int32]
    """How often its term occurs in its row, for each posting."""
    lengths: npt.NDArray[np.int32]
    """Each row's length in terms (0: no term)."""
    digests: npt.NDArray[np.void]
    """A 128-bit digest of each row's text (`text_digests`)."""

    @classmethod
    def build(cls, texts: Sequence[str]) -> KeywordIndex:
        """The index of these keyword texts (row i is `texts[i]`)."""
        postings = Postings()
        postings.add(texts)
        return postings.index()

    @property
    def nbytes(self) -> int:
        """Memory the arrays take (the term dictionary besides: ~100 bytes a term)."""
        arrays = (self.starts, self.positions, self.shares, self.counts, self.lengths, self.digests)
        return sum(a.nbytes for a in arrays)

    def refreshed(
        self,
        kept: npt.NDArray[np.intp],
        placed: npt.NDArray[np.intp],
        added: Sequence[str],
        added_at: npt.NDArray[np.intp],
    ) -> KeywordIndex:
        """The index of a collection after a write: its rows `kept` (ascending) at the new
        positions `placed`, and the keyword texts `added` at positions `added_at`; every position
        of the new index is one of the two. Scores are those of `build` over the new rows."""
        postings = Postings(self.terms)
        postings.add(added)
        terms, slots, new_rows, counts, new_lengths, new_digests = postings.parts()
        alive = np.zeros(self.rows, dtype=bool)
        alive[kept] = True
        old = alive[self.positions]  # the postings of the rows kept
        moved = np.full(self.rows, -1, dtype=np.int32)
        moved[kept] = placed
        lengths = np.zeros(len(kept) + len(added), dtype=np.int32)
        lengths[placed] = self.lengths[kept]
        lengths[added_at] = new_lengths
        digests = np.empty(len(lengths), dtype=_DIGEST)
        digests[placed] = self.digests[kept]
        digests[added_at] = new_digests
        return _assembled(
            terms,
            np.concatenate([self.posting_slots()[old], slots]),
            np.concatenate([moved[self.positions[old]], added_at[new_rows].astype(np.int32)]),
            np.concatenate([self.counts[old], counts]),
            lengths,
            digests,
        )

    def posting_slots(self) -> npt.NDArray[np.int32]:
        """The term slot of each posting (postings are grouped by term, `starts` apart)."""
        return np.repeat(np.arange(len(self.terms), dtype=np.int32), np.diff(self.starts))

    def scores(self, text: str) -> npt.NDArray[np.float64]:
        """The BM25 score of every row for the query `text` (0: no term of the query)."""
        wanted = [
            (self.terms[term], count)
            for term, count in bm25.query_terms(text).items()
            if term in self.terms
        ]
        if not wanted:
            return np.zeros(self.rows, dtype=np.float64)
        spans = [(int(self.starts[s]), int(self.starts[s + 1]), count) for s, count in wanted]
        positions = np.concatenate([self.positions[a:b] for a, b, _ in spans])
        shares = np.concatenate(
            [self.shares[a:b] if count == 1 else self.shares[a:b] * count for a, b, count in spans]
        )
        scores: npt.NDArray[np.float64] = np.bincount(
            positions, weights=shares, minlength=self.rows
        ).astype(np.float64, copy=False)
        return scores

    def ranked(self, text: str, limit: int, within: npt.NDArray[np.intp] | None = None) -> Ranked:
        """The `limit` best rows for `text`, among the rows `within` (ascending positions) when
        given."""
        scores = self.scores(text)
        if within is not None:
            scores = scores[within]
        hits = np.flatnonzero(scores > 0)
        keep = min(limit, len(hits))
        best = hits
        if 0 < keep < len(hits):  # the lowest rows of those tied at the cut
            cut = -np.partition(-scores[hits], keep - 1)[keep - 1]
            above = hits[scores[hits] > cut]
            best = np.concatenate([above, hits[scores[hits] == cut][: keep - len(above)]])
        elif keep == 0:
            best = hits[:0]
        best = best[np.lexsort((best, -scores[best]))]
        rows = best if within is None else within[best]
        return Ranked(rows, scores[best], len(hits))


class Postings:
    """A `KeywordIndex` under construction, its texts added in batches (a collection's scan):
    what is kept between batches is arrays, not Python objects, so memory stays near the index's
    own (reading and indexing 100,000 chunks at once peaked at 1.74 GB, in batches 1.04 GB)."""

    def __init__(self, terms: dict[str, int] | None = None) -> None:
        """With `terms`, the slots of terms known already (a refresh, or a read reusing
        `KnownTexts`: new terms come after)."""
        self._words: dict[str, str] = {}
        self._terms: dict[str, int] = dict(terms or {})
        self._slots: list[npt.NDArray[np.int32]] = []
        self._rows: list[npt.NDArray[np.int32]] = []
        self._counts: list[npt.NDArray[np.int32]] = []
        self._lengths: list[npt.NDArray[np.int32]] = []
        self._digests: list[npt.NDArray[np.void]] = []
        self._added = 0
        self.tokenized = 0
        """Texts tokenized so far (the others' counts came from `KnownTexts`)."""

    def add(self, texts: Sequence[str], known: KnownTexts | None = None) -> None:
        """The next rows' keyword texts, in row order; with `known` (made from an index whose
        term slots this one started from), a text it has counted is not tokenized again."""
        digests = text_digests(texts)
        if known is None:
            hits, fresh = np.full(len(texts), -1), np.arange(len(texts))
            counted = bm25.many_term_counts(texts, self._words)
        else:
            hits = known.rows_of(digests)
            fresh = np.flatnonzero(hits < 0)
            counted = bm25.many_term_counts([texts[int(i)] for i in fresh], self._words)
        self.tokenized += len(fresh)
        slot_of = self._terms.setdefault
        terms = self._terms
        rows = fresh.astype(np.int32) + self._added
        lengths = np.zeros(len(texts), dtype=np.int32)
        lengths[fresh] = np.fromiter((c.total() for c in counted), np.int32, len(counted))
        self._slots.append(
            np.asarray([slot_of(term, len(terms)) for c in counted for term in c], np.int32)
        )
        self._counts.append(np.asarray([n for c in counted for n in c.values()], np.int32))
        self._rows.append(np.repeat(rows, [len(c) for c in counted]))  # postings per row
        if known is not None and len(fresh) < len(texts):  # the others' postings, as counted
            again = np.flatnonzero(hits >= 0)
            parts = [known.counted(int(hits[i])) for i in again]
            self._slots.append(np.concatenate([slots for slots, _, _ in parts]))
            self._counts.append(np.concatenate([counts for _, counts, _ in parts]))
            self._rows.append(
                np.repeat(again.astype(np.int32) + self._added, [len(c) for _, c, _ in parts])
            )
            lengths[again] = [length for _, _, length in parts]
        self._lengths.append(lengths)
        self._digests.append(digests)
        self._added += len(texts)

    def index(self, order: npt.NDArray[np.intp] | None = None) -> KeywordIndex:
        """The index; with `order`, row i of it is the `order[i]`-th row added. The batches'
        arrays are released as it is made (a build's peak is about twice the index's size)."""
        terms, slots, positions, counts, lengths, digests = self.parts()
        if order is not None:  # the added row at each new position -> its new position
            moved = np.empty(len(order), dtype=np.int32)
            moved[order] = np.arange(len(order), dtype=np.int32)
            positions = moved[positions]
            lengths = lengths[order]
            digests = digests[order]
        return _assembled(terms, slots, positions, counts, lengths, digests)

    def parts(
        self,
    ) -> tuple[
        dict[str, int],
        npt.NDArray[np.int32],
        npt.NDArray[np.int32],
        npt.NDArray[np.int32],
        npt.NDArray[np.int32],
        npt.NDArray[np.void],
    ]:
        """(term slots, each posting's slot, row and count, each row's length and text digest),
        in the order added; the batches' arrays are released."""
        return (
            self._terms,
            _joined(self._slots, np.int32),
            _joined(self._rows, np.int32),
            _joined(self._counts, np.int32),
            _joined(self._lengths, np.int32),
            _joined(self._digests, _DIGEST),
        )


_DIGEST = np.dtype("V16")


def text_digests(texts: Sequence[str]) -> npt.NDArray[np.void]:
    """A 128-bit BLAKE2b digest of each text: two texts with one digest have the same terms."""
    blake2b = hashlib.blake2b
    joined = b"".join(
        blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest() for text in texts
    )
    return np.frombuffer(joined, dtype=_DIGEST).copy()


class KnownTexts:
    """The term counts of every text an index holds, by the text's digest: what a whole read of
    the collection need not tokenize again (its term slots are the index's)."""

    def __init__(self, index: KeywordIndex) -> None:
        self.terms = index.terms
        by_row = np.argsort(index.positions, kind="stable")
        self._slots = index.posting_slots()[by_row]
        self._counts = index.counts[by_row]
        del by_row
        self._starts = np.zeros(index.rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(index.positions, minlength=index.rows), out=self._starts[1:])
        self._lengths = index.lengths
        self._rows = {digest.tobytes(): row for row, digest in enumerate(index.digests)}

    def rows_of(self, digests: npt.NDArray[np.void]) -> npt.NDArray[np.int64]:
        """The row holding each digest's text (-1: not known)."""
        get = self._rows.get
        return np.fromiter((get(d.tobytes(), -1) for d in digests), np.int64, len(digests))

    def counted(self, row: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], int]:
        """(term slots, their counts, length) of the text at `row`."""
        a, b = int(self._starts[row]), int(self._starts[row + 1])
        return self._slots[a:b], self._counts[a:b], int(self._lengths[row])


def _assembled(
    terms: dict[str, int],
    slot: npt.NDArray[np.int32],
    positions: npt.NDArray[np.int32],
    counts: npt.NDArray[np.int32],
    lengths: npt.NDArray[np.int32],
    digests: npt.NDArray[np.void],
) -> KeywordIndex:
    """The index of postings given as (term slot, row, count) and the rows' lengths: postings
    grouped by term, each one's share computed with the statistics of these rows."""
    by_term = np.argsort(slot, kind="stable")
    slot = slot[by_term]
    positions = positions[by_term]
    counts = counts[by_term]
    del by_term
    f = counts.astype(np.float32)
    documents = np.bincount(slot, minlength=len(terms))
    starts = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(documents, out=starts[1:])
    n = int(np.count_nonzero(lengths))  # a row without a term is not counted, as in Lance
    idf = np.log((n - documents + 0.5) / (documents + 0.5) + 1.0)
    mean = lengths.sum(dtype=np.float64) / n if n else 0.0
    if mean > 0:  # idf * (k1 + 1) * f / (f + norm), in place, in float32 as Lance's
        norm = (bm25.K1 * (1.0 - bm25.B + bm25.B * lengths / mean)).astype(np.float32)
        shares = norm[positions]
        shares += f
        np.divide(f, shares, out=shares)
        shares *= (idf * (bm25.K1 + 1.0)).astype(np.float32)[slot]
    else:  # no row has a term: no postings either
        shares = np.zeros(0, dtype=np.float32)
    return KeywordIndex(
        len(lengths), dict(terms), starts, positions, shares, counts, lengths, digests
    )


def _joined(parts: list[Any], dtype: Any) -> Any:
    """The parts as one array, the parts released."""
    joined = np.concatenate([np.zeros(0, dtype), *parts])
    parts.clear()
    return joined
