"""The LanceDB queries a search makes: dense candidates, keyword candidates, the cosines of the
candidates only the keyword side found, and the page's chunks taken by row address.

Candidate lists carry row addresses and scores; a ranking query may also read its rows' chunk and
vector (`FetchedRows`) when that is cheaper than a later take. Measured (SciFact, 12,095 chunks,
150 queries, interleaved, load ~5): the keyword side's 100 candidates with their vectors and
chunks cost 3.4 ms against 1.7 ms without, which saves HYBRID a take of the keyword-only
candidates' vectors (2.3 ms, a round of its own) and most of the page's take (1.4 ms); the dense
side's flat scan pays 1.2 ms more for its 100 candidates' chunks, on the critical path, so HYBRID
takes the page's dense-only chunks afterwards instead. SEMANTIC's `limit` rows read their chunks
in the ranking query (0.3 ms more than without, against a 1.4 ms take). Pages are identical to
taking every row afterwards (300 SciFact queries per strategy). On 100,000 chunks under a filter
(a vector index: the dense query takes 5 ms, not 9) HYBRID's keyword side reads only its
candidates' vectors, while the query is embedded: through gRPC, interleaved, 300 queries × 2,
its search took 0.95x the time of reading chunks too, 0.95x of taking the vectors afterwards."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from services.search_tool.documents import Chunk
from services.search_tool.engine.lancedb.rows import (
    CHUNK_JSON_COLUMN,
    VECTOR_COLUMN,
    stored_vectors,
    to_chunk,
)
from services.search_tool.fusion import Candidate

ALL_PARTITIONS = 1_000_000
"""An IVF probe count above any partition count: probing every partition is an exact search."""


@dataclass
class FetchedRows:
    """Columns ranking queries read beside the scores, by row address: what a search need not
    take again."""

    chunk_json: dict[int, str] = field(default_factory=dict)
    """Stored chunk (JSON) of each row read."""
    vectors: dict[int, npt.NDArray[np.float32]] = field(default_factory=dict)
    """Stored vector of each row read with its vector."""

    def keep(self, result: Any) -> None:
        """Remember the chunk and the vector, when selected, of each row of a query's result."""
        addresses = result.column("_rowid").to_pylist()
        if CHUNK_JSON_COLUMN in result.column_names:
            self.chunk_json.update(
                zip(addresses, result.column(CHUNK_JSON_COLUMN).to_pylist(), strict=True)
            )
        if VECTOR_COLUMN in result.column_names and result.num_rows:
            matrix = stored_vectors(result.column(VECTOR_COLUMN))
            self.vectors.update(zip(addresses, matrix, strict=True))


async def dense_candidates(
    table: Any,
    query_vectors: npt.NDArray[np.float32],
    where: str | None,
    limit: int,
    budget: timedelta | None,
    nprobes: tuple[int, int] | None,
    *,
    rows: FetchedRows | None = None,
) -> list[list[Candidate]]:
    """One ranked list of (row address, cosine similarity) per query vector, best first.

    `nprobes`: (minimum, maximum) IVF partitions to probe (equal: exactly that many; maximum 0:
    no upper bound); None: no vector index, a flat scan. With `rows`, the candidates' chunks are
    read too and kept there."""
    vectors = [np.asarray(v, dtype=np.float32) for v in query_vectors]
    target: Any = vectors if len(vectors) > 1 else vectors[0]
    builder = (
        table.query()
        .nearest_to(target)
        .distance_type("cosine")
        .select(["_distance", *([CHUNK_JSON_COLUMN] if rows is not None else [])])
        .with_row_id()
        .limit(limit)
    )
    if nprobes is None:
        builder = builder.bypass_vector_index()
    elif nprobes[0] == nprobes[1]:
        builder = builder.nprobes(nprobes[0])
    else:
        builder = builder.maximum_nprobes(nprobes[1]).minimum_nprobes(nprobes[0])
    if where:
        builder = builder.where(where)
    result = await builder.to_arrow(timeout=budget)
    if rows is not None:
        rows.keep(result)
    ids = [str(address) for address in result.column("_rowid").to_pylist()]
    distances = result.column("_distance").to_pylist()
    owners = (
        result.column("query_index").to_pylist()
        if "query_index" in result.column_names
        else [0] * len(ids)
    )
    lists: list[list[Candidate]] = [[] for _ in vectors]
    for chunk, distance, owner in zip(ids, distances, owners, strict=True):
        lists[int(owner or 0)].append(Candidate(chunk, 1.0 - float(distance)))
    for ranking in lists:  # ties by address, as a collection held in memory ranks them
        ranking.sort(key=_best_first)
    return [ranking for ranking in lists if ranking] if len(vectors) > 1 else lists


def plain_words(text: str) -> str:
    """The query without double quotes: a quoted phrase is a phrase query to LanceDB's FTS, which
    fails on an index without positions ("position is not found but required for phrase
    queries") — the words are searched instead, as for any other query syntax."""
    return text.replace('"', " ")


async def keyword_candidates(
    table: Any,
    text: str,
    where: str | None,
    limit: int,
    budget: timedelta | None,
    *,
    keep: int | None = None,
    rows: FetchedRows | None = None,
    chunks: bool = True,
) -> tuple[list[Candidate], int]:
    """(row address, BM25) of the best keyword matches, best first — the first `keep` of them
    (all by default) — and how many matched, up to `limit`. With `rows`, the matches' vectors
    (and, unless not `chunks`, their chunks) are read too and kept there."""
    read = [*([CHUNK_JSON_COLUMN] if chunks else []), VECTOR_COLUMN] if rows is not None else []
    columns = ["_score", *read]
    builder = (
        table.query().nearest_to_text(plain_words(text)).select(columns).with_row_id().limit(limit)
    )
    if where:
        builder = builder.where(where)
    result = await builder.to_arrow(timeout=budget)
    if rows is not None:
        rows.keep(result)
    # ties by address (LanceDB's own order among them is arbitrary), as a collection held in
    # memory ranks them: a client paging through ties sees each row once either way
    addresses = np.asarray(result.column("_rowid").to_numpy(), dtype=np.uint64)
    scores = np.asarray(result.column("_score").to_numpy(), dtype=np.float64)
    order = np.lexsort((addresses, -scores))[:keep]
    ranked = [Candidate(str(int(addresses[i])), float(scores[i])) for i in order]
    return ranked, int(result.num_rows)


def _best_first(candidate: Candidate) -> tuple[float, int]:
    return -candidate.score, int(candidate.id)


async def cosines_at(
    table: Any,
    addresses: Sequence[int],
    query_vectors: npt.NDArray[np.float32],
    budget: timedelta | None,
) -> dict[str, float]:
    """The best cosine similarity over the query vectors of the chunks at these addresses (their
    stored vectors and the query vectors are L2-normalised: a dot product)."""
    if not addresses or len(query_vectors) == 0:
        return {}
    taken = await (
        table.take_row_ids(list(addresses))
        .select([VECTOR_COLUMN])
        .with_row_id()
        .to_arrow(timeout=budget)
    )
    if taken.num_rows == 0:
        return {}
    vectors = stored_vectors(taken.column(VECTOR_COLUMN))
    return best_cosines(taken.column("_rowid").to_pylist(), vectors, query_vectors)


def best_cosines(
    addresses: Sequence[int],
    vectors: npt.NDArray[np.float32],
    query_vectors: npt.NDArray[np.float32],
) -> dict[str, float]:
    """The best cosine similarity over the query vectors of each row of `vectors` (stored and
    query vectors are L2-normalised: a dot product), by address."""
    if len(addresses) == 0 or len(query_vectors) == 0:
        return {}
    best = (vectors @ np.asarray(query_vectors, dtype=np.float32).T).max(axis=1)
    return {str(address): float(score) for address, score in zip(addresses, best, strict=True)}


async def chunks_at(
    table: Any, addresses: Sequence[int], budget: timedelta | None
) -> dict[int, Chunk]:
    """The chunks stored at these addresses (an address a write has moved finds nothing)."""
    if not addresses:
        return {}
    taken = await (
        table.take_row_ids(list(addresses))
        .select([CHUNK_JSON_COLUMN])
        .with_row_id()
        .to_arrow(timeout=budget)
    )
    rows = zip(
        taken.column("_rowid").to_pylist(), taken.column(CHUNK_JSON_COLUMN).to_pylist(), strict=True
    )
    return {address: to_chunk(chunk_json) for address, chunk_json in rows}
