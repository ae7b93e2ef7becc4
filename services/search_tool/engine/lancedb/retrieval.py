"""The LanceDB queries a search makes: dense candidates, keyword candidates, the other side's score
of the candidates one side missed, and the page's chunks taken by row address.

Both candidate lists carry row addresses and scores only: reading any other column of every
candidate costs more than the whole fusion, so the page's chunks are taken afterwards, by address.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from services.search_tool.documents import Chunk
from services.search_tool.engine.lancedb.rows import CHUNK_JSON_COLUMN, VECTOR_COLUMN, to_chunk
from services.search_tool.fusion import Candidate

ALL_PARTITIONS = 1_000_000
"""An IVF probe count above any partition count: probing every partition is an exact search."""


async def dense_candidates(
    table: Any,
    query_vectors: npt.NDArray[np.float32],
    where: str | None,
    limit: int,
    budget: timedelta | None,
    nprobes: tuple[int, int] | None,
) -> list[list[Candidate]]:
    """One ranked list of (row address, cosine similarity) per query vector, best first.

    `nprobes`: (minimum, maximum) IVF partitions to probe (equal: exactly that many; maximum 0:
    no upper bound); None: no vector index, a flat scan."""
    vectors = [np.asarray(v, dtype=np.float32) for v in query_vectors]
    target: Any = vectors if len(vectors) > 1 else vectors[0]
    builder = (
        table.query()
        .nearest_to(target)
        .distance_type("cosine")
        .select(["_distance"])
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
    for ranking in lists:
        ranking.sort(key=lambda c: -c.score)
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
) -> tuple[list[Candidate], int]:
    """(row address, BM25) of the best keyword matches, best first — the first `keep` of them
    (all by default) — and how many matched, up to `limit`."""
    builder = (
        table.query()
        .nearest_to_text(plain_words(text))
        .select(["_score"])
        .with_row_id()
        .limit(limit)
    )
    if where:
        builder = builder.where(where)
    result = await builder.to_arrow(timeout=budget)
    head = result if keep is None else result.slice(0, keep)
    ids = [str(address) for address in head.column("_rowid").to_pylist()]
    scores = head.column("_score").to_pylist()
    ranked = [Candidate(chunk, float(score)) for chunk, score in zip(ids, scores, strict=True)]
    return ranked, int(result.num_rows)


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
    stored = taken.column(VECTOR_COLUMN).combine_chunks()
    vectors = stored.values.to_numpy().reshape(taken.num_rows, -1)
    best = (vectors @ np.asarray(query_vectors, dtype=np.float32).T).max(axis=1)
    rows = taken.column("_rowid").to_pylist()
    return {str(address): float(score) for address, score in zip(rows, best, strict=True)}


async def keyword_scores_at(
    table: Any, text: str, addresses: Sequence[int], budget: timedelta | None
) -> dict[str, float]:
    """BM25 of the chunks at these addresses that contain a word of `text` (the others score 0
    and are left out); the same scores a full keyword search gives them."""
    if not addresses:
        return {}
    listed = ", ".join(str(int(a)) for a in addresses)
    builder = (
        table.query()
        .nearest_to_text(plain_words(text))
        .select(["_score"])
        .with_row_id()
        .where(f"_rowid IN ({listed})")
        .limit(len(addresses))
    )
    result = await builder.to_arrow(timeout=budget)
    rows = result.column("_rowid").to_pylist()
    scores = result.column("_score").to_pylist()
    return {str(address): float(score) for address, score in zip(rows, scores, strict=True)}


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
