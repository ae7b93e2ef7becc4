"""Merging answer-quality runs asked in pieces, and pairing two merges question by question."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.answer_quality_merge import report, sign_test_p
from bench.answer_quality_questions import QUESTIONS


def _row(index: int, *, doc: bool, fact: bool, seconds: float = 10.0) -> dict[str, Any]:
    return {
        "question": QUESTIONS[index].text,
        "cited_right_document": doc,
        "contains_fact": fact,
        "searches": 1,
        "fallback": False,
        "seconds": seconds,
    }


def _file(
    tmp_path: Path, name: str, rows: list[dict[str, Any]], config: str = "local/fast"
) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"rows": {config: rows}}), encoding="utf-8")
    return path


def test_pieces_merge_into_one_figure_and_a_later_file_replaces_a_question(tmp_path: Path) -> None:
    first = _file(
        tmp_path, "a.json", [_row(0, doc=False, fact=False), _row(1, doc=True, fact=True)]
    )
    second = _file(tmp_path, "b.json", [_row(0, doc=True, fact=True, seconds=30.0)])

    out = report([first, second], "local/fast")

    assert out["summary"]["runs"] == 2
    assert out["summary"]["cited_right_document"] == 1.0
    assert out["summary"]["seconds_per_run_p50"] == 20.0
    assert out["questions_missing"] == list(range(3, len(QUESTIONS) + 1))


def test_a_merge_that_must_cover_every_question_fails_naming_the_missing_ones(
    tmp_path: Path,
) -> None:
    piece = _file(tmp_path, "a.json", [_row(i, doc=True, fact=True) for i in range(47)])

    with pytest.raises(SystemExit, match=r"no run for questions \[48\]"):
        report([piece], "local/fast", require_all=True)


def test_pairing_counts_the_questions_that_got_better_and_worse(tmp_path: Path) -> None:
    now = _file(
        tmp_path,
        "now.json",
        [
            _row(0, doc=True, fact=True),
            _row(1, doc=False, fact=True),
            _row(2, doc=True, fact=False),
        ],
    )
    before = _file(
        tmp_path,
        "before.json",
        [_row(0, doc=False, fact=True), _row(1, doc=True, fact=True), _row(3, doc=True, fact=True)],
    )

    paired = report([now], "local/fast", [before])["paired"]

    assert paired["questions"] == 2, "question 3 and 4 were asked by one side only"
    assert paired["cited_right_document"] == {
        "now": 1,
        "baseline": 1,
        "better": [1],
        "worse": [2],
        "sign_test_p": 1.0,
    }
    assert paired["contains_fact"]["better"] == []
    assert paired["contains_fact"]["worse"] == []


def test_the_sign_test_is_exact_and_two_sided() -> None:
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(0, 6) == pytest.approx(2 / 64)
    assert sign_test_p(6, 0) == pytest.approx(2 / 64)
    assert sign_test_p(4, 6) == pytest.approx(0.7539, abs=1e-4)


def test_one_mode_pairs_against_another_on_the_same_questions(tmp_path: Path) -> None:
    thinking = _file(
        tmp_path, "thinking.json", [_row(0, doc=True, fact=True)], config="local/thinking"
    )
    fast = _file(
        tmp_path, "fast.json", [_row(0, doc=False, fact=True), _row(1, doc=True, fact=True)]
    )

    out = report([thinking], "local/thinking", [fast], baseline_config="local/fast")

    assert out["baseline_config"] == "local/fast"
    assert out["paired"]["questions"] == 1
    assert out["paired"]["cited_right_document"]["better"] == [1]
