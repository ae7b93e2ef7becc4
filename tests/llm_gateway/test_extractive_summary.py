"""The extractive provider's `summary` (docs/agent-tool-contract.md): the sentences of the given
results closest to the focus, with their ids — deterministic, through GenerateStructured too."""

from __future__ import annotations

import json

import grpc
import jsonschema
import pytest
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.agent.search import SearchHit
from services.agent.tools.summarize import summary_input
from services.common.status import details_of_rpc_error
from services.llm_gateway.errors import FatalProviderError
from services.llm_gateway.model import ChatRequest, Message, Role
from services.llm_gateway.providers.extractive import ExtractiveProvider
from tests.llm_gateway.gateway_fixtures import gateway_settings, running_gateway, user

SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string"},
        "points": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "result_ids": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["text", "result_ids"],
            },
        },
    },
    "required": ["summary", "points"],
}
RESULTS = """### [doc-1__chunk_0] Photosynthesis
source: biology | entity_type: page | url:
Photosynthesis converts light energy into chemical energy. It takes place in the chloroplasts of \
plant cells. Many people enjoy gardening on weekends.

### [web_0123456789abcdef] Chlorophyll - Encyclopedia
source: web | url: https://example.org/chlorophyll
Chlorophyll absorbs light for photosynthesis in the chloroplasts. The weather was pleasant.

### [doc-3__chunk_1] Trains
source: history | entity_type: page | url:
Steam locomotives were common in the nineteenth century.
"""


def summary_request(focus: str, results: str = RESULTS) -> ChatRequest:
    text = f"## Focus\n{focus}\n\n## Results\n{results}"
    return ChatRequest(
        (Message(Role.SYSTEM, text="Summarise."), Message(Role.USER, text=text)),
        response_schema=SUMMARY_SCHEMA,
        response_schema_name="summary",
    )


async def test_the_summary_is_the_sentences_closest_to_the_focus_with_their_ids() -> None:
    reply = await ExtractiveProvider().generate(
        summary_request("where chloroplasts photosynthesis")
    )
    value = json.loads(reply.text)
    jsonschema.validate(value, SUMMARY_SCHEMA)
    points = value["points"]
    assert {p["result_ids"][0] for p in points} == {"doc-1__chunk_0", "web_0123456789abcdef"}
    assert all(len(p["result_ids"]) == 1 for p in points)
    texts = [p["text"] for p in points]
    assert "It takes place in the chloroplasts of plant cells." in texts
    assert not any("gardening" in t or "locomotives" in t or "weather" in t for t in texts)
    assert value["summary"] == " ".join(texts)


async def test_the_same_request_gives_the_same_summary() -> None:
    request = summary_request("chlorophyll light")
    first = await ExtractiveProvider().generate(request)
    second = await ExtractiveProvider().generate(request)
    assert first.text == second.text


async def test_a_focus_nothing_matches_gives_no_points_and_says_so() -> None:
    value = json.loads((await ExtractiveProvider().generate(summary_request("volcanoes"))).text)
    assert value == {
        "summary": "No sentence of these results matches the focus: volcanoes",
        "points": [],
    }


async def test_points_never_exceed_six_sentences() -> None:
    many = "".join(
        f"### [d{i}__chunk_0] T{i}\nsource: s\nPhotosynthesis fact number {i}. "
        f"Photosynthesis again {i}.\n\n"
        for i in range(10)
    )
    value = json.loads(
        (await ExtractiveProvider().generate(summary_request("photosynthesis", many))).text
    )
    assert 2 <= len(value["points"]) <= 6


async def test_a_schema_the_summary_does_not_fit_is_the_callers_error() -> None:
    request = summary_request("chlorophyll")
    wrong = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    with pytest.raises(FatalProviderError, match="cannot fill this schema"):
        await ExtractiveProvider().generate(
            ChatRequest(request.messages, response_schema=wrong, response_schema_name="summary")
        )


async def test_generate_structured_named_summary_answers_offline_through_grpc() -> None:
    async with running_gateway(gateway_settings()) as stub:
        reply = await stub.GenerateStructured(
            pb.GenerateStructuredRequest(
                messages=[user(f"## Focus\nchlorophyll light\n\n## Results\n{RESULTS}")],
                schema_json=json.dumps(SUMMARY_SCHEMA),
                schema_name="summary",
            )
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GenerateStructured(
                pb.GenerateStructuredRequest(
                    messages=[user("## Focus\nx\n\n## Results\n")],
                    schema_json='{"type": "object", "required": ["n"], '
                    '"properties": {"n": {"type": "integer"}}}',
                    schema_name="summary",
                )
            )
    value = json.loads(reply.json)
    assert reply.provider == "extractive"
    assert value["points"][0]["result_ids"] == ["web_0123456789abcdef"]
    assert details_of_rpc_error(caught.value).code == grpc.StatusCode.INVALID_ARGUMENT


HANDBUCH = [
    SearchHit(
        id="haeuser__chunk_0",
        document_id="haeuser",
        title="Häuser",
        text="Die Dächer der Häuser sind aus Schiefer. Die Stadt liegt im Norden.",
        score=0.5,
    ),
    SearchHit(
        id="bruecke__chunk_0",
        document_id="bruecke",
        title="Brücke",
        text="Woraus die Brücke besteht, ist unklar. Die Brücke ist alt.",
        score=0.5,
    ),
]


@pytest.mark.parametrize(
    ("language", "first_point"),
    [
        ("german", "Die Dächer der Häuser sind aus Schiefer."),
        ("english", "Woraus die Brücke besteht, ist unklar."),
    ],
)
async def test_the_summary_compares_words_in_the_language_the_agent_names_for_the_collection(
    language: str, first_point: str
) -> None:
    """Both sides of the contract: the agent's own summary input. In German the focus meets
    "Dächer der Häuser" by its stems; without the collection's language only "Woraus" meets."""
    sent = summary_input(
        "Woraus ist das Dach des Hauses?", HANDBUCH, max_chars=10_000, keyword_language=language
    )
    assert ("## Collection\nkeyword language: german\n" in sent.text) is (language == "german")
    assert "keyword language: english" not in sent.text
    request = ChatRequest(
        (Message(Role.SYSTEM, text="Summarise."), Message(Role.USER, text=sent.text)),
        response_schema=SUMMARY_SCHEMA,
        response_schema_name="summary",
    )
    value = json.loads((await ExtractiveProvider().generate(request)).text)
    assert value["points"][0]["text"] == first_point


async def test_a_markdown_results_own_headings_do_not_end_the_results() -> None:
    """A Markdown file's chunk has `## ` lines of its own (one even named like the message's
    section): its text after them is summarised too."""
    readme = SearchHit(
        id="readme__chunk_0",
        document_id="readme",
        title="README",
        text="# Quarry\n\nQuarry searches collections.\n\n## Results\n\nIt finds them.\n\n"
        "## Install\n\nRun make run to install the services.",
        score=0.5,
    )
    sent = summary_input("how to install the services", [readme], max_chars=10_000)
    request = ChatRequest(
        (Message(Role.SYSTEM, text="Summarise."), Message(Role.USER, text=sent.text)),
        response_schema=SUMMARY_SCHEMA,
        response_schema_name="summary",
    )
    value = json.loads((await ExtractiveProvider().generate(request)).text)
    assert value["points"][0] == {
        "text": "Install Run make run to install the services.",
        "result_ids": ["readme__chunk_0"],
    }
