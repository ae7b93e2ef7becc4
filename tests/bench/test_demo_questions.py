"""The benches' questions over the demo collection point at documents the corpus has, and the
held-out set is its own: no question of it aims at a document the first set aims at."""

from __future__ import annotations

import pytest

from bench.answer_quality_questions import (
    HELD_OUT_QUESTIONS,
    QUESTION_SETS,
    QUESTIONS,
    question_set,
    set_of,
)
from quarry_cli.demo.corpus import Document, build_corpus


@pytest.fixture(scope="module")
def documents() -> dict[str, Document]:
    return {d.id: d for d in build_corpus()}


def _stated(fact: str, text: str) -> bool:
    """The fact, or the attribute it names (`string.punctuation` → `punctuation`), is in it."""
    fact = fact.lower()
    return fact in text or ("." in fact and fact.rsplit(".", 1)[1] in text)


@pytest.mark.parametrize("name", ["tuned", "held-out"])
def test_every_answering_document_is_in_the_demo_corpus_and_states_a_fact(
    name: str, documents: dict[str, Document]
) -> None:
    for key, question in question_set(name).items():
        assert question.documents, key
        assert question.facts, key
        missing = [d for d in question.documents if d not in documents]
        assert not missing, (key, missing)
        texts = [f"{documents[d].title}\n{documents[d].text}".lower() for d in question.documents]
        assert any(_stated(f, t) for f in question.facts for t in texts), (key, question.facts)


def test_the_held_out_questions_aim_at_documents_the_first_set_does_not() -> None:
    first = {d for q in QUESTIONS for d in q.documents}
    aimed = [q.documents[0] for q in HELD_OUT_QUESTIONS]
    assert not first.intersection(aimed)
    assert len({q.text for q in HELD_OUT_QUESTIONS}) == len(HELD_OUT_QUESTIONS) == 150


def test_question_sets_have_stable_keys_and_all_is_both() -> None:
    both = question_set("all")
    assert list(both)[:2] == ["q01", "q02"]
    assert list(both)[48:50] == ["h001", "h002"]
    assert len(both) == len(QUESTIONS) + len(HELD_OUT_QUESTIONS)
    assert set(QUESTION_SETS) == {"tuned", "held-out", "all"}
    assert {key: set_of(key) for key in ("q01", "h150")} == {"q01": "tuned", "h150": "held-out"}
    with pytest.raises(ValueError, match="unknown question set"):
        question_set("train")
