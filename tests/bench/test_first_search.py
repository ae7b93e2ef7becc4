"""`bench/first_search.py` ranks a question's page as the engine fuses it and scores the first
answering hit; its query rewrite keeps what the user asks for."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from bench.eval_scifact import Replay
from bench.first_search import (
    first_answer_rank,
    identifier_words,
    moved_toward,
    paired,
    per_question,
    question_framing_removed,
    with_title_words,
)
from services.search_tool.engine.base import Fusion, FusionMethod
from services.search_tool.engine.lancedb.search import ScoredCandidates
from services.search_tool.fusion import Candidate, Completion


@pytest.mark.parametrize(
    ("question", "rewritten"),
    [
        (
            "How do I turn a Python dict into a JSON string?",
            "turn a Python dict into a JSON string",
        ),
        (
            "What deletes a folder together with everything inside it?",
            "deletes a folder together with everything inside it",
        ),
        ("Is there a way to read a file lazily?", "read a file lazily"),
        ("how to split a path?", "split a path"),
        ("json.dumps indent", "json.dumps indent"),
        ("What?", "What?"),
    ],
)
def test_the_question_framing_is_removed_and_what_is_asked_is_kept(
    question: str, rewritten: str
) -> None:
    assert question_framing_removed(question) == rewritten


def _replay() -> Replay:
    dense = [Candidate("a", 0.9), Candidate("b", 0.8), Candidate("c", 0.1)]
    keyword = [Candidate("c", 10.0), Candidate("b", 5.0)]
    scored = ScoredCandidates(
        [dense], keyword, Completion(dense={"c": 0.1}, all_keyword_matches=True)
    )
    return Replay(scored, {"a": "doc-a", "b": "doc-b", "c": "doc-c"})


def test_the_first_answering_hit_is_ranked_as_each_side_and_the_fusion_order_the_page() -> None:
    semantic = Fusion(FusionMethod.LINEAR, alpha=1.0)
    keyword = Fusion(FusionMethod.LINEAR, alpha=0.0)
    assert first_answer_rank(_replay(), semantic, {"doc-c"}) == 3
    assert first_answer_rank(_replay(), keyword, {"doc-c"}) == 1
    assert first_answer_rank(_replay(), semantic, {"doc-z"}) is None


def test_a_question_answered_at_rank_two_counts_in_the_top_three_and_half_for_mrr() -> None:
    rows = per_question({"q1": 2, "q2": None})
    assert rows["q1"] == {"at_1": 0.0, "top_3": 1.0, "top_10": 1.0, "mrr@10": 0.5}
    assert rows["q2"] == {"at_1": 0.0, "top_3": 0.0, "top_10": 0.0, "mrr@10": 0.0}


def test_a_paired_difference_counts_the_questions_each_way() -> None:
    result = paired({"a": 1.0, "b": 0.0, "c": 1.0}, {"a": 0.0, "b": 0.0, "c": 0.0})
    assert result["mean"] == pytest.approx(2 / 3, abs=1e-4)
    assert (result["better"], result["worse"]) == (2, 0)
    assert result["ci95"][0] <= result["mean"] <= result["ci95"][1]


@pytest.mark.parametrize(
    ("title", "words"),
    [
        ("tempfile.TemporaryDirectory", "tempfile temporary directory"),
        ("copy.deepcopy", "copy deep copy"),
        ("heapq.nlargest", "heapq n largest"),
        ("json.dumps", ""),
        ("Wing flutter in a boundary layer", ""),
        ("Flutter of a slipstream", "flutter of a slip stream"),
    ],
)
def test_an_identifier_title_is_given_the_words_it_is_made_of_and_a_plain_one_nothing(
    title: str, words: str
) -> None:
    assert identifier_words(title) == words


def test_a_title_with_words_to_add_reads_title_then_words_then_body() -> None:
    assert (
        with_title_words("copy.deepcopy", "Deep copy.")
        == "copy.deepcopy (copy deep copy)\nDeep copy."
    )
    assert with_title_words("json.dumps", "Serialize.") == "json.dumps\nSerialize."
    assert with_title_words("", "Serialize.") == "Serialize."


class _Rows:
    """The part of a LanceDB async table `moved_toward` reads: a take of stored vectors."""

    def __init__(self, vectors: dict[int, list[float]]) -> None:
        self._vectors = vectors
        self.taken: list[int] = []

    def take_row_ids(self, ids: list[int]) -> _Rows:
        self.taken = ids
        return self

    def select(self, columns: list[str]) -> _Rows:
        return self

    async def to_arrow(self) -> pa.Table:
        rows = [self._vectors[i] for i in self.taken]
        return pa.table({"vector": pa.array(rows, type=pa.list_(pa.float32(), 2))})


async def test_feedback_moves_the_query_toward_the_mean_of_its_first_hits_normalised() -> None:
    table = _Rows({7: [0.0, 1.0], 9: [0.0, 1.0], 4: [1.0, 0.0]})
    query = np.array([1.0, 0.0], dtype=np.float32)
    moved = await moved_toward(table, query, [Candidate("7", 0.9), Candidate("9", 0.8)], 1.0)
    assert table.taken == [7, 9]
    assert moved == pytest.approx(np.array([1.0, 1.0]) / np.sqrt(2))
    assert await moved_toward(table, query, [], 1.0) is query
