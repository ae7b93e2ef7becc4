"""Dense embedders: the `Embedder` interface and the factory that builds one from settings."""

from __future__ import annotations

import os

from services.search_tool.embedding.base import (
    Embedder,
    EmbeddingRejected,
    EmbeddingUnavailable,
    Tokenizer,
)
from services.search_tool.embedding.config import EmbeddingSettings

__all__ = [
    "Embedder",
    "EmbeddingRejected",
    "EmbeddingSettings",
    "EmbeddingUnavailable",
    "Tokenizer",
    "build_embedder",
]

OPENAI_KEY_ENV = "OPENAI_API_KEY"


def build_embedder(settings: EmbeddingSettings) -> Embedder:
    """The embedder `settings.kind` names; the OpenAI key is read from the environment only."""
    if settings.kind == "openai":
        from services.search_tool.embedding.openai import OpenAiEmbedder

        api_key = os.environ.get(OPENAI_KEY_ENV)
        if not api_key:
            raise EmbeddingRejected(
                f"embedding.kind is 'openai' but {OPENAI_KEY_ENV} is not set",
                reason="EMBEDDING_NOT_CONFIGURED",
            )
        return OpenAiEmbedder(
            api_key=api_key,
            model=settings.openai_model,
            base_url=settings.openai_base_url,
            dimensions=settings.openai_dimensions,
            timeout_s=settings.openai_timeout_s,
            batch_size=settings.openai_batch_size,
            scripts=settings.script_set(None),
        )
    from services.search_tool.embedding.minilm import SCRIPTS, MiniLmEmbedder

    return MiniLmEmbedder(
        batch_size=settings.batch_size,
        max_tokens=settings.max_tokens,
        threads=settings.threads,
        scripts=settings.script_set(SCRIPTS),
    )
