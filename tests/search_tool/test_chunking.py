"""Token-aware chunking: sizes in model word pieces, overlap, clean boundaries, determinism."""

from __future__ import annotations

import itertools

import pytest

from services.search_tool.chunking import Chunker, TextChunk
from services.search_tool.embedding.minilm import load_tokenizer

_TOKENIZER = load_tokenizer(max_tokens=100_000)

PROSE = "\n\n".join(
    " ".join(
        f"Sentence {p}.{s} explains how the module handles item number {p * 10 + s} carefully."
        for s in range(6)
    )
    for p in range(12)
)


def _tokens(text: str) -> int:
    return len(_TOKENIZER.encode(text, add_special_tokens=False).ids)


def test_short_text_is_one_chunk_with_the_text_itself() -> None:
    assert Chunker().split("  Return the sum of two numbers.\n") == [
        TextChunk(0, "Return the sum of two numbers.")
    ]


@pytest.mark.parametrize("blank", ["", "   ", "\n\n\t"])
def test_blank_text_has_no_chunks(blank: str) -> None:
    assert Chunker().split(blank) == []


def test_long_text_chunks_fit_the_token_budget_and_are_numbered_in_order() -> None:
    chunks = Chunker(chunk_tokens=60, overlap_tokens=10).split(PROSE)
    assert len(chunks) > 5
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(0 < _tokens(c.text) <= 60 for c in chunks)
    assert all(c.text == c.text.strip() and c.text in PROSE for c in chunks)


def test_chunks_cover_the_whole_text() -> None:
    chunks = Chunker(chunk_tokens=60, overlap_tokens=10).split(PROSE)
    words = PROSE.split()
    covered: set[int] = set()
    for chunk in chunks:
        start = PROSE.index(chunk.text)
        covered.update(range(start, start + len(chunk.text)))
    assert PROSE.startswith(chunks[0].text)
    assert PROSE.endswith(chunks[-1].text)
    first_chars = {PROSE.index(w) for w in words[:5]}
    assert first_chars <= covered


def test_consecutive_chunks_overlap_by_roughly_the_configured_tokens() -> None:
    chunks = Chunker(chunk_tokens=60, overlap_tokens=15).split(PROSE)
    for previous, current in itertools.pairwise(chunks):
        head = current.text.split()[0]
        assert head in previous.text.split()[-20:], (previous.text, current.text)


def test_without_overlap_chunks_do_not_repeat_text() -> None:
    chunks = Chunker(chunk_tokens=60, overlap_tokens=0).split(PROSE)
    assert sum(len(c.text.split()) for c in chunks) == len(PROSE.split())


def test_chunks_end_at_sentence_ends_when_one_is_in_reach() -> None:
    chunks = Chunker(chunk_tokens=60, overlap_tokens=10).split(PROSE)
    assert all(c.text.endswith(".") for c in chunks)


def test_chunks_never_split_a_word_when_spaces_are_available() -> None:
    text = " ".join(f"internationalisation{i}" for i in range(200))
    chunks = Chunker(chunk_tokens=40, overlap_tokens=8).split(text)
    words = set(text.split())
    assert len(chunks) > 3
    assert all(set(c.text.split()) <= words for c in chunks)


def test_text_without_any_spaces_is_still_split_within_budget() -> None:
    text = "package/module/" * 400
    chunks = Chunker(chunk_tokens=50, overlap_tokens=10).split(text)
    assert len(chunks) > 1
    assert all(_tokens(c.text) <= 50 for c in chunks)


def test_non_ascii_text_is_sliced_at_character_offsets() -> None:
    text = " ".join(["Größenänderung für naïve Façaden — 東京 ✓."] * 80)
    chunks = Chunker(chunk_tokens=50, overlap_tokens=10).split(text)
    assert len(chunks) > 1
    assert all(c.text in text for c in chunks)
    assert chunks[0].text.startswith("Größenänderung")


def test_splitting_is_deterministic() -> None:
    first = Chunker(chunk_tokens=50, overlap_tokens=10).split(PROSE)
    assert first == Chunker(chunk_tokens=50, overlap_tokens=10).split(PROSE)


@pytest.mark.parametrize(("size", "overlap"), [(4, 0), (100, 60), (100, -1)])
def test_invalid_sizes_are_refused(size: int, overlap: int) -> None:
    with pytest.raises(ValueError, match="tokens"):
        Chunker(chunk_tokens=size, overlap_tokens=overlap)
