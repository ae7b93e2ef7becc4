"""Fusion weights a collection measures for itself: pseudo-queries from its own documents.

A fixed `alpha` weighs a weak side as much on every collection: on one where BM25 is far weaker
than the dense side (short entity texts), a 0.7/0.3 blend lost to the dense side alone. Here each
collection calibrates its blend before it weighs:

1. **Pseudo-queries** (`pseudo_queries`): up to `queries` documents are drawn (seeded, so a
   collection calibrates the same way every time); each gives one query whose answer is known —
   its title when the title is a phrase of at least three words that the text does not simply
   repeat, else the opening words of its first sentence. The source document is the one relevant
   answer.
2. **Both sides, once**: each pseudo-query is searched as a HYBRID search is (the same candidates,
   both sides' scores of every candidate: the engine's `scored_candidates`).
3. **The weight** (`choose_alpha`): the scored candidates are fused again for every alpha of a
   grid (0 = the keyword side alone, 1 = the dense side alone) and each alpha is scored by the
   mean reciprocal rank of the source document among the first ten documents. The best alpha
   wins; ties go to the alpha nearest the configured one. The result is pulled towards the
   configured alpha by `n / (n + prior_queries)` (n pseudo-queries): a small sample moves the
   weight less.

The method of the configured fusion is kept (linear, minmax or zscore: all blends with an alpha);
RRF has no weight to calibrate and is left as configured.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from services.common.keyword_form import ENGLISH
from services.search_tool.config import FusionSettings
from services.search_tool.documents import Chunk
from services.search_tool.embedding import Embedder
from services.search_tool.engine.base import (
    CollectionStats,
    DocumentSummary,
    EngineQuery,
    Fusion,
    FusionMethod,
    Strategy,
)
from services.search_tool.filters import (
    Condition,
    FieldType,
    FilterExpression,
    FilterGroup,
    Operator,
)
from services.search_tool.fusion import fuse

ALPHA_GRID = tuple(round(step * 0.05, 2) for step in range(21))
"""Alphas tried, 0 (keyword only) to 1 (dense only)."""
QUERY_WORDS = 12
"""Longest pseudo-query taken from a first sentence, in words."""
MIN_QUERY_WORDS = 3
"""Shorter titles or sentences make no pseudo-query."""
RANKED_DOCUMENTS = 10
"""Reciprocal rank counts the source document among this many."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class PseudoQuery:
    """A query made from a document, and that document."""

    text: str
    """The query."""
    document_id: str
    """Its one relevant answer."""


@dataclass(frozen=True)
class Calibration:
    """The blend a collection chose for itself, and what it was measured on."""

    fusion: Fusion
    """What HYBRID fuses with on this collection."""
    pseudo_queries: int
    """How many pseudo-queries measured it."""
    mrr: Mapping[float, float] = field(default_factory=dict)
    """Alpha → mean reciprocal rank@10 of the source documents (0: keyword only, 1: dense)."""
    best_alpha: float = 0.0
    """The grid's best alpha before it was pulled towards the configured one."""
    chunk_count: int = 0
    """Chunks in the collection when it was calibrated (a collection that grew or shrank by
    more than `RECALIBRATE_CHANGE` calibrates again)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "method": self.fusion.method.value,
            "alpha": self.fusion.alpha,
            "rrf_k": self.fusion.rrf_k,
            "best_alpha": self.best_alpha,
            "pseudo_queries": self.pseudo_queries,
            "chunk_count": self.chunk_count,
            "mrr_keyword": self.mrr.get(0.0),
            "mrr_semantic": self.mrr.get(1.0),
            "mrr_by_alpha": {str(a): m for a, m in self.mrr.items()},
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Calibration:
        """The inverse of `as_json`; raises KeyError / ValueError on anything else."""
        fusion = Fusion(
            FusionMethod(data["method"]), rrf_k=int(data["rrf_k"]), alpha=float(data["alpha"])
        )
        if not 0.0 <= fusion.alpha <= 1.0:
            raise ValueError(f"alpha {fusion.alpha} outside [0, 1]")
        return Calibration(
            fusion=fusion,
            pseudo_queries=int(data["pseudo_queries"]),
            mrr={float(a): float(m) for a, m in data["mrr_by_alpha"].items()},
            best_alpha=float(data["best_alpha"]),
            chunk_count=int(data["chunk_count"]),
        )


def sample_ids(document_ids: Sequence[str], queries: int, *, seed: int = 0) -> list[str]:
    """Up to `queries` document ids, the same ones for the same collection every time."""
    ordered = sorted(set(document_ids))
    if len(ordered) <= queries:
        return ordered
    return sorted(random.Random(seed).sample(ordered, queries))


def pseudo_query(first_chunk: Chunk) -> PseudoQuery | None:
    """The query a document's first chunk gives (see the module's docstring), or None."""
    title = " ".join(first_chunk.title.split())
    text = " ".join(first_chunk.text.split())
    title_words = _WORD.findall(title.lower())
    if len(title_words) >= MIN_QUERY_WORDS and not _starts_with(text, title_words):
        return PseudoQuery(title, first_chunk.document_id)
    sentence = _SENTENCE_END.split(text, maxsplit=1)[0] if text else ""
    words = sentence.split()[:QUERY_WORDS]
    if len(_WORD.findall(" ".join(words))) < MIN_QUERY_WORDS:
        return None
    return PseudoQuery(" ".join(words), first_chunk.document_id)


def pseudo_queries(first_chunks: Sequence[Chunk]) -> list[PseudoQuery]:
    """One pseudo-query per document that gives one."""
    return [q for q in (pseudo_query(c) for c in first_chunks) if q is not None]


def _starts_with(text: str, words: list[str]) -> bool:
    return _WORD.findall(text.lower())[: len(words)] == words


@dataclass(frozen=True)
class Measured:
    """One pseudo-query's scored candidates (what a HYBRID search of it fuses)."""

    document_id: str
    """The pseudo-query's source document."""
    dense: Sequence[Sequence[Any]]
    """`ScoredCandidates.dense`."""
    keyword: Sequence[Any] | None
    """`ScoredCandidates.keyword`."""
    completion: Any
    """`ScoredCandidates.completion`."""
    documents: Mapping[str, str]
    """Candidate id → its document id."""


def reciprocal_rank(measured: Measured, fusion: Fusion) -> float:
    """1 / rank of the source document among the first ten documents the fusion ranks, else 0."""
    fused = fuse(measured.dense, measured.keyword, fusion, measured.completion)
    seen: set[str] = set()
    for entry in fused:
        document = measured.documents.get(entry.id)
        if document is None or document in seen:
            continue
        seen.add(document)
        if document == measured.document_id:
            return 1.0 / len(seen)
        if len(seen) >= RANKED_DOCUMENTS:
            break
    return 0.0


def choose_alpha(
    measured: Sequence[Measured],
    configured: Fusion,
    *,
    prior_queries: int,
    chunk_count: int = 0,
) -> Calibration:
    """The blend for these pseudo-queries (see the module's docstring). RRF, or no pseudo-query,
    keeps `configured`."""
    if configured.method is FusionMethod.RRF or not measured:
        return Calibration(
            configured, len(measured), best_alpha=configured.alpha, chunk_count=chunk_count
        )
    mrr = {
        alpha: round(
            sum(reciprocal_rank(m, replace(configured, alpha=alpha)) for m in measured)
            / len(measured),
            4,
        )
        for alpha in ALPHA_GRID
    }
    best = max(mrr.values())
    best_alpha = min(
        (a for a, v in mrr.items() if v == best), key=lambda a: abs(a - configured.alpha)
    )
    weight = len(measured) / (len(measured) + prior_queries)
    alpha = round(configured.alpha + (best_alpha - configured.alpha) * weight, 3)
    return Calibration(
        replace(configured, alpha=alpha),
        len(measured),
        mrr=mrr,
        best_alpha=best_alpha,
        chunk_count=chunk_count,
    )


MIN_DOCUMENTS = 50
"""A collection with fewer documents keeps the configured fusion (too few to measure)."""
RECALIBRATE_CHANGE = 0.2
"""A calibrated collection whose chunk count changed by more than this share calibrates again."""


class CalibratingEngine(Protocol):
    """What calibration needs of an engine (the embedded engine has it)."""

    async def list_documents(
        self, name: str, *, where: FilterExpression | None
    ) -> list[DocumentSummary]: ...

    async def scan(self, name: str, where: FilterExpression, *, limit: int) -> list[Chunk]: ...

    async def describe(self, name: str) -> CollectionStats: ...

    async def scored_candidates(
        self, name: str, query: EngineQuery
    ) -> tuple[Any, dict[str, Chunk]]: ...


def can_calibrate(engine: object) -> bool:
    """Whether `engine` exposes both sides' scores of its candidates (`scored_candidates`)."""
    return callable(getattr(engine, "scored_candidates", None))


async def calibrate_collection(
    engine: CalibratingEngine,
    embedder: Embedder,
    name: str,
    settings: FusionSettings,
    *,
    language: str = ENGLISH,
) -> Calibration:
    """Measure `name`'s blend on its own pseudo-queries (about one HYBRID search each; their
    keyword text stemmed in the collection's `language`, as its searches are)."""
    configured = settings.to_fusion()
    stats = await engine.describe(name)
    if configured.method is FusionMethod.RRF or stats.document_count < MIN_DOCUMENTS:
        return Calibration(
            configured, 0, best_alpha=configured.alpha, chunk_count=stats.chunk_count
        )
    listed = await engine.list_documents(name, where=None)
    chosen = sample_ids([d.id for d in listed], settings.calibration_queries)
    first_chunks = await _first_chunks(engine, name, chosen)
    queries = pseudo_queries(first_chunks)
    vectors = await embedder.embed([q.text for q in queries]) if queries else None
    measured: list[Measured] = []
    for i, query in enumerate(queries):
        assert vectors is not None
        engine_query = EngineQuery(
            Strategy.HYBRID,
            query.text,
            vectors[i : i + 1],
            limit=RANKED_DOCUMENTS,
            fusion=configured,
            keyword_language=language,
        )
        scored, chunks = await engine.scored_candidates(name, engine_query)
        measured.append(
            Measured(
                query.document_id,
                scored.dense,
                scored.keyword,
                scored.completion,
                {address: chunk.document_id for address, chunk in chunks.items()},
            )
        )
    return choose_alpha(
        measured,
        configured,
        prior_queries=settings.calibration_prior_queries,
        chunk_count=stats.chunk_count,
    )


async def _first_chunks(engine: CalibratingEngine, name: str, ids: list[str]) -> list[Chunk]:
    first: dict[str, Chunk] = {}
    for start in range(0, len(ids), _IDS_PER_SCAN):
        batch = tuple(ids[start : start + _IDS_PER_SCAN])
        where = FilterExpression(
            (FilterGroup((Condition("document_id", FieldType.STRING, Operator.IN, batch),)),)
        )
        for chunk in await engine.scan(name, where, limit=_SCAN_LIMIT):
            held = first.get(chunk.document_id)
            if held is None or chunk.chunk_index < held.chunk_index:
                first[chunk.document_id] = chunk
    return [first[i] for i in ids if i in first]


_IDS_PER_SCAN = 50
_SCAN_LIMIT = 100_000
