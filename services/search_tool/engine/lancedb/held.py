"""Collections' vectors held in memory per table version: a dense query is a product, not a scan.

Without a vector index (below `IndexPolicy.vector_index_min_rows`) LanceDB answers a dense query by
scanning every stored vector: on SciFact (12,095 chunks) 9–11 ms of a 17 ms HYBRID search, most of
it reading and decoding the vector column, not the 4.6 M multiply-adds. With one (IVF), it probes
a tenth of the partitions and is approximate. Here the vectors of a collection of at most
`max_rows` chunks are read once per table version into one matrix, and a dense query is a matrix
product and a partial sort: exact, and well under a millisecond at SciFact's size.

* **Exactly one version.** An entry is the table as of one version, read while no write committed
  (the version is read before and after the scan). A search uses it only when the table is still
  at that version; any write makes it stale, and the search goes to LanceDB as before.
* **Built when a collection is read, not written.** A search that finds no entry only notes the
  version; a later search that finds the same version (no write in between) starts one build in
  the background and goes to LanceDB meanwhile. A collection under a stream of writes is never
  read into memory.
* **Filters.** The rows a filter leaves are asked of LanceDB once per (version, filter) (its
  scalar indexes make the mask; 6–8 ms at 100k) and their vectors kept as a matrix of their own,
  so a caller's filter repeated over a run costs its product only.
* **Bounded.** At most `max_rows` vectors over every collection and as many again in filtered
  matrices (the least recently searched out); a collection larger than that is never held (it
  keeps LanceDB's scan or index). 0 turns this off.

Scores are the dot products of the L2-normalised stored and query vectors in float32 — LanceDB's
cosine, up to the last bits; ties are ordered by row address. The product is einsum's, on one
thread (1.7 ms for 12,095 × 384), not BLAS's (see `_ranked`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from services.search_tool.engine.lancedb.retrieval import best_cosines
from services.search_tool.engine.lancedb.rows import VECTOR_COLUMN
from services.search_tool.fusion import Candidate

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Vectors:
    version: int
    addresses: npt.NDArray[np.uint64]
    """Row addresses, ascending."""
    matrix: npt.NDArray[np.float32]
    """The vector at each address, one row each."""


class FlatVectors:
    """Each small collection's vectors at one table version (see the module docstring)."""

    def __init__(self, max_rows: int = 100_000) -> None:
        self._max_rows = max_rows
        self._held: OrderedDict[str, _Vectors] = OrderedDict()
        self._filtered: OrderedDict[tuple[str, int, str], _Vectors] = OrderedDict()
        """The rows of a held collection a filter leaves, by (collection, version, filter)."""
        self._seen: dict[str, int] = {}
        """The version a search last found without a current entry, per collection."""
        self._builds: dict[str, asyncio.Task[None]] = {}

    async def candidates(
        self,
        name: str,
        table: Any,
        query_vectors: npt.NDArray[np.float32],
        limit: int,
        where: str | None = None,
    ) -> list[list[Candidate]] | None:
        """One list of (row address, cosine) per query vector, best first, among the rows the
        compiled filter `where` leaves, as the table is now; None when no current entry is held
        (the caller asks LanceDB)."""
        if self._max_rows <= 0 or len(query_vectors) == 0:
            return None
        version = await table.version()
        held = self._held.get(name)
        if held is None or held.version != version:
            self._missed(name, table, version)
            return None
        if held.matrix.shape[1] != query_vectors.shape[1]:
            return None  # LanceDB reports the mismatch
        self._held.move_to_end(name)
        if where is not None:
            under = await self._under(name, table, held, where)
            if under is None:
                return None
            held = under
        if len(held.addresses) == 0:  # as LanceDB answers: no list per vector for variations
            return [] if len(query_vectors) > 1 else [[]]
        return await asyncio.to_thread(_ranked, held, query_vectors, limit)

    async def current(self, name: str, table: Any) -> _Vectors | None:
        """What is held of `name` if the table is still at its version (no side effect)."""
        held = self._held.get(name)
        if held is None or self._max_rows <= 0 or await table.version() != held.version:
            return None
        return held

    async def _under(self, name: str, table: Any, held: _Vectors, where: str) -> _Vectors | None:
        """The held rows `where` leaves (None: written meanwhile, the caller asks LanceDB)."""
        key = (name, held.version, where)
        known = self._filtered.get(key)
        if known is not None:
            self._filtered.move_to_end(key)
            return known
        found = await table.query().where(where).select([]).with_row_id().to_arrow()
        if await table.version() != held.version:
            return None
        under = await asyncio.to_thread(_subset, held, found)
        if under is None or len(under.addresses) > self._max_rows:
            return under  # for this search only
        self._filtered[key] = under
        while len(self._filtered) > 1 and (
            sum(len(v.addresses) for v in self._filtered.values()) > self._max_rows
        ):
            self._filtered.popitem(last=False)
        return under

    def forget(self, name: str) -> None:
        """Drop what is held of a collection (dropped, or its rows rewritten)."""
        self._held.pop(name, None)
        for key in [k for k in self._filtered if k[0] == name]:
            del self._filtered[key]
        self._seen.pop(name, None)
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
        self._filtered.clear()

    async def built(self, name: str) -> None:
        """Wait for a build of `name` in flight (tests, benches)."""
        build = self._builds.get(name)
        if build is not None:
            await asyncio.gather(build, return_exceptions=True)

    def _missed(self, name: str, table: Any, version: int) -> None:
        if self._seen.get(name) != version:
            self._seen[name] = version  # read once at this version: build if read again
            return
        if name in self._builds:
            return
        build = asyncio.create_task(self._build(name, table, version))
        self._builds[name] = build
        build.add_done_callback(lambda _: self._builds.pop(name, None))

    async def _build(self, name: str, table: Any, version: int) -> None:
        try:
            if await table.count_rows() > self._max_rows:
                return
            scanned = await table.query().select([VECTOR_COLUMN]).with_row_id().to_arrow()
            if await table.version() != version:
                return  # written meanwhile: the scan may hold either version
            # copying up to max_rows vectors takes tens of milliseconds: off the event loop
            addresses, matrix = await asyncio.to_thread(_arrays, scanned)
        except asyncio.CancelledError:
            raise
        except Exception:  # the collection stays on LanceDB's scan
            _log.warning("reading the vectors of %r into memory failed", name, exc_info=True)
            return
        rows = len(addresses)
        self._held.pop(name, None)
        while self._held and sum(v.matrix.shape[0] for v in self._held.values()) + rows > (
            self._max_rows
        ):
            self._held.popitem(last=False)
        self._held[name] = _Vectors(version, addresses, matrix)


def _arrays(scanned: Any) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
    """(row addresses, one row per vector) of a scan of `_rowid` and the vector column."""
    rows = scanned.num_rows
    addresses = np.asarray(scanned.column("_rowid").to_numpy(), dtype=np.uint64)
    stored = scanned.column(VECTOR_COLUMN).combine_chunks()
    if not rows:
        return addresses, np.zeros((0, stored.type.list_size), np.float32)
    matrix = stored.values.to_numpy().reshape(rows, -1)
    order = np.argsort(addresses, kind="stable")  # by address: a filter's rows are found by search
    return addresses[order], np.ascontiguousarray(matrix[order], np.float32)


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


def _subset(held: _Vectors, found: Any) -> _Vectors | None:
    """The rows of `held` at the addresses a filtered scan found (None: one is not held)."""
    rows = _rows_at(held, np.asarray(found.column("_rowid").to_numpy(), dtype=np.uint64))
    if rows is None:
        return None
    rows.sort()  # ascending addresses, as every held matrix
    return _Vectors(held.version, held.addresses[rows], held.matrix[rows])


def _rows_at(held: _Vectors, wanted: npt.NDArray[np.uint64]) -> npt.NDArray[np.intp] | None:
    """The matrix row of each address (None: one of them is not held)."""
    rows = np.searchsorted(held.addresses, wanted)
    if (rows >= len(held.addresses)).any() or (held.addresses[rows] != wanted).any():
        return None
    return rows


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
