"""The model is told only what the caller may see: the collection facts of its first message
(documents, chunks, sources, entity types, metadata keys, dates) are computed under the caller's
filter, by the fake search tool and by the real one alike."""

from __future__ import annotations

import pytest

from services.agent.filters import CallerFilter
from services.agent.loop import AgentLoop
from services.agent.ports import SearchClient
from services.agent.run import RunRequest
from services.agent.search import DEFAULT_KEYWORD_LANGUAGE
from services.agent.testing import ScriptedModel, answer_call, turn
from services.search_tool.config import KeywordSettings
from tests.agent.conftest import FILTER_COLLECTION as COLLECTION
from tests.agent.conftest import caller_filter, collect
from tests.agent.fake_search import FakeSearch
from tests.agent.test_search_conformance import _fake
from tests.search_tool.filter_cases import FIXTURE

OUTSIDE = ("confluence", "gdrive", "slack", "page", "comment", "message", "metadata.score")
"""Sources, entity types and a metadata key only documents outside `source = github` have."""


@pytest.fixture(params=["fake", "real"])
def search(request: pytest.FixtureRequest) -> SearchClient:
    if request.param == "real":
        client: SearchClient = request.getfixturevalue("real_search")
        return client
    return FakeSearch([_fake(d) for d in FIXTURE], collection=COLLECTION)


async def _collection_section(search: SearchClient, caller: CallerFilter) -> str:
    """The `## Collection` section of the first message the model received."""
    model = ScriptedModel([turn("", answer_call("Nothing to say."))])
    request = RunRequest(collection=COLLECTION, query="What happened?", caller_filter=caller)
    await collect(AgentLoop(model, search).stream(request))
    task = model.requests[0].messages[1].text
    return task.split("## Collection\n", 1)[1]


async def test_a_caller_restricted_to_one_source_is_described_only_that_source(
    search: SearchClient,
) -> None:
    section = await _collection_section(search, caller_filter([("source", "equals", "github")]))
    assert "documents: 1; chunks: 1" in section
    assert "sources: github (1)" in section
    assert "entity types: issue (1)" in section
    assert "metadata.team (string)" in section
    assert [word for word in OUTSIDE if word in section] == []


async def test_without_a_caller_filter_the_whole_collection_is_described(
    search: SearchClient,
) -> None:
    section = await _collection_section(search, CallerFilter())
    assert f"documents: {len(FIXTURE)}" in section
    assert all(word in section for word in OUTSIDE)


async def test_a_caller_filter_matching_nothing_reveals_no_counts_or_values(
    search: SearchClient,
) -> None:
    section = await _collection_section(search, caller_filter([("source", "equals", "nowhere")]))
    assert "documents: 0; chunks: 0" in section
    assert not any(d.source in section or d.entity_type in section for d in FIXTURE)


async def test_an_english_collection_is_described_as_before_without_a_language_line(
    search: SearchClient,
) -> None:
    """English is the default: its prompts stay byte for byte what a real model was measured on."""
    section = await _collection_section(search, CallerFilter())
    assert "keyword language" not in section


async def test_a_collection_in_another_language_is_described_in_that_language() -> None:
    search = FakeSearch(
        [_fake(d) for d in FIXTURE], collection=COLLECTION, keyword_language="german"
    )
    section = await _collection_section(search, CallerFilter())
    assert "\nkeyword language: german" in section


def test_the_language_the_agent_leaves_unsaid_is_the_search_tools_default() -> None:
    """The agent writes the default out (it does not import the stemmers); the two must agree."""
    assert KeywordSettings().language == DEFAULT_KEYWORD_LANGUAGE
