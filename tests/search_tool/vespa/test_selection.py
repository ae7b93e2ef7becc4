"""Document selections for deletes (`selection.py`): golden selections for the filters Vespa can
run itself, the ones left to the YQL path, and hostile values that must stay values.

The string rule under test is the grammar of `en/reference/writing/document-selector-language.html`
("Grammar - EBNF": `string = '"', { stdchars | ( '\\', ( 't' | 'n' | 'f' | 'r' | '"' ) ) |
( "\\x", hexdigit, hexdigit ) }, '"'`, stdchars = printable ASCII except `\\` and `"`); the decoder
below is written from that rule, not from the compiler."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.search_tool.engine.vespa.selection import (
    NotExpressible,
    collection_selection,
    compile_selection,
    selection_string,
)
from services.search_tool.filters import (
    FilterExpression,
    Operator,
    RawCondition,
    RawFilter,
    validate_filter,
)
from tests.search_tool.filter_cases import CASES, FilterCase
from tests.search_tool.vespa.conftest import fixture_documents, fixture_fields
from tests.search_tool.vespa.selection_reference import matches, parse

_LITERAL = re.compile(r'"((?:[\x20-\x21\x23-\x5b\x5d-\x7e]|\\[tnfr"]|\\x[0-9a-fA-F]{2})*)"')
_ESCAPES = {"t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"'}


def decode(literal: str) -> str:
    """The value a document-selection string literal holds (the grammar's rule)."""
    match = _LITERAL.fullmatch(literal)
    assert match is not None, f"not a selection string: {literal!r}"
    body, out, i = match.group(1), [], 0
    while i < len(body):
        if body[i] == "\\":
            if body[i + 1] == "x":
                out.append(chr(int(body[i + 2 : i + 4], 16)))
                i += 4
            else:
                out.append(_ESCAPES[body[i + 1]])
                i += 2
        else:
            out.append(body[i])
            i += 1
    return "".join(out)


def _expression(*conditions: RawCondition) -> FilterExpression:
    return validate_filter(RawFilter((tuple(conditions),)), fixture_fields())


GOLDEN = [
    (
        RawCondition("source", Operator.EQUALS, "confluence"),
        'chunk.collection == "fixture" and ((chunk.source == "confluence"))',
    ),
    (
        RawCondition("source", Operator.NOT_IN, ["github", "gdrive"]),
        'chunk.collection == "fixture" and (((not (chunk.source == "github" or '
        'chunk.source == "gdrive"))))',
    ),
    (
        RawCondition("id", Operator.IN, ["alpha__chunk_0"]),
        'chunk.collection == "fixture" and ((chunk.chunk_id == "alpha__chunk_0"))',
    ),
    (
        RawCondition("title", Operator.CONTAINS, "o'brien"),
        # the regex (?i)o\'brien, every character outside [A-Za-z0-9 _-.:/@] as \x##
        'chunk.collection == "fixture" and ((chunk.title =~ "\\x28\\x3fi\\x29o\\x5c\\x27brien"))',
    ),
    (
        RawCondition("chunk_index", Operator.GREATER_THAN, 0.5),
        'chunk.collection == "fixture" and '
        "(((chunk.chunk_index != null and chunk.chunk_index > 0)))",
    ),
    (
        RawCondition("created_at", Operator.LESS_THAN_OR_EQUAL, "2024-03-05T13:00:00+01:00"),
        'chunk.collection == "fixture" and '
        "(((chunk.created_at != null and chunk.created_at <= 1709640000000000)))",
    ),
    (
        RawCondition("chunk_index", Operator.NOT_EQUALS, 2.5),
        'chunk.collection == "fixture" and (((not (false))))',
    ),
    (
        RawCondition("breadcrumbs", Operator.EQUALS, "Finance"),
        'chunk.collection == "fixture" and ((chunk.breadcrumb_terms == "Finance"))',
    ),
    (
        RawCondition("breadcrumbs", Operator.CONTAINS, "people ops > onb"),
        'chunk.collection == "fixture" and '
        "((chunk.breadcrumb_path =~ "
        '"\\x28\\x3fi\\x29people\\x5c ops\\x5c \\x5c\\x3e\\x5c onb"))',
    ),
]


@pytest.mark.parametrize(("condition", "expected"), GOLDEN, ids=lambda v: str(v)[:60])
def test_filters_with_a_documented_selection_compile_to_it(
    condition: RawCondition, expected: str
) -> None:
    assert compile_selection("fixture", _expression(condition)) == expected


def test_groups_are_an_or_of_ands_under_the_collection() -> None:
    expression = validate_filter(
        RawFilter(
            (
                (
                    RawCondition("source", Operator.EQUALS, "slack"),
                    RawCondition("chunk_index", Operator.EQUALS, 0),
                ),
                (RawCondition("entity_type", Operator.EQUALS, "page"),),
            )
        ),
        fixture_fields(),
    )
    assert compile_selection("fixture", expression) == (
        'chunk.collection == "fixture" and ((chunk.source == "slack" and '
        'chunk.chunk_index == 0) or (chunk.entity_type == "page"))'
    )


def test_an_empty_filter_selects_the_whole_collection() -> None:
    assert compile_selection("c-1", FilterExpression()) == 'chunk.collection == "c-1"'
    assert collection_selection("c-1") == 'chunk.collection == "c-1"'


@pytest.mark.parametrize(
    "condition",
    [
        RawCondition("metadata.year", Operator.EQUALS, 2023),  # how a missing key compares
        RawCondition("metadata.team", Operator.CONTAINS, "fin"),
        RawCondition("source", Operator.EQUALS, ""),  # unset and "" differ from YQL
        RawCondition("title", Operator.CONTAINS, "Ærø"),  # the language is ASCII-only
        RawCondition("source", Operator.IN, ["github", "Ærø"]),
    ],
    ids=lambda c: f"{c.field} {c.operator} {c.value!r}",
)
def test_filters_without_an_equivalent_selection_are_left_to_the_yql_path(
    condition: RawCondition,
) -> None:
    assert compile_selection("fixture", _expression(condition)) is None


@pytest.mark.parametrize(
    "hostile",
    [
        '" or true or "',
        'x" or chunk.source == "y',
        "\\",
        '\\"',
        "a\nb\tc\x00d",
        "') or (true",
        "*?[]{}()",
    ],
)
def test_a_hostile_value_stays_one_string_of_exactly_that_value(hostile: str) -> None:
    selection = compile_selection(
        "fixture", _expression(RawCondition("source", Operator.EQUALS, hostile))
    )
    assert selection is not None
    prefix = 'chunk.collection == "fixture" and ((chunk.source == '
    assert selection.startswith(prefix)
    assert selection.endswith("))")
    literal = selection[len(prefix) : -2]
    assert decode(literal) == hostile


@given(st.text(alphabet=st.characters(max_codepoint=0x7F)))
def test_every_ascii_value_round_trips_through_a_selection_string(value: str) -> None:
    literal = selection_string(value)
    assert decode(literal) == value
    assert literal.count('"') == 2  # no quote inside can end the string early


@given(st.text(min_size=1).filter(lambda v: not v.isascii()))
def test_a_value_beyond_ascii_is_refused_never_mangled(value: str) -> None:
    with pytest.raises(NotExpressible):
        selection_string(value)


DOCUMENTS = fixture_documents()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_compiled_selection_deletes_exactly_what_the_filter_case_matches(
    case: FilterCase,
) -> None:
    """The shared filter table through the selection compiler and a reference evaluator of the
    documented selector semantics (`selection_reference.py`, real RE2) over the fixture as fed:
    a delete by selection removes exactly the chunks a search with that filter finds. Cases
    without a selection are the ones the YQL path deletes (metadata, "", non-ASCII)."""
    expression = _expression(RawCondition(case.field, case.operator, case.value))
    selection = compile_selection("fixture", expression)
    if selection is None:
        values = case.value if isinstance(case.value, list) else [case.value]
        texts = [v for v in values if isinstance(v, str)]
        assert case.field.startswith("metadata.") or any(not t or not t.isascii() for t in texts), (
            "only metadata, empty and non-ASCII strings are left to the YQL path"
        )
        return
    tree = parse(selection)
    found = {doc_id for doc_id, document in DOCUMENTS.items() if matches(tree, document)}
    assert found == set(case.expected)


def test_most_of_the_filter_table_deletes_by_selection() -> None:
    """The property above is not vacuous: most cases compile."""
    compiled = [
        c
        for c in CASES
        if compile_selection("fixture", _expression(RawCondition(c.field, c.operator, c.value)))
    ]
    assert len(compiled) >= len(CASES) // 2


def test_another_collections_chunks_are_never_selected() -> None:
    tree = parse(compile_selection("other", FilterExpression()) or "")
    assert not any(matches(tree, document) for document in DOCUMENTS.values())
