"""The pieces of `bench/vespa_vector_precision.py` that decide its figure: bfloat16 rounding as
Vespa converts a float (round to nearest, ties to even; 8 bits of precision kept) and a document
ranking by each document's best chunk."""

from __future__ import annotations

import numpy as np

from bench.vespa_vector_precision import answerable, rankings, to_bfloat16


def test_bfloat16_rounding_keeps_eight_bits_of_precision_and_breaks_ties_to_even() -> None:
    values = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9, -0.1], dtype=np.float32)
    rounded = to_bfloat16(values)
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even mantissa (1.0);
    # 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6
    assert rounded.tolist()[:4] == [1.0, 1.0, 1.0 + 2**-6, 1.0]
    assert abs(rounded[4] - np.float32(-0.1)) <= 2**-11
    assert (rounded.view(np.uint32) & 0xFFFF).tolist() == [0] * 5


def test_documents_rank_by_their_best_chunk_once_each() -> None:
    chunks = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.7, 0.7]], dtype=np.float32)
    documents = ["a", "a", "b", "c"]
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    assert rankings(chunks, documents, query, cosine=True) == [["a", "c", "b"]]
    assert rankings(chunks, documents, query, cosine=False) == [["a", "c", "b"]]


def test_a_partial_collection_keeps_only_queries_with_a_relevant_stored_document() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"d": 0, "e": 1}, "q4": {"a": 0}}
    assert answerable(qrels, {"a", "c", "d"}) == ["q1", "q2"]
    assert answerable(qrels, set()) == []
