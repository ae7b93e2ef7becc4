"""The word-piece bound of one UpsertDocuments under the default settings: the largest requests
`bench.hostile_corpus --largest-only` times are accepted, and a little more is refused naming
the setting. Counted by the service's own ingest path, without embedding (no model work)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from quarry.searchtool.v1 import search_tool_pb2

from services.common.errors import InvalidArgument
from services.search_tool.config import SearchToolSettings
from services.search_tool.convert import document_from_proto
from services.search_tool.documents import Document
from services.search_tool.embedding import Embedder
from services.search_tool.ingest import validate_documents
from services.search_tool.service import SearchService
from tests.e2e.hostile import LARGEST_ACCEPTED, _largest_words, _words

pytestmark = pytest.mark.slow


class _NoEngine:
    """An engine with no methods at all: counting never reaches the engine (the service only
    asks which optional protocols it has)."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def _count(embedder: Embedder, documents: Sequence[Document]) -> None:
    """What `UpsertDocuments` checks before writing (InvalidArgument when over)."""
    service = SearchService(_NoEngine(), embedder, SearchToolSettings())
    ingestor = service._ingestor
    validate_documents(documents, {}, ingestor._limits)
    ingestor._chunk_all(documents)


def test_every_largest_upsert_the_bench_times_is_within_the_defaults(embedder: Embedder) -> None:
    upserts = [r for r in LARGEST_ACCEPTED if r.method == "UpsertDocuments"]
    assert len(upserts) == 4
    for largest in upserts:
        request = largest.request()
        assert isinstance(request, search_tool_pb2.UpsertDocumentsRequest)
        documents = [
            document_from_proto(d, f"documents[{i}]") for i, d in enumerate(request.documents)
        ]
        _count(embedder, documents)  # does not raise


def test_a_document_a_little_longer_than_the_largest_is_refused_naming_the_setting(
    embedder: Embedder,
) -> None:
    size = _largest_words(1)
    longer = Document(id="d", text=_words(size + 400))
    with pytest.raises(InvalidArgument) as refused:
        _count(embedder, [longer])
    assert refused.value.violations[0].field == "documents[0].text"
    assert (
        "search_tool.limits.upsert_total_word_pieces is 16384"
        in refused.value.violations[0].description
    )
