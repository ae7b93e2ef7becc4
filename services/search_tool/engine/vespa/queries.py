"""The request bodies a Vespa search sends to `/search/` (`en/reference/api/query.html`).

A search is at most two requests run at once, plus a count when its total is not cached:
* SEMANTIC: one request, every query vector a labelled `nearestNeighbor` (`targetHits` the
  candidates fused, filters applied as pre-filters by Vespa), OR-ed; ranked by the best
  closeness, each hit reporting its exact cosine to every query vector;
* KEYWORD: one request, `text()` over the `default` fieldset (weakAnd over linguistics tokens, no
  query syntax, like the embedded engine's plain words), ranked by `bm25(search_text)`, plus the
  count of chunks with any of its words (`count_body`);
* HYBRID: both requests at once. The dense one carries the text as rank-only terms
  (`rank(<match>, <terms>)`: they never widen what matches, they give every hit its BM25); the
  keyword one carries the query vectors (each hit's cosines come from its stored vector). So each
  candidate arrives with both sides' scores and the fusion needs no third request.
Totals come from a `hits: 0` request with `ranking: unranked` (`totalCount` is not exact with
nearestNeighbor or weakAnd), which the engine caches per filter. Hits are fetched from offset 0
and fused and paged by the caller, so paging is identical to the embedded engine's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from services.search_tool.engine.vespa.documents import HIT_FIELDS
from services.search_tool.engine.vespa.package import (
    CHUNK,
    EMBEDDING,
    KEYWORD_PROFILE,
    METADATA_MAPS,
    SEMANTIC_PROFILE,
)
from services.search_tool.engine.vespa.yql import where
from services.search_tool.filters import FilterExpression

TEXT_PARAMETER = "quarry_text"
_SELECT = f"select {', '.join(HIT_FIELDS)} from {CHUNK} where "
_ANY_WORD = (
    # `text()` is userInput with grammar `linguistics` (weakAnd, linguistics tokens, no query
    # syntax; `en/linguistics/linguistics.html` "Overriding profile"); only the composite changes
    # to `or`, so this matches (or, inside `rank`, scores) every chunk with a word of the text
    # and, like the keyword side, never reads `-x`, `"…"` or `field:` as syntax (`grammar:"any"`
    # would: its syntax is `simple`, `en/reference/api/query.html#model.type`)
    'default contains ({grammar.tokenization:"linguistics", grammar.syntax:"none", '
    f'grammar.composite:"or"}}text(@{TEXT_PARAMETER}))'
)


def dense_body(
    collection: str,
    expression: FilterExpression,
    vectors: npt.NDArray[np.float32],
    target_hits: int,
    hits: int,
    keyword_text: str | None = None,
) -> dict[str, Any]:
    """The nearest neighbours of every query vector (one labelled operator each, `target_hits`
    apiece), at most `hits` of them, best closeness first; with `keyword_text`, its words as
    rank-only terms, so each hit also reports its BM25."""
    operators = [
        f'({{label:"q{i}", targetHits:{target_hits}}}nearestNeighbor({EMBEDDING}, q{i}))'
        for i in range(len(vectors))
    ]
    retrieval = operators[0] if len(operators) == 1 else "(" + " or ".join(operators) + ")"
    matched = where(collection, expression, retrieval)
    body: dict[str, Any] = {"hits": hits, "offset": 0, "ranking": SEMANTIC_PROFILE}
    if keyword_text is not None:
        body["yql"] = _SELECT + f"rank({matched}, {_ANY_WORD})"
        body[TEXT_PARAMETER] = keyword_text
    else:
        body["yql"] = _SELECT + matched
    body.update(vector_inputs(vectors))
    return body


def keyword_body(
    collection: str,
    expression: FilterExpression,
    text: str,
    hits: int,
    vectors: npt.NDArray[np.float32] | None = None,
) -> dict[str, Any]:
    """BM25 (`search_text`) over the words of `text`, best first; with `vectors`, each hit also
    reports its cosine to each of them."""
    retrieval = f"default contains ({{targetHits:{hits}}}text(@{TEXT_PARAMETER}))"
    body: dict[str, Any] = {
        "yql": _SELECT + where(collection, expression, retrieval),
        "hits": hits,
        "offset": 0,
        "ranking": KEYWORD_PROFILE,
        TEXT_PARAMETER: text,
    }
    if vectors is not None:
        body.update(vector_inputs(vectors))
    return body


def vector_inputs(vectors: npt.NDArray[np.float32]) -> dict[str, list[float]]:
    """`input.query(q<i>)` of each query vector."""
    return {f"input.query(q{i})": [float(x) for x in v] for i, v in enumerate(vectors)}


def count_body(
    collection: str, expression: FilterExpression, keyword_text: str | None = None
) -> dict[str, Any]:
    """How many chunks match the filter (and, for KEYWORD, any word of the text)."""
    retrieval = []
    body: dict[str, Any] = {"hits": 0, "ranking": "unranked"}
    if keyword_text is not None:
        retrieval.append(_ANY_WORD)
        body[TEXT_PARAMETER] = keyword_text
    body["yql"] = f"select chunk_id from {CHUNK} where " + where(collection, expression, *retrieval)
    return body


def ids_body(
    collection: str, expression: FilterExpression, hits: int, offset: int = 0
) -> dict[str, Any]:
    """Chunk ids, document ids and fingerprints of chunks matching `expression`, unranked."""
    return {
        "yql": f"select chunk_id, document_id, content_hash from {CHUNK} where "
        + where(collection, expression),
        "hits": hits,
        "offset": offset,
        "ranking": "unranked",
    }


def describe_body(
    collection: str,
    expression: FilterExpression | None = None,
    *,
    dated: bool = False,
) -> dict[str, Any]:
    """Documents (their first chunks: every document has exactly one chunk 0) per source and per
    entity type; with `dated`, only those with a `created_at` and its range (a range never
    matches an unset value) — `en/reference/querying/grouping-language.html`. Under a filter
    (`expression`), of the matching documents only, and with the metadata keys they have
    (grouping on each typed map's keys: `group(<map>.key)`)."""
    condition = "chunk_index = 0" + (f" and created_at >= {-(2**63) + 1}L" if dated else "")
    filtered = expression is not None and not expression.is_empty
    keys = "".join(
        f" all(group({name}.key) max(1000) each(output(count())))"
        for name in METADATA_MAPS.values()
    )
    facets = (
        "all(group(source) max(1000) each(output(count())))"
        " all(group(entity_type) max(1000) each(output(count())))" + (keys if filtered else "")
    )
    grouping = "all(output(min(created_at), max(created_at)))" if dated else f"all({facets})"
    return {
        "yql": f"select chunk_id from {CHUNK} where "
        + where(collection, expression or FilterExpression(), condition)
        + f" limit 0 | {grouping}",
        "hits": 0,
        "ranking": "unranked",
    }


def chunk_counts_body(collection: str, expression: FilterExpression) -> dict[str, Any]:
    """The chunks of each document `expression` selects (`document_id in (…)`): one group per
    document, all of them (`max` the number of ids; `grouping.defaultMaxGroups` would cut)."""
    listed = sum(
        len(c.value) if isinstance(c.value, tuple) else 1
        for g in expression.groups
        for c in g.conditions
    )
    return {
        "yql": f"select chunk_id from {CHUNK} where "
        + where(collection, expression)
        + f" limit 0 | all(group(document_id) max({max(1, listed)}) each(output(count())))",
        "hits": 0,
        "ranking": "unranked",
    }


def scan_body(
    collection: str,
    expression: FilterExpression,
    hits: int,
    offset: int = 0,
    *,
    fields: tuple[str, ...] = HIT_FIELDS,
) -> dict[str, Any]:
    """`fields` of the chunks matching `expression` (whole chunks by default), unranked (reads
    and counts, not searches)."""
    return {
        "yql": f"select {', '.join(fields)} from {CHUNK} where " + where(collection, expression),
        "hits": hits,
        "offset": offset,
        "ranking": "unranked",
    }
