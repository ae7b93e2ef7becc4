"""A collection in another language than English (`search_tool.keyword.language`,
`collection_languages`) is keyword-searched by its words' stems in that language, through the
search tool's API: an inflected form finds the document that uses another, and GetCollection
says which language a collection is in. Its documents are rewritten when sent again after the
language changed, and no other collection's are. A language without a stemmer, or a name no
collection can have, stops start-up naming the setting."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2

from services.common.keyword_form import keyword_form
from services.common.settings import load_settings
from services.search_tool import documents
from services.search_tool.config import KeywordSettings, SearchToolSettings
from services.search_tool.embedding import Embedder
from tests.search_tool.grpc_helpers import document, search, serving

KEYWORD = search_pb2.RETRIEVAL_STRATEGY_KEYWORD
HYBRID = search_pb2.RETRIEVAL_STRATEGY_HYBRID
HOUSES = document("haus", "Die Häuser am See wurden 1910 gebaut.", title="Am See")
LIBRARY = document("bibliothek", "Die Stadt hat eine große Bibliothek.", title="Bibliothek")


async def _upsert(stub: Any, collection: str, *documents: Any) -> Any:
    return await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(collection=collection, documents=list(documents))
    )


async def _found(stub: Any, collection: str, text: str, strategy: Any = KEYWORD) -> list[str]:
    reply = await stub.Search(search(collection, text, strategy, limit=5))
    return [r.chunk.document_id for r in reply.results]


def _in(settings: SearchToolSettings, keyword: KeywordSettings) -> SearchToolSettings:
    return settings.model_copy(update={"keyword": keyword})


async def _in_both(stub: Any, *documents: Any) -> None:
    """`documents` in the German collection `de` and the English one `en`."""
    for collection in ("de", "en"):
        await _upsert(stub, collection, *documents)


async def test_an_inflected_word_finds_the_document_in_a_german_collection_and_not_in_english(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    german = _in(settings, KeywordSettings(collection_languages={"de": "german"}))
    async with serving(german, embedder) as stub:
        await _in_both(stub, HOUSES, LIBRARY)
        assert await _found(stub, "de", "Haus") == ["haus"]  # the text says "Häuser"
        assert await _found(stub, "de", "Bibliotheken") == ["bibliothek"]
        assert (await _found(stub, "de", "ein altes Haus am See", HYBRID))[:1] == ["haus"]
        assert await _found(stub, "en", "Haus") == []  # English stems keep them apart
        assert await _found(stub, "en", "Häuser") == ["haus"]


async def test_get_and_list_collections_say_which_language_each_collection_is_stemmed_in(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    german = _in(settings, KeywordSettings(collection_languages={"de": "german"}))
    async with serving(german, embedder) as stub:
        await _in_both(stub, HOUSES)
        got = await stub.GetCollection(search_tool_pb2.GetCollectionRequest(collection="de"))
        assert got.collection.keyword_language == "german"
        listed = await stub.ListCollections(search_tool_pb2.ListCollectionsRequest())
        assert {c.name: c.keyword_language for c in listed.collections} == {
            "de": "german",
            "en": "english",
        }


async def test_after_the_language_changes_a_document_sent_again_is_rewritten_in_it(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    async with serving(settings, embedder) as stub:
        await _upsert(stub, "de", HOUSES, LIBRARY)
        await _upsert(stub, "other", HOUSES)
        assert await _found(stub, "de", "Haus") == []
    german = _in(settings, KeywordSettings(collection_languages={"de": "german"}))
    async with serving(german, embedder) as stub:
        # stored in English: not found by the other form until it is sent again
        assert await _found(stub, "de", "Haus") == []
        again = await _upsert(stub, "de", HOUSES)
        assert (again.documents_upserted, again.chunks_upserted) == (1, 1)
        assert await _found(stub, "de", "Haus") == ["haus"]
        assert (await _upsert(stub, "de", HOUSES)).chunks_upserted == 0  # now unchanged
        assert (await _upsert(stub, "other", HOUSES)).chunks_upserted == 0  # still English


async def test_the_service_wide_language_applies_to_every_collection_not_listed(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    french = _in(settings, KeywordSettings(language="french"))
    horses = document("chevaux", "Les chevaux du village paissent au bord de l'eau.")
    async with serving(french, embedder) as stub:
        await _upsert(stub, "fr", horses)
        assert await _found(stub, "fr", "cheval") == ["chevaux"]


@pytest.mark.parametrize(
    ("variable", "value", "named", "why"),
    [
        ("QUARRY_SEARCH_TOOL_KEYWORD__LANGUAGE", "klingon", "language", "has no stemmer"),
        (
            "QUARRY_SEARCH_TOOL_KEYWORD__COLLECTION_LANGUAGES",
            '{"docs": "elvish"}',
            "collection_languages",
            "'elvish' has no stemmer",
        ),
        (
            "QUARRY_SEARCH_TOOL_KEYWORD__COLLECTION_LANGUAGES",
            '{"my docs": "german"}',
            "collection_languages",
            "is not a collection name",
        ),
    ],
)
def test_a_language_without_a_stemmer_or_a_name_no_collection_has_stops_start_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str, value: str, named: str, why: str
) -> None:
    config = tmp_path / "quarry.yaml"
    config.write_text("search_tool: {}\n")
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as refused:
        load_settings(SearchToolSettings, config)
    assert f"keyword.{named}" in str(refused.value)
    assert why in str(refused.value)


def test_language_names_are_read_in_any_case() -> None:
    assert KeywordSettings(language="German").language_of("x") == "german"
    assert KeywordSettings(collection_languages={"a": "FRENCH"}).language_of("a") == "french"


async def test_the_keyword_form_of_written_chunks_is_made_off_the_event_loop(
    settings: SearchToolSettings, embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stemming a chunk with its neighbours' text takes about a millisecond: a batch of long
    documents would hold the loop (and every search waiting on it) for seconds."""
    threads: list[int] = []

    def recorded(text: str, language: str = "english") -> str:
        threads.append(threading.get_ident())
        return keyword_form(text, language)

    monkeypatch.setattr(documents, "keyword_form", recorded)
    german = _in(settings, KeywordSettings(collection_languages={"de": "german"}))
    async with serving(german, embedder) as stub:
        await _upsert(stub, "de", HOUSES, LIBRARY)
        assert await _found(stub, "de", "Haus") == ["haus"]
    assert threads
    assert threading.get_ident() not in threads


async def test_a_serbian_collection_finds_a_word_written_in_the_other_alphabet(
    settings: SearchToolSettings, embedder: Embedder
) -> None:
    serbian = _in(settings, KeywordSettings(collection_languages={"sr": "serbian"}))
    library = document("lib", "Градска библиотека је отворена сваког дана.")
    async with serving(serbian, embedder) as stub:
        await _upsert(stub, "sr", library)
        assert set(await _found(stub, "sr", "biblioteke")) == {"lib"}  # Latin, another case
