"""Small collections held in memory per table version: a search of one reads nothing from disk.

Without a vector index (below `IndexPolicy.vector_index_min_rows`) LanceDB answers a dense query by
scanning every stored vector: on SciFact (12,095 chunks) 9–11 ms of a 17 ms HYBRID search, most of
it reading and decoding the vector column, not the 4.6 M multiply-adds. With one (IVF), it probes
a tenth of the partitions and is approximate. Its keyword query costs 2–6 ms (more to count the
matches), and taking a page's ten chunks by address another ~2 ms. Here a collection of at most
`max_rows` chunks is read once per table version into memory:

* its vectors, as one matrix: a dense query is a matrix product and a partial sort, exact;
* with `keywords` (the default), also a BM25 index of its keyword texts (`engine/keyword_index.py`:
  the embedded engine's tokenizer and Lance's formula, with the statistics of exactly the rows
  held) and its stored chunks: a KEYWORD or HYBRID search is then answered from memory whole,
  its matches counted exactly (to the engine's count cap, as LanceDB's ranking counts them).

* **Exactly one version.** An entry is the table as of one version, read while no write committed
  (the version is read before and after the scan). A search uses it only when the table is still
  at that version when the search starts, and then reads that version throughout; any write makes
  it stale: the next search goes to LanceDB and sets it aside (below).
* **Built when a collection is read, not written.** A search that finds no entry only notes the
  version; a later search that finds the same version (no write in between) starts one build in
  the background and goes to LanceDB meanwhile. A collection under a stream of writes is never
  read into memory, and one read in for t seconds is not read again for 9t (`_BUILD_SHARE`; a
  refresh, below, rests by what the last refresh took). The
  rows are read in batches, each batch's texts indexed in a worker thread (100,000 chunks: ~13 s
  of one core; searches meanwhile go to LanceDB, slower while the thread holds the GIL).
* **After a write, only what it wrote is read** (`_refreshed`). The stale entry is kept for the
  next build, which reads the table's row addresses alone, keeps the held rows whose address is
  still there, and reads only the rows at new addresses. This holds because a Lance row's address
  never points at other contents: a write appends its rows to new fragments (an upsert deletes
  the old row and appends the new one) and a compaction rewrites rows at new addresses. The BM25
  index is then made again from the kept rows' term counts and the new rows' texts, every score
  with the new statistics. When more than half the rows are new (a compaction moves them all),
  it is read whole, but a text the stale entry has counted is not tokenized again: its counts are
  found by the text's digest (`KnownTexts`), so only the texts the write changed are.
* **Filters.** The rows a filter leaves are asked of LanceDB once per (version, filter) (its
  scalar indexes make the mask; 6–8 ms at 100k) and their vectors kept as a matrix of their own,
  so a caller's filter repeated over a run costs its product only.
* **Bounded.** At most `max_rows` chunks over every collection and as many again in filtered
  matrices (the least recently searched out); a collection larger than that is never held (it
  keeps LanceDB's scan or index). A stale entry kept for its refresh counts in the bound until
  it is used or given up. 0 turns this off. A held chunk takes its vector (1.5 KB at
  384-d), its stored chunk (~0.9 KB) and its postings (~0.5 KB): 294 MB for the bench's 100,000.

Dense scores are the dot products of the L2-normalised stored and query vectors in float32 —
LanceDB's cosine, up to the last bits; keyword scores are LanceDB's BM25 up to float32 rounding
(checked against LanceDB in `tests/search_tool/test_held_collections.py` and
`test_keyword_index.py`). Ties are ordered
by row address. The product is einsum's, on one thread (1.7 ms for 12,095 × 384), not BLAS's (see
`_ranked`).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from services.search_tool.documents import Chunk
from services.search_tool.engine.keyword_index import KeywordIndex, KnownTexts, Postings
from services.search_tool.engine.lancedb.retrieval import best_cosines
from services.search_tool.engine.lancedb.rows import (
    CHUNK_JSON_COLUMN,
    SEARCH_TEXT_COLUMN,
    VECTOR_COLUMN,
    stored_vectors,
    to_chunk,
)
from services.search_tool.fusion import Candidate

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Vectors:
    """Rows of a held collection and their vectors: all of them, or those a filter leaves."""

    version: int
    addresses: npt.NDArray[np.uint64]
    """Row addresses, ascending."""
    matrix: npt.NDArray[np.float32]
    """The vector at each address, one row each."""
    rows: npt.NDArray[np.intp] | None = None
    """Their positions in the whole collection's entry (None: this is the whole collection)."""


@dataclass(frozen=True)
class Held:
    """A collection at one table version, in memory."""

    whole: _Vectors
    """Every row, by ascending address."""
    keywords: KeywordIndex | None = None
    """BM25 over the rows' keyword texts, in the same row order (None: not held)."""
    chunks: Any = None
    """The stored chunks (JSON, an Arrow chunked string array) in the order they were read."""
    read_at: npt.NDArray[np.intp] | None = None
    """Where in `chunks` each row's chunk is (rows by ascending address)."""

    @property
    def version(self) -> int:
        return self.whole.version

    def ranks(self, query_vectors: npt.NDArray[np.float32]) -> bool:
        """Whether the held vectors have the query vectors' dimensions (else LanceDB reports the
        mismatch)."""
        return bool(self.whole.matrix.shape[1] == query_vectors.shape[1])

    @property
    def nbytes(self) -> int:
        """Memory the held arrays take (vectors, postings, chunks)."""
        keywords = self.keywords.nbytes if self.keywords is not None else 0
        chunks = self.chunks.nbytes if self.chunks is not None else 0
        read_at = self.read_at.nbytes if self.read_at is not None else 0
        return self.whole.matrix.nbytes + self.whole.addresses.nbytes + keywords + chunks + read_at

    def keyword_candidates(
        self, text: str, limit: int, view: _Vectors | None = None
    ) -> tuple[list[Candidate], int]:
        """(row address, BM25) of the `limit` best keyword matches among the rows of `view`
        (every row by default), best first, and how many rows match."""
        assert self.keywords is not None
        ranked = self.keywords.ranked(text, limit, None if view is None else view.rows)
        addresses = self.whole.addresses[ranked.rows]
        return [
            Candidate(str(int(a)), float(s)) for a, s in zip(addresses, ranked.scores, strict=True)
        ], ranked.matched

    def chunks_at(self, addresses: Sequence[int]) -> dict[int, Chunk] | None:
        """The stored chunk at each address (None: not held, or one of them is not held)."""
        if self.chunks is None or self.read_at is None:
            return None
        rows = _rows_at(self.whole, np.asarray(addresses, dtype=np.uint64))
        if rows is None:
            return None
        return {
            address: to_chunk(self.chunks[int(self.read_at[row])].as_py())
            for address, row in zip(addresses, rows, strict=True)
        }


class HeldCollections:
    """Each small collection at one table version (see the module docstring)."""

    def __init__(
        self,
        max_rows: int = 100_000,
        *,
        keywords: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_rows = max_rows
        self._keywords = keywords
        self._clock = clock
        self._rested: dict[str, float] = {}
        """When each collection may be read in whole again (`_BUILD_SHARE`)."""
        self._refresh_rested: dict[str, float] = {}
        """When each collection's stale entry may be refreshed again (`_BUILD_SHARE`)."""
        self._too_large: dict[str, int] = {}
        """The version at which a collection was found larger than `max_rows`."""
        self._held: OrderedDict[str, Held] = OrderedDict()
        self._stale: OrderedDict[str, Held] = OrderedDict()
        """A held entry the table has moved on from, kept for the next build to refresh."""
        self._filtered: OrderedDict[tuple[str, int, str], _Vectors] = OrderedDict()
        """The rows of a held collection a filter leaves, by (collection, version, filter)."""
        self._seen: dict[str, int] = {}
        """The version a search last found without a current entry, per collection."""
        self._builds: dict[str, asyncio.Task[None]] = {}

    async def lookup(self, name: str, table: Any) -> Held | None:
        """What is held of `name` if the table is still at its version; otherwise None, and the
        miss is noted (the second search at one version starts a build)."""
        if self._max_rows <= 0:
            return None
        version = await table.version()
        held = self._held.get(name)
        if held is None or held.version != version:
            if held is not None:  # stale: searched no more, kept for the next build to refresh
                self._drop(name)
                self._stale[name] = held
            self._missed(name, table, version)
            return None
        self._held.move_to_end(name)
        return held

    async def view(self, name: str, table: Any, held: Held, where: str | None) -> _Vectors | None:
        """The held rows the compiled filter `where` leaves (every row without one; None: written
        meanwhile, the caller asks LanceDB)."""
        if where is None:
            return held.whole
        key = (name, held.version, where)
        known = self._filtered.get(key)
        if known is not None:
            self._filtered.move_to_end(key)
            return known
        found = await table.query().where(where).select([]).with_row_id().to_arrow()
        if await table.version() != held.version:
            return None
        under = await asyncio.to_thread(_subset, held.whole, found)
        if under is None or len(under.addresses) > self._max_rows:
            return under  # for this search only
        self._filtered[key] = under
        while len(self._filtered) > 1 and (
            sum(len(v.addresses) for v in self._filtered.values()) > self._max_rows
        ):
            self._filtered.popitem(last=False)
        return under

    async def dense(
        self,
        name: str,
        table: Any,
        held: Held,
        query_vectors: npt.NDArray[np.float32],
        limit: int,
        where: str | None = None,
    ) -> list[list[Candidate]] | None:
        """One list of (row address, cosine) per query vector, best first, among the held rows
        the compiled filter `where` leaves (None: the caller asks LanceDB)."""
        if not held.ranks(query_vectors):
            return None
        view = await self.view(name, table, held, where)
        if view is None:
            return None
        return await ranked_dense(view, query_vectors, limit)

    def forget(self, name: str) -> None:
        """Drop what is held of a collection (dropped, or its rows rewritten)."""
        self._drop(name)
        self._seen.pop(name, None)
        self._rested.pop(name, None)
        self._refresh_rested.pop(name, None)
        self._too_large.pop(name, None)
        build = self._builds.pop(name, None)
        if build is not None:
            build.cancel()

    async def close(self) -> None:
        builds = list(self._builds.values())
        for build in builds:
            build.cancel()
        await asyncio.gather(*builds, return_exceptions=True)
        self._builds.clear()
        self._held.clear()
        self._stale.clear()
        self._filtered.clear()

    async def built(self, name: str) -> None:
        """Wait for a build of `name` in flight (tests, benches)."""
        build = self._builds.get(name)
        if build is not None:
            await asyncio.gather(build, return_exceptions=True)

    def _drop(self, name: str) -> None:
        self._held.pop(name, None)
        self._stale.pop(name, None)
        for key in [k for k in self._filtered if k[0] == name]:
            del self._filtered[key]

    def _rows_held(self) -> int:
        return sum(len(h.whole.addresses) for h in (*self._held.values(), *self._stale.values()))

    def _missed(self, name: str, table: Any, version: int) -> None:
        if self._seen.get(name) != version:
            self._seen[name] = version  # read once at this version: build if read again
            return
        # a build from a stale entry is a refresh (unless too much changed): it rests by what
        # refreshes took, not by what the last whole read took (13-19 s at 100,000 chunks)
        resting = self._refresh_rested if name in self._stale else self._rested
        if name in self._builds or self._clock() < resting.get(name, 0.0):
            return
        if self._too_large.get(name) == version:
            return  # counted once at this version
        build = asyncio.create_task(self._build(name, table, version))
        self._builds[name] = build
        build.add_done_callback(lambda _: self._builds.pop(name, None))

    async def _build(self, name: str, table: Any, version: int) -> None:
        try:
            rows = await table.count_rows()
            if rows > self._max_rows:
                self._stale.pop(name, None)
                self._too_large[name] = version
                return
            started = self._clock()
            stale = self._stale.pop(name, None)
            refreshing, read_whole = stale is not None, True
            try:
                made = await _made(table, version, rows, stale, self._keywords)
                read_whole = made is None or made[2]
            except _WrittenMeanwhile:
                made, read_whole = None, False  # the stale entry is still the next refresh's
                if stale is not None:
                    self._stale.setdefault(name, stale)
            finally:  # a collection written often is read in a bounded share of the time
                took = self._clock() - started
                until = self._clock() + _BUILD_SHARE * took
                if refreshing:  # (a refresh that read whole after all rests both)
                    self._refresh_rested[name] = until
                if read_whole:
                    self._rested[name] = until
            if made is None:
                return  # written meanwhile: the scan may hold either version
        except asyncio.CancelledError:
            raise
        except Exception:  # the collection stays on LanceDB
            _log.warning("reading %r into memory failed", name, exc_info=True)
            return
        held, how, _ = made
        self._held.pop(name, None)
        for entries in (self._stale, self._held):  # set-aside entries go out first
            while entries and self._rows_held() + rows > self._max_rows:
                entries.popitem(last=False)
        self._held[name] = held
        await asyncio.to_thread(_trimmed)
        _log.info(
            "holding %r in memory: %d chunks at version %d, %.1f MB, %s in %.1f s",
            name,
            rows,
            version,
            held.nbytes / 1e6,
            how,
            took,
        )


def _trimmed() -> None:
    """Give the heap's free pages back to the system after a build (glibc's `malloc_trim`).
    A build's arrays of a few MB to 32 MB come from the heap, and glibc keeps their pages once
    freed: 100,000 chunks refreshed six times in one process left 1.08–1.16 GB resident, peak
    1.51 GB, against 1.39–1.47 / 1.70 GB untrimmed. Elsewhere than glibc, nothing to do."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


_BUILD_SHARE = 9.0
"""After reading a collection in whole for t seconds, it is not read in whole again for
`_BUILD_SHARE * t` (searches go to LanceDB meanwhile): a collection written more often than it is
read in spends at most a tenth of the time being read (100,000 chunks take ~13 s of a core).
Refreshes rest apart, by what the last refresh took (~1 s at 100,000 chunks after a small write):
resting them by a whole read's time kept a collection written every few seconds off memory for
two to three minutes after its first read (`bench/search_under_writes.py`)."""
_SCAN_BATCH = 4096
"""Rows read, and their texts indexed, at a time: memory holds arrays, not a whole column of
Python strings and counters (100,000 chunks at once: 2.9 GB at the peak)."""


async def _read(
    table: Any, version: int, rows: int, keywords: bool, known: KnownTexts | None = None
) -> tuple[Held, str] | None:
    """The entry of `table` at `version`, of `rows` rows, by ascending address, and how it was
    read (None: written meanwhile). Each batch's texts are indexed in a worker thread, the event
    loop answering in between; a text `known` holds is not tokenized again."""
    columns = _columns(keywords)
    scan = (
        await table.query().select(columns).with_row_id().to_batches(max_batch_length=_SCAN_BATCH)
    )
    addresses = np.zeros(rows, dtype=np.uint64)
    matrix: npt.NDArray[np.float32] | None = None
    chunks: list[Any] = []
    postings = (Postings(known.terms if known is not None else None)) if keywords else None
    filled = 0
    async for batch in scan:
        end = filled + batch.num_rows
        if end > rows:
            return None  # written meanwhile
        stored = batch.column(VECTOR_COLUMN)
        if matrix is None:
            matrix = np.zeros((rows, stored.type.list_size), dtype=np.float32)
        addresses[filled:end] = batch.column("_rowid").to_numpy()
        matrix[filled:end] = stored_vectors(stored)
        filled = end
        if postings is not None:
            texts = [t or "" for t in batch.column(SEARCH_TEXT_COLUMN).to_pylist()]
            await asyncio.to_thread(postings.add, texts, known)
            # copied: a column of the batch keeps every column's buffers alive (100k: 897
            # against 559 MB at the peak of a scan)
            chunks.append(pa.concat_arrays([batch.column(CHUNK_JSON_COLUMN)]))
    if filled != rows or await table.version() != version:
        return None
    if matrix is None:  # an empty table: no vector read tells the dimensions
        matrix = np.zeros((0, 0), dtype=np.float32)
    held = await asyncio.to_thread(_entry, version, addresses, matrix, chunks, postings)
    tokenized = f" ({postings.tokenized} of {rows} texts tokenized)" if postings else ""
    return held, "read" + tokenized


def _columns(keywords: bool) -> list[str]:
    """What a build reads of each row: its vector; with `keywords`, its keyword text and chunk."""
    return [VECTOR_COLUMN, *([SEARCH_TEXT_COLUMN, CHUNK_JSON_COLUMN] if keywords else [])]


async def _made(
    table: Any, version: int, rows: int, stale: Held | None, keywords: bool
) -> tuple[Held, str, bool] | None:
    """The entry of `table` at `version`, how it was made and whether it was read whole:
    refreshed from `stale` (the entry of an earlier version) when it can be, else read whole,
    tokenizing only the texts `stale` has not counted (None: written during the whole read). A
    refresh that finds the table written meanwhile raises `_WrittenMeanwhile` instead of reading
    whole: at a version already gone, the whole read would be thrown away too, after seconds
    instead of milliseconds."""
    if stale is not None:
        refreshed = await _refreshed(table, version, rows, stale)
        if refreshed is not None:
            return (*refreshed, False)
    known = None
    if stale is not None and stale.keywords is not None:
        known = await asyncio.to_thread(KnownTexts, stale.keywords)
    del stale  # not kept through a whole read
    read = await _read(table, version, rows, keywords, known)
    return None if read is None else (*read, True)


class _WrittenMeanwhile(Exception):
    """A write committed while a refresh read the table: its version is gone."""


_REFRESH_SHARE = 0.5
"""A build refreshes a stale entry when at most this share of the rows is new (else it reads the
collection whole: as cheap, and no dead terms carried over)."""


async def _refreshed(table: Any, version: int, rows: int, stale: Held) -> tuple[Held, str] | None:
    """The entry of `table` at `version` made from `stale` (an entry of an earlier version) and
    the rows at addresses it does not hold, and how it was made (how many rows were read; None:
    too much is new; `_WrittenMeanwhile`: the table moved on from `version`)."""
    if len(stale.whole.addresses) == 0:  # nothing to keep, and no vector read told the dimensions
        return None
    found = await table.query().select([]).with_row_id().to_arrow()
    addresses = np.sort(np.asarray(found.column("_rowid").to_numpy(), dtype=np.uint64))
    if await table.version() != version:
        raise _WrittenMeanwhile
    if len(addresses) != rows:
        return None
    at, kept = _found(stale.whole.addresses, addresses)
    new = np.flatnonzero(~kept)
    if len(new) > _REFRESH_SHARE * rows:
        return None
    columns = _columns(stale.keywords is not None)
    batches = []
    for start in range(0, len(new), _SCAN_BATCH):
        wanted = [int(a) for a in addresses[new[start : start + _SCAN_BATCH]]]
        batches.append(await table.take_row_ids(wanted).select(columns).with_row_id().to_arrow())
    if await table.version() != version:
        raise _WrittenMeanwhile
    held = await asyncio.to_thread(
        _refreshed_entry, version, stale, addresses, kept, at[kept], batches
    )
    return None if held is None else (held, f"refreshed ({len(new)} new rows read)")


def _refreshed_entry(
    version: int,
    stale: Held,
    addresses: npt.NDArray[np.uint64],
    kept: npt.NDArray[np.bool_],
    kept_from: npt.NDArray[np.intp],
    batches: list[Any],
) -> Held | None:
    """The entry whose rows (by ascending `addresses`) are the stale entry's rows `kept_from`
    where `kept`, and the rows read in `batches` elsewhere."""
    taken = pa.concat_tables(batches) if batches else None
    added_at = np.flatnonzero(~kept)
    matrix = np.empty((len(addresses), stale.whole.matrix.shape[1]), dtype=np.float32)
    kept_at = np.flatnonzero(kept)
    for start in range(0, len(kept_at), _SCAN_BATCH):  # copied a batch at a time: no second copy
        end = start + _SCAN_BATCH
        matrix[kept_at[start:end]] = stale.whole.matrix[kept_from[start:end]]
    order = np.zeros(0, dtype=np.intp)
    if taken is not None and taken.num_rows:
        if taken.num_rows != len(added_at):
            return None  # a row was not found where the scan saw it
        found = np.asarray(taken.column("_rowid").to_numpy(), dtype=np.uint64)
        order = np.argsort(found)
        if (found[order] != addresses[added_at]).any():
            return None
        matrix[added_at] = stored_vectors(taken.column(VECTOR_COLUMN))[order]
    whole = _Vectors(version, addresses, matrix)
    if stale.keywords is None or stale.chunks is None or stale.read_at is None:
        return Held(whole)  # only the vectors are held
    texts: list[str] = []
    chunks = stale.chunks.chunks
    if taken is not None and taken.num_rows:
        texts = [t or "" for t in taken.column(SEARCH_TEXT_COLUMN).take(order).to_pylist()]
        chunks = [*chunks, *taken.column(CHUNK_JSON_COLUMN).take(order).chunks]
    index = stale.keywords.refreshed(np.asarray(kept_from, dtype=np.intp), kept_at, texts, added_at)
    # the kept rows' chunks where the stale entry read them, then the new ones; copied into one
    # array in address order (the deleted rows' chunks are not carried over)
    read_at = np.empty(len(addresses), dtype=np.intp)
    read_at[kept] = stale.read_at[kept_from]
    read_at[added_at] = len(stale.chunks) + np.arange(len(added_at))
    stored_chunks = pa.chunked_array(chunks, type=stale.chunks.type).take(read_at)
    return Held(whole, index, stored_chunks, np.arange(len(addresses), dtype=np.intp))


def _entry(
    version: int,
    addresses: npt.NDArray[np.uint64],
    matrix: npt.NDArray[np.float32],
    chunks: list[Any],
    postings: Postings | None,
) -> Held:
    """The entry of a scan, rows by ascending address."""
    order = np.argsort(addresses, kind="stable")  # by address: rows are found by search
    whole = _Vectors(version, addresses[order], matrix[order])
    if postings is None:
        return Held(whole)
    # the chunks stay in the order read: sorting them would copy them twice more
    stored = pa.chunked_array(chunks, type=chunks[0].type if chunks else pa.string())
    return Held(whole, postings.index(order), stored, order)


async def ranked_dense(
    view: _Vectors, query_vectors: npt.NDArray[np.float32], limit: int
) -> list[list[Candidate]]:
    """One list of (row address, cosine) per query vector among the rows of `view`, best first."""
    if len(view.addresses) == 0:  # as LanceDB answers: no list per vector for variations
        return [] if len(query_vectors) > 1 else [[]]
    return await asyncio.to_thread(_ranked, view, query_vectors, limit)


def held_cosines(
    held: _Vectors, addresses: list[int], query_vectors: npt.NDArray[np.float32]
) -> dict[str, float] | None:
    """The best cosine over the query vectors of the rows at `addresses`, from the held matrix
    (None: one of them is not held)."""
    if not addresses:
        return {}
    rows = _rows_at(held, np.asarray(addresses, dtype=np.uint64))
    if rows is None:
        return None
    return best_cosines(addresses, held.matrix[rows], query_vectors)


def _subset(whole: _Vectors, found: Any) -> _Vectors | None:
    """The rows of `whole` at the addresses a filtered scan found (None: one is not held)."""
    rows = _rows_at(whole, np.asarray(found.column("_rowid").to_numpy(), dtype=np.uint64))
    if rows is None:
        return None
    rows.sort()  # ascending addresses, as every held matrix
    return _Vectors(whole.version, whole.addresses[rows], whole.matrix[rows], rows)


def _rows_at(held: _Vectors, wanted: npt.NDArray[np.uint64]) -> npt.NDArray[np.intp] | None:
    """The matrix row of each address (None: one of them is not held)."""
    rows, found = _found(held.addresses, wanted)
    return rows if found.all() else None


def _found(
    addresses: npt.NDArray[np.uint64], wanted: npt.NDArray[np.uint64]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Where each wanted address is among the ascending `addresses`, and whether it is there at
    all (where it is not, its row means nothing)."""
    if len(addresses) == 0:
        return np.zeros(len(wanted), dtype=np.intp), np.zeros(len(wanted), dtype=bool)
    rows = np.minimum(np.searchsorted(addresses, wanted), len(addresses) - 1)
    return rows, addresses[rows] == wanted


def _ranked(
    held: _Vectors, query_vectors: npt.NDArray[np.float32], limit: int
) -> list[list[Candidate]]:
    # einsum's own loops, not BLAS: a BLAS product this size fans out to every core and leaves
    # its threads spinning after it (SciFact, 300 searches: 63 against 36 ms of CPU per search)
    scores = np.einsum("ij,kj->ik", held.matrix, np.asarray(query_vectors, dtype=np.float32))
    rows = scores.shape[0]
    keep = min(limit, rows)
    lists: list[list[Candidate]] = []
    for column in scores.T:
        best = np.argpartition(-column, keep - 1)[:keep] if keep < rows else np.arange(rows)
        order = best[np.lexsort((held.addresses[best], -column[best]))]
        lists.append([Candidate(str(int(held.addresses[i])), float(column[i])) for i in order])
    return lists
