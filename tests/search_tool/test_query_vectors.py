"""Query vectors kept for the texts searched lately: a text seen again is not embedded again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from services.common.errors import Unavailable
from services.search_tool.embedding.query_vectors import QueryVectors

DIMENSIONS = 4


class _Counting:
    """A deterministic embedder that records every call; `fail` makes the next call raise and
    `gate` holds the calls embedding `held` until it is set."""

    model_name = "counting"
    dimensions = DIMENSIONS
    tokenizer = None

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False
        self.gate = asyncio.Event()
        self.held: str | None = None

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(list(texts))
        if self.held in texts:
            await self.gate.wait()
        if self.fail:
            self.fail = False
            raise Unavailable("embedding endpoint down")
        return np.stack([_vector(t) for t in texts])


def _vector(text: str) -> npt.NDArray[np.float32]:
    seed = sum(text.encode())
    vector = np.random.default_rng(seed).standard_normal(DIMENSIONS).astype(np.float32)
    return vector / np.linalg.norm(vector)


async def test_a_text_searched_again_is_not_embedded_again_and_gets_the_same_vector() -> None:
    embedder = _Counting()
    kept = QueryVectors(embedder, entries=8)  # type: ignore[arg-type]
    first, first_kept = await kept.embed(["event loop"])
    again, again_kept = await kept.embed(["event loop"])
    assert embedder.calls == [["event loop"]]
    assert (first_kept, again_kept) == (0, 1)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(again[0], _vector("event loop"))


async def test_only_the_texts_not_kept_are_embedded_in_one_call_and_rows_keep_their_order() -> None:
    embedder = _Counting()
    kept = QueryVectors(embedder, entries=8)  # type: ignore[arg-type]
    await kept.embed(["b"])
    vectors, found = await kept.embed(["a", "b", "c", "a"])
    assert embedder.calls == [["b"], ["a", "c"]]
    assert found == 1
    for row, text in zip(vectors, ["a", "b", "c", "a"], strict=True):
        np.testing.assert_array_equal(row, _vector(text))


async def test_the_least_recently_searched_text_is_the_one_forgotten() -> None:
    embedder = _Counting()
    kept = QueryVectors(embedder, entries=2)  # type: ignore[arg-type]
    await kept.embed(["a"])
    await kept.embed(["b"])
    await kept.embed(["a"])  # "a" is now the most recent: "b" goes first
    await kept.embed(["c"])
    assert len(kept) == 2
    embedder.calls.clear()
    await kept.embed(["a"])
    await kept.embed(["c"])
    assert embedder.calls == []
    await kept.embed(["b"])
    assert embedder.calls == [["b"]]


async def test_with_no_entries_every_search_embeds() -> None:
    embedder = _Counting()
    kept = QueryVectors(embedder, entries=0)  # type: ignore[arg-type]
    await kept.embed(["a"])
    vectors, found = await kept.embed(["a"])
    assert embedder.calls == [["a"], ["a"]]
    assert found == 0
    assert len(kept) == 0
    np.testing.assert_array_equal(vectors[0], _vector("a"))


async def test_a_failed_embedding_keeps_nothing_and_the_next_search_embeds_again() -> None:
    embedder = _Counting()
    kept = QueryVectors(embedder, entries=8)  # type: ignore[arg-type]
    embedder.fail = True
    with pytest.raises(Unavailable):
        await kept.embed(["a"])
    assert len(kept) == 0
    vectors, found = await kept.embed(["a"])
    assert found == 0
    assert embedder.calls == [["a"], ["a"]]
    np.testing.assert_array_equal(vectors[0], _vector("a"))


async def test_a_caller_changing_its_vectors_does_not_change_the_kept_ones() -> None:
    kept = QueryVectors(_Counting(), entries=8)  # type: ignore[arg-type]
    first, _ = await kept.embed(["a"])
    first[:] = 0.0
    again, _ = await kept.embed(["a"])
    np.testing.assert_array_equal(again[0], _vector("a"))


async def test_a_kept_text_forgotten_while_another_search_embeds_is_still_answered() -> None:
    embedder = _Counting()
    kept = QueryVectors(embedder, entries=1)  # type: ignore[arg-type]
    await kept.embed(["a"])
    embedder.held = "b"
    slow = asyncio.create_task(kept.embed(["a", "b"]))  # "a" kept, "b" waits for the gate
    await asyncio.sleep(0)
    await kept.embed(["c"])  # meanwhile: "c" is kept and "a" forgotten
    assert len(kept) == 1
    embedder.gate.set()
    vectors, found = await slow
    assert found == 1
    np.testing.assert_array_equal(vectors[0], _vector("a"))
    np.testing.assert_array_equal(vectors[1], _vector("b"))
    assert len(kept) == 1


async def test_no_texts_give_an_empty_matrix_of_the_models_width() -> None:
    embedder = _Counting()
    vectors, found = await QueryVectors(embedder, entries=8).embed([])  # type: ignore[arg-type]
    assert vectors.shape == (0, DIMENSIONS)
    assert found == 0
    assert embedder.calls == []
