"""Two eval_beir runs of one collection compare query by query: the difference, its interval,
and how many queries moved; runs over different queries are refused, not compared."""

from __future__ import annotations

import pytest

from bench.paired_runs import compared


def _run(**strategies: dict[str, float]) -> dict[str, object]:
    return {"per_query_ndcg@10": strategies}


def test_each_strategy_reports_the_paired_difference_and_the_queries_that_moved() -> None:
    before = _run(
        KEYWORD={"q1": 0.0, "q2": 0.5, "q3": 1.0}, SEMANTIC={"q1": 0.2, "q2": 0.2, "q3": 0.2}
    )
    after = _run(
        KEYWORD={"q1": 1.0, "q2": 0.5, "q3": 0.7}, SEMANTIC={"q1": 0.2, "q2": 0.2, "q3": 0.2}
    )

    result = compared(before, after)

    keyword = result["KEYWORD"]
    assert (keyword["before"], keyword["after"]) == (0.5, 0.7333)
    assert keyword["after_minus_before"]["mean"] == pytest.approx(0.2333, abs=1e-4)
    low, high = keyword["after_minus_before"]["ci95"]
    assert low <= 0.2333 <= high
    assert (keyword["better"], keyword["worse"], keyword["queries"]) == (1, 1, 3)
    assert result["SEMANTIC"]["after_minus_before"] == {"mean": 0.0, "ci95": [0.0, 0.0]}


def test_runs_over_different_queries_or_without_per_query_figures_are_refused() -> None:
    with pytest.raises(ValueError, match="different queries"):
        compared(_run(KEYWORD={"q1": 0.1}), _run(KEYWORD={"q2": 0.1}))
    with pytest.raises(ValueError, match="--per-query"):
        compared({"replayed": {}}, _run(KEYWORD={"q1": 0.1}))
