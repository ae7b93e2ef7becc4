"""An `Embedder` wrapper that records each call as an OpenTelemetry `embeddings {model}` span."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from opentelemetry import trace

from services.common import semconv
from services.search_tool.embedding import Embedder, Tokenizer

_tracer = trace.get_tracer(__name__)


class TracedEmbedder:
    """Delegates to `inner`; each `embed` is a span with the GenAI operation and model."""

    def __init__(self, inner: Embedder, tracer: trace.Tracer | None = None) -> None:
        self._inner = inner
        self._tracer = tracer or _tracer

    @property
    def model_name(self) -> str:
        return self._inner.model_name

    @property
    def dimensions(self) -> int:
        return self._inner.dimensions

    @property
    def tokenizer(self) -> Tokenizer:
        return self._inner.tokenizer

    @property
    def scripts(self) -> frozenset[str] | None:
        return self._inner.scripts

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        name = f"{semconv.EMBEDDINGS} {self._inner.model_name}"
        with self._tracer.start_as_current_span(name, kind=trace.SpanKind.INTERNAL) as span:
            span.set_attribute(semconv.GEN_AI_OPERATION_NAME, semconv.OP_EMBEDDINGS)
            span.set_attribute(semconv.GEN_AI_REQUEST_MODEL, self._inner.model_name)
            span.set_attribute("quarry.embedding.texts", len(texts))
            return await self._inner.embed(texts)
