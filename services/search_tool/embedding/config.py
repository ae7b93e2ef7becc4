"""Settings of the dense embedder (a section of the search tool's settings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class EmbeddingSettings(BaseModel):
    """Which embedder to run and how. The OpenAI key comes only from `OPENAI_API_KEY`."""

    kind: Literal["minilm", "openai"] = "minilm"
    """`minilm`: all-MiniLM-L6-v2 int8 ONNX in-process; `openai`: the embeddings API."""
    batch_size: int = Field(default=8, ge=1, le=1024)
    """Texts per MiniLM model call; small batches pad less and keep every core busy (README)."""
    max_tokens: int = Field(default=256, ge=8, le=512)
    """MiniLM truncates each text to this many word pieces (including [CLS] and [SEP])."""
    threads: int = Field(default=0, ge=0)
    """onnxruntime threads per model call; 0: one thread per call and one call per core at once."""
    query_cache_entries: int = Field(default=4096, ge=0, le=1_000_000)
    """Search query texts whose vectors are kept, the least recently searched out: a query seen
    again (the next page, a repeated search) is not embedded again (`query_vectors.py`); 0: off."""
    openai_model: str = "text-embedding-3-small"
    """OpenAI embedding model name."""
    openai_base_url: str | None = None
    """An OpenAI-compatible endpoint; None means api.openai.com."""
    openai_dimensions: int | None = Field(default=None, ge=1)
    """Ask the API for shorter vectors (text-embedding-3-*); None keeps the model's own size."""
    openai_timeout_s: float = Field(default=30.0, gt=0)
    """Per-request timeout; the SDK's own retries are off."""
    openai_batch_size: int = Field(default=256, ge=1, le=2048)
    """Texts per embeddings request."""
