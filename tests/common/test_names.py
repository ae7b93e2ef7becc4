"""One rule per kind of name: collection names and the agent's run and question ids."""

from __future__ import annotations

import pytest

from services.common.names import agent_id_problem, collection_name_problem


@pytest.mark.parametrize("name", ["docs", "a", "scifact_2024-v1", "0" * 64])
def test_collection_names_within_the_rule_pass(name: str) -> None:
    assert collection_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "Docs", "_x", "../x", "a" * 65, "docs\n", "do cs"])
def test_collection_names_outside_the_rule_are_named_with_the_rule(name: str) -> None:
    problem = collection_name_problem(name)
    assert problem is not None
    assert "1 to 64 characters" in problem


@pytest.mark.parametrize("value", ["0123456789abcdef" * 2, "0123456789abcdef", "run-1", "R_2"])
def test_ids_the_agent_issues_and_simple_test_ids_pass(value: str) -> None:
    assert agent_id_problem(value) is None


def test_an_empty_id_must_not_be_empty() -> None:
    assert agent_id_problem("") == "must not be empty"


@pytest.mark.parametrize("value", ["x" * 129, "abc\n", "a b", "../r", "ü", "x" * 100_000])
def test_ids_outside_the_rule_are_refused_quoting_them_short(value: str) -> None:
    problem = agent_id_problem(value)
    assert problem is not None
    assert "is not an id the agent issues" in problem
    assert len(problem) < 250  # a 100 KB id is quoted as a short marked prefix
