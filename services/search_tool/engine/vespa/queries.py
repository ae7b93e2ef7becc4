"""The request bodies a Vespa search sends to `/search/` (`en/reference/api/query.html`).

Each dense query vector is its own request with a labelled `nearestNeighbor` (`targetHits` at least
the candidates fused, filters applied as pre-filters by Vespa); the keyword side is `text()`
over the `default` fieldset (weakAnd over linguistics tokens, no query syntax, like the embedded
engine's plain words); totals come from a separate `hits: 0` request with `ranking: unranked`,
since `totalCount` is not exact with nearestNeighbor or weakAnd. Hits are fetched by offset 0 and
fused and paged by the caller, so paging is identical to the embedded engine's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from services.search_tool.engine.vespa.package import CHUNK, EMBEDDING, METADATA_MAPS
from services.search_tool.engine.vespa.yql import where
from services.search_tool.filters import FilterExpression

TEXT_PARAMETER = "quarry_text"
_SELECT = f"select chunk_id, chunk_json from {CHUNK} where "


def dense_body(
    collection: str,
    expression: FilterExpression,
    vector: npt.NDArray[np.float32],
    index: int,
    hits: int,
) -> dict[str, Any]:
    """Nearest neighbours of query vector `index`, best first; `relevance` is the closeness."""
    label = f"q{index}"
    retrieval = f'({{label:"{label}", targetHits:{hits}}}nearestNeighbor({EMBEDDING}, {label}))'
    return {
        "yql": _SELECT + where(collection, expression, retrieval),
        "hits": hits,
        "offset": 0,
        "ranking": "semantic",
        f"input.query({label})": [float(x) for x in vector],
    }


def keyword_body(
    collection: str, expression: FilterExpression, text: str, hits: int
) -> dict[str, Any]:
    """BM25 (title and text) over the words of `text`, best first."""
    retrieval = f"default contains ({{targetHits:{hits}}}text(@{TEXT_PARAMETER}))"
    return {
        "yql": _SELECT + where(collection, expression, retrieval),
        "hits": hits,
        "offset": 0,
        "ranking": "keyword",
        TEXT_PARAMETER: text,
    }


def count_body(
    collection: str, expression: FilterExpression, keyword_text: str | None = None
) -> dict[str, Any]:
    """How many chunks match the filter (and, for KEYWORD, any word of the text)."""
    retrieval = []
    body: dict[str, Any] = {"hits": 0, "ranking": "unranked"}
    if keyword_text is not None:
        # `text()` is userInput with grammar `linguistics` (weakAnd, linguistics tokens, no query
        # syntax; `en/linguistics/linguistics.html` "Overriding profile"); only the composite
        # changes to `or`, so the count matches every chunk with a word of the text and, like
        # the keyword side, never reads `-x`, `"…"` or `field:` as syntax (`grammar:"any"` would:
        # its syntax is `simple`, `en/reference/api/query.html#model.type`)
        retrieval.append(
            'default contains ({grammar.tokenization:"linguistics", grammar.syntax:"none", '
            f'grammar.composite:"or"}}text(@{TEXT_PARAMETER}))'
        )
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


def scan_body(
    collection: str, expression: FilterExpression, hits: int, offset: int = 0
) -> dict[str, Any]:
    """Whole chunks matching `expression`, unranked (reads and counts, not searches)."""
    return {
        "yql": _SELECT + where(collection, expression),
        "hits": hits,
        "offset": offset,
        "ranking": "unranked",
    }
