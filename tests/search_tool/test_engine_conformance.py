"""One behaviour suite for every engine that is available: the shared filter table, upserts,
deletes and GetCollection. LanceDB always runs; PostgreSQL always runs, live, against the
embedded PostgreSQL (`tests/postgres_server.py`; under CI a skip fails); Vespa runs when
`QUARRY_VESPA_URL` points at a Vespa serving `services/search_tool/vespa/app` rendered for the
test vectors (`scripts/gen_vespa_app.py --dimensions 8`) and is skipped otherwise — skipped,
never passed."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from services.common.postgres import PostgresSettings
from services.search_tool.engine.base import CollectionSpec, EngineQuery, SearchEngine, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.postgres import PostgresEngine
from services.search_tool.engine.vespa import Endpoint, VespaEngine
from services.search_tool.filters import Operator, RawCondition, RawFilter, validate_filter
from tests.search_tool.engine_fixtures import DIMENSIONS, record, records, vector_for
from tests.search_tool.filter_cases import CASES, FIXTURE, FilterCase

SPEC = CollectionSpec("test-model", DIMENSIONS)
VESPA_URL = os.environ.get("QUARRY_VESPA_URL", "")


@pytest.fixture(
    params=[
        "lancedb",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param(
            "vespa",
            marks=pytest.mark.skipif(
                not VESPA_URL,
                reason="Vespa conformance: SKIPPED (QUARRY_VESPA_URL unset; no Vespa can run on "
                "this machine — see services/search_tool/README.md, 'Vespa')",
            ),
        ),
    ]
)
async def engine(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[SearchEngine, str]]:
    """(an engine holding FIXTURE in a fresh collection, that collection's name)."""
    name = f"conf-{uuid.uuid4().hex[:12]}"
    opened: SearchEngine
    if request.param == "vespa":
        opened = await VespaEngine.open(Endpoint(VESPA_URL, query_timeout_s=10.0))
    elif request.param == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        opened = await PostgresEngine.open(PostgresSettings(), dsn=dsn)
    else:
        opened = await LanceDBEngine.open(tmp_path / "db")
    await opened.ensure_collection(name, SPEC)
    await opened.upsert(name, records(FIXTURE))
    yield opened, name
    await opened.drop_collection(name)
    await opened.close()


async def _ids(engine: SearchEngine, name: str, *conditions: RawCondition) -> set[str]:
    raw = RawFilter((tuple(conditions),) if conditions else ())
    expression = validate_filter(raw, await engine.fields(name))
    query = EngineQuery(Strategy.SEMANTIC, "", np.stack([vector_for("probe")]), expression, 200)
    return {hit.chunk.document_id for hit in (await engine.search(name, query)).hits}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_filter_case_matches_the_expected_documents_on_every_engine(
    engine: tuple[SearchEngine, str], case: FilterCase
) -> None:
    opened, name = engine
    found = await _ids(opened, name, RawCondition(case.field, case.operator, case.value))
    assert found == set(case.expected)


async def test_upsert_replaces_by_chunk_id_and_deletes_remove_by_id_and_filter(
    engine: tuple[SearchEngine, str],
) -> None:
    opened, name = engine
    await opened.upsert(name, [record(FIXTURE[0], text="rewritten")])
    hits = await _ids(opened, name, RawCondition("text", Operator.CONTAINS, "rewritten"))
    assert hits == {"alpha"}
    assert await opened.delete_chunks(name, ["alpha__chunk_0", "nope__chunk_0"]) == 1
    where = validate_filter(
        RawFilter(((RawCondition("source", Operator.EQUALS, "github"),),)),
        await opened.fields(name),
    )
    assert await opened.delete_matching(name, document_ids=["beta"], where=where) == 2
    assert await _ids(opened, name) == {"delta", "epsilon"}


async def test_describe_counts_documents_per_source_and_the_date_range(
    engine: tuple[SearchEngine, str],
) -> None:
    opened, name = engine
    stats = await opened.describe(name)
    assert stats.document_count == len(FIXTURE)
    assert stats.chunk_count == len(FIXTURE)
    assert dict(stats.sources) == {"confluence": 2, "github": 1, "gdrive": 1, "slack": 1}
    assert stats.earliest_created_at == FIXTURE[0].created_at
    assert stats.latest_created_at == FIXTURE[3].created_at
    assert stats.fields["metadata.year"].value == "integer"
    assert name in await opened.list_collections()


async def test_describe_under_a_filter_counts_and_lists_only_the_matching_documents(
    engine: tuple[SearchEngine, str],
) -> None:
    """GetCollection under a caller filter: nothing about the documents outside it."""
    opened, name = engine
    github = RawFilter(((RawCondition("source", Operator.EQUALS, "github"),),))
    where = validate_filter(github, await opened.fields(name))
    stats = await opened.describe(name, where=where)
    assert (stats.document_count, stats.chunk_count) == (1, 1)
    assert dict(stats.sources) == {"github": 1}
    assert dict(stats.entity_types) == {"issue": 1}
    assert stats.earliest_created_at == stats.latest_created_at == FIXTURE[2].created_at
    assert {"metadata.year", "metadata.team"} <= set(stats.fields)
    assert "metadata.score" not in stats.fields
    assert "source" in stats.fields
    whole = await opened.describe(name)
    assert whole.document_count == len(FIXTURE)
    assert "metadata.score" in whole.fields
    await opened.upsert(name, [record(replace(FIXTURE[2], id="zeta"))])
    after_write = await opened.describe(name, where=where)
    assert (after_write.document_count, dict(after_write.sources)) == (2, {"github": 2})


async def test_keyword_and_hybrid_find_the_document_whose_words_match(
    engine: tuple[SearchEngine, str],
) -> None:
    opened, name = engine
    query = EngineQuery(Strategy.KEYWORD, "release wheels", np.zeros((0, DIMENSIONS), np.float32))
    page = await opened.search(name, query)
    assert [h.chunk.id for h in page.hits][:1] == ["gamma__chunk_0"]
    hybrid = replace(
        query, strategy=Strategy.HYBRID, vectors=np.stack([vector_for("gamma__chunk_0")])
    )
    top = (await opened.search(name, hybrid)).hits[0]
    assert top.chunk.id == "gamma__chunk_0"
    assert top.dense_score == pytest.approx(1.0, abs=1e-3)


async def test_a_query_word_sent_again_counts_again_on_every_engine(
    engine: tuple[SearchEngine, str],
) -> None:
    """The search tool weighs a keyword expansion's words by sending the query's words again
    (`service.keyword_text`): every engine's BM25 must count a repeated query word again."""
    opened, name = engine
    none = np.zeros((0, DIMENSIONS), np.float32)
    once = await opened.search(name, EngineQuery(Strategy.KEYWORD, "wheels", none))
    four = await opened.search(name, EngineQuery(Strategy.KEYWORD, "wheels " * 4, none))
    assert [h.chunk.id for h in four.hits] == [h.chunk.id for h in once.hits]
    assert once.hits
    for one, repeated in zip(once.hits, four.hits, strict=True):
        assert one.keyword_score is not None
        assert repeated.keyword_score == pytest.approx(4 * one.keyword_score, rel=1e-4)


@pytest.mark.parametrize(
    "text", ['"release wheels"', '"unbalanced AND (release OR', "NOT release", "release:*"]
)
async def test_query_syntax_in_keyword_text_is_searched_as_plain_words_on_every_engine(
    engine: tuple[SearchEngine, str], text: str
) -> None:
    opened, name = engine
    query = EngineQuery(Strategy.KEYWORD, text, np.zeros((0, DIMENSIONS), np.float32))
    page = await opened.search(name, query)
    assert "gamma__chunk_0" in [h.chunk.id for h in page.hits]


CJK_DOCUMENTS = {
    "ja": "東京は日本の首都であり、世界最大の都市圏の一つです。",
    "zh": "北京是中华人民共和国的首都，也是全国的政治和文化中心。",
    "ko": "서울은 한국의 수도이며 가장 큰 도시입니다.",
    "ru": "Москва — столица России и крупнейший город страны.",
}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("都市圏", "ja"),
        ("文化中心", "zh"),
        ("수도", "ko"),
        ("世界最大の都市", "ja"),
        ("столицы городов", "ru"),
    ],
)
async def test_a_cjk_word_inside_a_sentence_or_a_cyrillic_word_inflected_is_found_by_keyword(
    engine: tuple[SearchEngine, str], query: str, expected: str
) -> None:
    """Chinese and Japanese words are not separated by spaces, and Russian ones inflect: each
    engine's keyword side sees a run of CJK characters as its character pairs and a Cyrillic word
    as its stem (`keyword_form`), on the stored text and on the query alike."""
    opened, name = engine
    await opened.upsert(
        name,
        [
            record(replace(FIXTURE[0], id=key, title="", text=text))
            for key, text in CJK_DOCUMENTS.items()
        ],
    )
    query_ = EngineQuery(Strategy.KEYWORD, query, np.zeros((0, DIMENSIONS), np.float32))
    hits = (await opened.search(name, query_)).hits
    assert [h.chunk.document_id for h in hits][:1] == [expected]
    english = replace(query_, keyword_text="release wheels")
    assert [h.chunk.id for h in (await opened.search(name, english)).hits][:1] == ["gamma__chunk_0"]


@pytest.mark.parametrize(
    ("language", "text", "query"),
    [
        ("german", "Die Häuser am See wurden 1910 gebaut.", "Haus"),
        ("french", "Les chevaux du village paissent au bord de l'eau.", "cheval"),
    ],
)
async def test_a_word_inflected_in_the_collections_language_is_found_by_keyword(
    engine: tuple[SearchEngine, str], language: str, text: str, query: str
) -> None:
    """A collection in another language (`search_tool.keyword.language`): each engine's keyword
    side sees its words as their stems in that language, on the stored text and the query alike;
    English text beside it is still found."""
    opened, name = engine
    stored = record(replace(FIXTURE[0], id="inflected", title="", text=text))
    await opened.upsert(name, [replace(stored, keyword_language=language)])
    query_ = EngineQuery(
        Strategy.KEYWORD, query, np.zeros((0, DIMENSIONS), np.float32), keyword_language=language
    )
    hits = (await opened.search(name, query_)).hits
    assert [h.chunk.document_id for h in hits][:1] == ["inflected"]
    english = replace(query_, keyword_text="release wheels")
    assert [h.chunk.id for h in (await opened.search(name, english)).hits][:1] == ["gamma__chunk_0"]
