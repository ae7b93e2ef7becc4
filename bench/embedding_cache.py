"""An embedder that remembers its vectors on disk, so that an evaluation embeds SciFact once.

Benchmarks only: the vectors are keyed by model and text, kept in one `.npz` under `var/`
(gitignored), and reused by every later run and every fusion variant it compares.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from services.search_tool.embedding import Embedder, Tokenizer

_SAVE_EVERY = 2_000


class CachedEmbedder:
    """Wraps an `Embedder`; vectors it has seen come from the cache file."""

    def __init__(self, inner: Embedder, path: Path) -> None:
        self._inner = inner
        self._path = path
        self._vectors: dict[str, npt.NDArray[np.float32]] = {}
        self._unsaved = 0
        if path.exists():
            with np.load(path) as stored:
                for key, vector in zip(stored["keys"], stored["vectors"], strict=True):
                    self._vectors[str(key)] = vector

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

    @property
    def cached(self) -> int:
        """Vectors held."""
        return len(self._vectors)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        keys = [self._key(t) for t in texts]
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in self._vectors})
        if missing:
            by_key = {k: t for k, t in zip(keys, texts, strict=True)}
            fresh = await self._inner.embed([by_key[k] for k in missing])
            self._vectors.update(zip(missing, fresh, strict=True))
            self._unsaved += len(missing)
            if self._unsaved >= _SAVE_EVERY:
                self.save()
        if not keys:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return np.stack([self._vectors[k] for k in keys]).astype(np.float32)

    def save(self) -> None:
        """Write every vector to the cache file (atomically: a new file renamed over the old)."""
        if not self._vectors:
            return
        self._path.parent.mkdir(parents=True, exist_ok=True)
        keys = sorted(self._vectors)
        partial = self._path.with_name(self._path.name + ".partial.npz")
        np.savez(partial, keys=np.array(keys), vectors=np.stack([self._vectors[k] for k in keys]))
        partial.replace(self._path)
        self._unsaved = 0

    def _key(self, text: str) -> str:
        digest = hashlib.sha256(f"{self.model_name}\0{text}".encode()).hexdigest()
        return digest[:32]


class HashedEmbedder:
    """A stand-in for an embedder when only *latency* is measured: the model's own tokenizer (so
    chunks are cut exactly as ingest cuts them) and its dimensions, but each vector is a
    pseudo-random unit vector seeded by the text — no model runs, a corpus "embeds" in seconds.

    Search costs do not depend on what the vectors mean (a flat scan reads every vector; BM25
    never sees them), so the latency benches can run where embedding SciFact with MiniLM would
    take an hour (a shared, loaded machine). Quality figures need the real model."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner

    @property
    def model_name(self) -> str:
        return f"{self._inner.model_name}+hashed"

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
        rows = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            vector = np.random.default_rng(seed).standard_normal(self.dimensions)
            rows[i] = vector / np.linalg.norm(vector)
        return rows
