"""Query vectors kept for the queries a search tool has embedded lately.

Embedding the query is most of a search held in memory (100,000 chunks, filtered HYBRID: 7.6 ms
of an 11.6 ms service time; README "Measured performance"), and the same query text comes back:
a caller paging through results sends it again with the next offset, the agent's `search` tool
pages the same way and a model often repeats a search it has made. A query's vector depends only
on its text and the model, so the vectors of the last `entries` query texts are kept (least
recently used out) and a text seen again is not embedded again. A request's texts (the query and
its variations) that are all kept embed nothing; otherwise only the missing ones are embedded, in
one call. 384-d vectors take 1.5 KB each: the default 4,096 entries hold 6 MB.

Only search queries go through here: ingest and the `Embed` RPC embed what they are given.
Nothing is kept from a call that failed, so the next search embeds again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from services.search_tool.embedding.base import Embedder


class QueryVectors:
    """The embedder's vectors of query texts, the last `entries` texts kept (0: none)."""

    def __init__(self, embedder: Embedder, entries: int) -> None:
        self._embedder = embedder
        self._entries = entries
        self._kept: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()

    async def embed(self, texts: Sequence[str]) -> tuple[npt.NDArray[np.float32], int]:
        """(vectors of `texts`, one row each, and how many of them were kept)."""
        vectors = {text: self._kept[text] for text in texts if text in self._kept}
        kept = sum(text in vectors for text in texts)
        missing = [text for text in dict.fromkeys(texts) if text not in vectors]
        if missing:
            embedded = await self._embedder.embed(missing)
            vectors.update((text, embedded[i].copy()) for i, text in enumerate(missing))
        if self._entries:
            for text in texts:  # another search may have changed the kept texts meanwhile
                self._kept[text] = vectors[text]
                self._kept.move_to_end(text)
            while len(self._kept) > self._entries:
                self._kept.popitem(last=False)
        if not texts:
            return np.zeros((0, self._embedder.dimensions), dtype=np.float32), 0
        return np.stack([vectors[text] for text in texts]), kept

    def __len__(self) -> int:
        return len(self._kept)
