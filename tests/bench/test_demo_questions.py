"""The benches' questions over the demo collection point at documents the corpus has, and each
held-out set is its own: no question of it aims at a document an earlier set aims at."""

from __future__ import annotations

import pytest

from bench.answer_quality_questions import (
    HELD_OUT_2_QUESTIONS,
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


@pytest.mark.parametrize("name", ["tuned", "held-out", "held-out-2"])
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


def test_the_second_held_out_set_aims_at_documents_no_earlier_question_does() -> None:
    earlier = {d for q in (*QUESTIONS, *HELD_OUT_QUESTIONS) for d in q.documents}
    aimed = [q.documents[0] for q in HELD_OUT_2_QUESTIONS]
    assert not earlier.intersection(aimed)
    assert len(set(aimed)) == len(aimed) == 100
    assert len({q.text for q in HELD_OUT_2_QUESTIONS}) == 100


def test_question_sets_have_stable_keys_and_all_is_every_set() -> None:
    every = question_set("all")
    assert list(every)[:2] == ["q01", "q02"]
    assert list(every)[48:50] == ["h001", "h002"]
    assert list(every)[198:200] == ["n001", "n002"]
    assert len(every) == len(QUESTIONS) + len(HELD_OUT_QUESTIONS) + len(HELD_OUT_2_QUESTIONS)
    assert set(QUESTION_SETS) == {"tuned", "held-out", "held-out-2", "all"}
    assert {key: set_of(key) for key in ("q01", "h150", "n100")} == {
        "q01": "tuned",
        "h150": "held-out",
        "n100": "held-out-2",
    }
    with pytest.raises(ValueError, match="unknown question set"):
        question_set("train")
