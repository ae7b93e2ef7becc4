"""Documents sized for the search tool's per-call limits: how much the model reads for a document,
and a document too large for one call split into parts.

The search tool refuses an `UpsertDocuments` call whose chunks would make its model read more than
`search_tool.limits.upsert_total_word_pieces` word pieces (16,384 by default), or whose texts pass
`upsert_total_bytes` (256 KiB); a single document may not pass either. So the ingest batches by
both, estimated here in MiniLM's word pieces (the default embedder's; `model_word_pieces` errs
high), and a document that alone would pass them becomes parts: `<id>#part-1`, `<id>#part-2`, ...
each a slice of its text cut at a paragraph break where one is near (else a line break, a sentence
end, a space), with the document's title, metadata (its path and content hash too) and links. The
ingest's own ids never hold `#` (`files.encode_id` writes it `:23`), so a part never meets a
document of its own. A search tool configured with lower limits refuses what does not fit; the
ingest then reports that document as failed, naming the limit.
"""

from __future__ import annotations

import math
import re
from functools import cache

from quarry.searchtool.v1 import search_tool_pb2

from services.search_tool.embedding.base import Tokenizer

REQUEST_WORD_PIECES = 14_000
"""The most the model may read for one call, by `model_word_pieces` (the search tool's default
`upsert_total_word_pieces` is 16,384: the estimate's error stays below the difference)."""
REQUEST_BYTES = 200_000
"""The most text bytes one call carries (the default `upsert_total_bytes` and
`max_document_bytes` are 262,144)."""
PART_SUFFIX = "#part-"
OVERLAP = 1.7
"""What the model reads per word piece of text at most: chunks of 100 to 200 word pieces share 40
with the next (200 / 160 = 1.25 for full chunks, 100 / 60 for the shortest)."""
SHORTEST_CHUNK = 100
"""The fewest word pieces of a chunk but the last: each chunk reads the title again."""
_PART_ID = re.compile(r"#part-[1-9][0-9]*$")


@cache
def _tokenizer() -> Tokenizer:
    from services.search_tool.embedding.minilm import WordPieceTokenizer

    return WordPieceTokenizer()


def model_word_pieces(document: search_tool_pb2.Document) -> int:
    """An upper estimate of the word pieces the search tool's model reads for `document`: its text
    with the chunks' overlaps, and the title and two markers with every chunk."""
    tokenizer = _tokenizer()
    text = len(tokenizer.spans(document.text))
    per_chunk = len(tokenizer.spans(document.title)) + 2
    return math.ceil(text * OVERLAP) + (text // SHORTEST_CHUNK + 1) * per_chunk


def whole_id(document_id: str) -> str:
    """The id of the document a part was cut from (an id that is no part: itself)."""
    return _PART_ID.sub("", document_id)


def split(document: search_tool_pb2.Document) -> list[search_tool_pb2.Document]:
    """`document` alone when one call takes it, else its parts, each one that one call takes."""
    size = len(document.text.encode())
    if size <= REQUEST_BYTES and model_word_pieces(document) <= REQUEST_WORD_PIECES:
        return [document]
    text = document.text
    offsets = _tokenizer().spans(text)
    per_chunk = len(_tokenizer().spans(document.title)) + 2
    # word pieces of text per part, so that text, overlaps and titles stay within the budget
    most = max(1, int(REQUEST_WORD_PIECES / (OVERLAP + per_chunk / SHORTEST_CHUNK)) - per_chunk)
    parts: list[str] = []
    start = 0
    while start < len(offsets):
        end = _within_bytes(text, offsets, start, min(start + most, len(offsets)))
        if end < len(offsets):
            end = _cut(text, offsets, low=start + (end - start) // 2, high=end)
        first = offsets[start][0] if start else 0
        last = offsets[end][0] if end < len(offsets) else len(text)
        if text[first:last].strip():
            parts.append(text[first:last])
        start = end
    if len(parts) == 1:  # one part of text, but within none of the limits: the server says why
        return [document]
    pieces = []
    for n, part in enumerate(parts, start=1):
        piece = search_tool_pb2.Document()
        piece.CopyFrom(document)
        piece.id = f"{document.id}{PART_SUFFIX}{n}"
        piece.text = part
        pieces.append(piece)
    return pieces


def _within_bytes(text: str, offsets: list[tuple[int, int]], start: int, end: int) -> int:
    """The largest end in `(start, end]` whose text is at most `REQUEST_BYTES` (at least one
    word piece: a word larger than that is left to the search tool to refuse)."""

    def size(stop: int) -> int:
        return len(text[offsets[start][0] : offsets[stop - 1][1]].encode())

    low, high = start + 1, end
    while low < high:
        middle = (low + high + 1) // 2
        if size(middle) <= REQUEST_BYTES:
            low = middle
        else:
            high = middle - 1
    return low


def _cut(text: str, offsets: list[tuple[int, int]], *, low: int, high: int) -> int:
    """The token in `(low, high]` to start the next part at: after a paragraph break, else a
    line break, a sentence end, a space; the latest of the strongest; `high` when none."""
    best, best_rank = high, 0
    for cut in range(high, low, -1):
        gap = text[offsets[cut - 1][1] : offsets[cut][0]]
        rank = (
            4
            if "\n\n" in gap
            else 3
            if "\n" in gap
            else 2
            if gap and text[offsets[cut - 1][1] - 1] in ".!?"
            else 1
            if gap
            else 0
        )
        if rank > best_rank:
            best, best_rank = cut, rank
            if rank == 4:
                break
    return best
