"""The dense-embedding interface the search tool depends on, and the errors embedders raise.

Unavailable (services.common.errors)
└── EmbeddingUnavailable      transient: timeout, connection, 429, 5xx — worth retrying later
FailedPrecondition
└── EmbeddingRejected         permanent: bad credentials, unknown model, malformed request
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from services.common.errors import FailedPrecondition, Unavailable


class Tokenizer(Protocol):
    """Splits text into the tokens an embedding model sees: what the chunker counts."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character `(start, end)` of each token of `text`, in order: no special tokens, no
        truncation, whitespace trimmed off each token's ends (a token of whitespace only is
        the empty span at its end), so the text between two spans is what separates them."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised dense vectors."""

    @property
    def model_name(self) -> str:
        """Name of the model the vectors come from (stored with each collection)."""
        ...

    @property
    def dimensions(self) -> int:
        """Length of every vector."""
        ...

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's own tokenizer, which sizes chunks."""
        ...

    @property
    def scripts(self) -> frozenset[str] | None:
        """The Unicode scripts (`Latin`, `Han`, `Cyrillic` ...) of the text the model was trained
        on; None for any. A HYBRID search weighs its dense side by how much of the query is
        written in them (`fusion.read_by_the_embedder`)."""
        ...

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Shape `(len(texts), dimensions)`, rows of unit length; CPU work runs off the loop."""
        ...


class EmbeddingUnavailable(Unavailable):
    """The embedder could not answer now; the same request may succeed later."""

    default_reason = "EMBEDDING_UNAVAILABLE"


class EmbeddingRejected(FailedPrecondition):
    """The embedder refused the request for a reason retrying will not fix."""

    default_reason = "EMBEDDING_REJECTED"


def l2_normalise(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    scaled: npt.NDArray[np.float32] = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return scaled
