"""Token-aware splitting of document text into overlapping chunks.

Sizes are counted in the configured embedder's own tokens (`Embedder.tokenizer`: MiniLM's word
pieces, OpenAI's cl100k BPE), so a chunk always fits the model. Chunks are slices of the original
text (by the tokenizer's character spans), cut preferably at a paragraph break, then at a sentence
end, then between words.

Each chunk also carries the text its keyword (BM25) index sees: with `context_chunks` n > 0, the
chunk's own text followed by the document's text from n chunks before it to n chunks after it.
Keyword evidence of a document is often spread over neighbouring chunks (a claim's words in the
title, the method and the result); counting the window lets a chunk match words its neighbours
hold, and counting the chunk's own text twice keeps the chunk that holds a word ahead of the
neighbours that only see it (BM25F-style weights 2 and 1). Chosen on SciFact train
(`bench/context_lab.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.search_tool.embedding import Tokenizer

_SENTENCE_ENDS = frozenset(".!?;:")


@dataclass(frozen=True)
class TextChunk:
    """One piece of a document's text."""

    index: int
    """Position of the chunk in its document, from 0."""
    text: str
    """The chunk's text, a verbatim slice of the document (stripped of outer whitespace)."""
    keyword_text: str = ""
    """What the keyword index sees of the chunk (after its title): its text, then its
    neighbourhood when the chunker has `context_chunks`; empty means `text`."""


class Chunker:
    """Splits text into chunks of at most `chunk_tokens` tokens of `tokenizer`, `overlap_tokens`
    shared; each chunk's keyword text reaches `context_chunks` chunks to either side."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        chunk_tokens: int = 200,
        overlap_tokens: int = 40,
        context_chunks: int = 0,
    ) -> None:
        if chunk_tokens < 8:
            raise ValueError("chunk_tokens must be at least 8")
        if not 0 <= overlap_tokens <= chunk_tokens // 2:
            raise ValueError("overlap_tokens must be between 0 and chunk_tokens / 2")
        if context_chunks < 0:
            raise ValueError("context_chunks must not be negative")
        self._context_chunks = context_chunks
        self._chunk_tokens = chunk_tokens
        self._overlap_tokens = overlap_tokens
        self._tokenizer = tokenizer

    def split(self, text: str) -> list[TextChunk]:
        """The chunks of `text` in order; none for blank text, one when it is short enough."""
        if not text.strip():
            return []
        offsets = self._tokenizer.spans(text)
        if len(offsets) <= self._chunk_tokens:
            spans = [(0, len(text))]
        else:
            spans = [(offsets[a][0], offsets[b - 1][1]) for a, b in self._spans(text, offsets)]
        kept = [(i, span) for i, span in enumerate(spans) if text[span[0] : span[1]].strip()]
        n = self._context_chunks
        chunks: list[TextChunk] = []
        for position, (index, (start, end)) in enumerate(kept):
            piece = text[start:end].strip()
            keyword = ""
            if n:
                first = kept[max(0, position - n)][1][0]
                last = kept[min(len(kept) - 1, position + n)][1][1]
                keyword = keyword_text(piece, text[first:last].strip())
            chunks.append(TextChunk(index, piece, keyword))
        return chunks

    def _spans(self, text: str, offsets: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Token ranges `[start, end)` of the chunks."""
        spans: list[tuple[int, int]] = []
        start, total = 0, len(offsets)
        while start < total:
            end = min(start + self._chunk_tokens, total)
            if end < total:
                end = _best_cut(text, offsets, low=start + self._chunk_tokens // 2, high=end)
            spans.append((start, end))
            if end >= total:
                break
            start = _word_start(
                offsets, max(end - self._overlap_tokens, start + 1), floor=start, limit=end
            )
        return spans


def keyword_text(chunk: str, neighbourhood: str) -> str:
    """A chunk's keyword text: its own text, then the document's text around it (which holds the
    chunk again, so the chunk's words count twice and its neighbours' once)."""
    return f"{chunk}\n{neighbourhood}"


def _best_cut(text: str, offsets: list[tuple[int, int]], *, low: int, high: int) -> int:
    """The cut in `(low, high]` with the strongest boundary before it, the latest on ties."""
    best, best_rank = high, -1
    for cut in range(high, low, -1):
        rank = _boundary_rank(text, offsets, cut)
        if rank > best_rank:
            best, best_rank = cut, rank
            if rank == 3:
                break
    return best


def _boundary_rank(text: str, offsets: list[tuple[int, int]], cut: int) -> int:
    """3 paragraph, 2 sentence end, 1 between words, 0 inside a word: cutting before `cut`."""
    previous_end = offsets[cut - 1][1]
    gap = text[previous_end : offsets[cut][0]]
    if "\n\n" in gap:
        return 3
    if gap and text[previous_end - 1] in _SENTENCE_ENDS:
        return 2
    if "\n" in gap:
        return 2
    return 1 if gap else 0


def _word_start(offsets: list[tuple[int, int]], start: int, *, floor: int, limit: int) -> int:
    """The token nearest `start` in `(floor, limit]` that begins a word, looking forward first."""
    candidates: list[int] = [*range(start, limit + 1), *range(start - 1, floor, -1)]
    for index in candidates:
        if offsets[index - 1][1] < offsets[index][0]:
            return index
    return start
