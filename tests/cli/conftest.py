"""Fixtures of the tooling tests: the real embedder, for demo builds against a search tool."""

from __future__ import annotations

import pytest

from services.search_tool.embedding import Embedder, EmbeddingSettings, build_embedder


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return build_embedder(EmbeddingSettings())
