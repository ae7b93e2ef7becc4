"""Settings of the dense embedder (a section of the search tool's settings)."""

from __future__ import annotations

from typing import Literal

import regex
from pydantic import BaseModel, Field, field_validator

EVERY_SCRIPT = "any"
"""`embedding.scripts: [any]`: the model reads every script."""


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
    scripts: list[str] | None = None
    """The Unicode scripts the model was trained on (`Latin`, `Han`, `Cyrillic` ...; `[any]` for
    every one), which weigh a HYBRID query's vectors (`fusion.read_by_the_embedder`); None: the
    model's own (MiniLM `[Latin]`, OpenAI's every script). Set it for a model behind
    `openai_base_url` that reads fewer, or to turn the weighing off (`[any]`)."""

    @field_validator("scripts")
    @classmethod
    def _known_scripts(cls, scripts: list[str] | None) -> list[str] | None:
        if scripts is None or scripts == [EVERY_SCRIPT]:
            return scripts
        if not scripts:
            raise ValueError(f"name at least one script, or [{EVERY_SCRIPT}]")
        for name in scripts:
            try:
                regex.compile(rf"\p{{Script={name}}}")
            except regex.error:
                raise ValueError(
                    f"{name!r} is not a Unicode script name (e.g. Latin, Han, Cyrillic), "
                    f"nor [{EVERY_SCRIPT}]"
                ) from None
        return scripts

    def script_set(self, default: frozenset[str] | None) -> frozenset[str] | None:
        """The scripts the embedder reads: these settings', else the model's `default`."""
        if self.scripts is None:
            return default
        return None if self.scripts == [EVERY_SCRIPT] else frozenset(self.scripts)
