"""The extractive provider follows docs/agent-tool-contract.md: search, maybe search again, answer
with the most relevant sentences citing exactly their results — or honestly find nothing."""

from __future__ import annotations

import json

import jsonschema
import pytest

from services.agent.filters import CallerFilter
from services.agent.prompt import task_message
from services.agent.run import Mode
from services.agent.search import CollectionInfo
from services.llm_gateway.model import (
    ChatRequest,
    Completed,
    Message,
    Role,
    StopReason,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    ToolChoiceMode,
)
from services.llm_gateway.providers.extractive import (
    NOT_FOUND_TEXT,
    OFFLINE_INTRO,
    ExtractiveProvider,
)
from tests.llm_gateway.gateway_fixtures import (
    SEARCH_PARAMETERS,
    SUBMIT_PARAMETERS,
    agent_question,
    search_result,
)

TOOLS = (
    Tool("search", "Search the collection", SEARCH_PARAMETERS),
    Tool("submit_answer", "Submit the answer", SUBMIT_PARAMETERS),
)
WITH_READ = (*TOOLS[:1], Tool("read", "Read a document", {"type": "object"}), TOOLS[1])
PASSAGES = [
    (
        "doc-1__chunk_0",
        "Photosynthesis",
        "Photosynthesis converts light energy into chemical energy. It takes place in the "
        "chloroplasts of plant cells. Many people enjoy gardening on weekends.",
    ),
    (
        "doc-2__chunk_3",
        "Chlorophyll",
        "Chlorophyll is the pigment that absorbs light for photosynthesis in chloroplasts. "
        "The weather was pleasant yesterday.",
    ),
    ("doc-3__chunk_1", "Trains", "Steam locomotives were common in the nineteenth century."),
]


def _conversation(
    question: str, *results: str, thinking: bool = False, language: str = ""
) -> list[Message]:
    messages = [
        Message(Role.USER, text=agent_question(question, thinking=thinking, language=language))
    ]
    for number, result in enumerate(results, start=1):
        call = ToolCall(f"c{number}", "search", "{}")
        messages.append(Message(Role.ASSISTANT, tool_calls=(call,)))
        messages.append(Message(Role.TOOL, text=result, tool_call_id=call.id))
    return messages


async def _answer(messages: list[Message], tools: tuple[Tool, ...] = TOOLS) -> dict[str, object]:
    response = await ExtractiveProvider().generate(ChatRequest(tuple(messages), tools))
    (call,) = response.tool_calls
    assert call.name == "submit_answer"
    return json.loads(call.arguments_json)  # type: ignore[no-any-return]


async def _answer_text(question: str, passages: list[tuple[str, str, str]]) -> str:
    """The answer's text to `question` after one search that found `passages`."""
    answer = await _answer(_conversation(question, search_result(passages)))
    return str(answer["text"])


async def test_first_turn_searches_the_question_under_query_with_the_contract_defaults() -> None:
    question = "Where does photosynthesis take place?"
    response = await ExtractiveProvider().generate(
        ChatRequest(tuple(_conversation(question)), TOOLS)
    )
    assert response.stop_reason is StopReason.TOOL_USE
    (call,) = response.tool_calls
    assert call.name == "search"
    assert json.loads(call.arguments_json) == {
        "query": {"primary": question, "variations": []},
        "filter_groups": [],
        "limit": 10,
        "offset": 0,
        "retrieval_strategy": "hybrid",
    }


async def test_without_a_query_section_the_last_user_message_is_the_question() -> None:
    messages = (Message(Role.USER, text="earlier"), Message(Role.USER, text="what is chlorophyll"))
    response = await ExtractiveProvider().generate(ChatRequest(messages, TOOLS))
    primary = json.loads(response.tool_calls[0].arguments_json)["query"]["primary"]
    assert primary == "what is chlorophyll"


async def test_the_answer_is_the_relevant_sentences_citing_exactly_their_results() -> None:
    answer = await _answer(
        _conversation("Where does photosynthesis take place?", search_result(PASSAGES))
    )
    text = str(answer["text"])
    assert "chloroplasts of plant cells" in text
    for unrelated in ("gardening", "weather", "locomotives"):
        assert unrelated not in text
    cited = [c["result_id"] for c in answer["citations"]]  # type: ignore[attr-defined]
    assert set(cited) == {"doc-1__chunk_0", "doc-2__chunk_3"}
    assert ("[1]" in text, "[2]" in text) == (True, True)


async def test_nothing_relevant_gives_an_honest_answer_without_citations() -> None:
    answer = await _answer(
        _conversation("Who won the 1998 football world cup?", search_result(PASSAGES))
    )
    assert answer == {"text": NOT_FOUND_TEXT, "citations": []}


async def test_thinking_mode_searches_again_by_keywords_when_the_first_search_found_little() -> (
    None
):
    thin = search_result(PASSAGES[2:], total=1)
    messages = _conversation("What pigment absorbs light in plants?", thin, thinking=True)
    response = await ExtractiveProvider().generate(ChatRequest(tuple(messages), TOOLS))
    (call,) = response.tool_calls
    arguments = json.loads(call.arguments_json)
    assert call.name == "search"
    assert arguments["retrieval_strategy"] == "keyword"
    assert arguments["query"]["primary"] == "pigment absorbs light plants"
    assert call.id not in {"c1"}


async def test_fast_mode_answers_after_one_search_even_when_it_found_little() -> None:
    thin = search_result(PASSAGES[2:], total=1)
    answer = await _answer(_conversation("What pigment absorbs light?", thin))
    assert answer["text"] == NOT_FOUND_TEXT


@pytest.mark.parametrize("total", [3, 12])
async def test_thinking_mode_answers_without_a_second_search_when_the_first_was_not_thin(
    total: int,
) -> None:
    rich = search_result(PASSAGES, total=total)
    messages = _conversation("What pigment absorbs light?", rich, thinking=True)
    answer = await _answer(messages)
    assert "Chlorophyll is the pigment that absorbs light" in str(answer["text"])
    assert {"result_id": "doc-2__chunk_3"} in answer["citations"]  # type: ignore[operator]


async def test_thinking_mode_searches_only_once_more_however_thin_the_second_search() -> None:
    thin = search_result(PASSAGES[2:], total=1)
    messages = _conversation("What pigment absorbs light?", thin, thin, thinking=True)
    answer = await _answer(messages)
    assert answer == {"text": NOT_FOUND_TEXT, "citations": []}


async def test_thinking_mode_reads_the_best_result_then_answers_from_what_it_read() -> None:
    rich = search_result(PASSAGES, total=12)
    messages = _conversation("What pigment absorbs light?", rich, thinking=True)
    response = await ExtractiveProvider().generate(ChatRequest(tuple(messages), WITH_READ))
    (call,) = response.tool_calls
    assert (call.name, json.loads(call.arguments_json)) == (
        "read",
        {"result_id": "doc-2__chunk_3", "scope": "around", "neighbours": 1},
    )
    assert response.text == "Reading the passage around the best result, Chlorophyll."
    read = (
        "Read doc-2: chunks 2-3 of 4.\n\n### [doc-2__chunk_2] Chlorophyll\nsource: s | "
        "entity_type: e | url: u\nChlorophyll a is the main pigment that absorbs light.\n"
    )
    messages += [
        Message(Role.ASSISTANT, tool_calls=(call,)),
        Message(Role.TOOL, text=read, tool_call_id=call.id),
    ]
    answer = await _answer(messages, tools=WITH_READ)
    assert answer["citations"] == [{"result_id": "doc-2__chunk_2"}, {"result_id": "doc-2__chunk_3"}]


async def test_fast_mode_answers_after_its_one_search_and_never_reads() -> None:
    rich = search_result(PASSAGES, total=12)
    answer = await _answer(_conversation("What pigment absorbs light?", rich), tools=WITH_READ)
    assert "Chlorophyll is the pigment" in str(answer["text"])


async def test_previews_give_way_to_the_full_text_the_agent_sends() -> None:
    preview = (
        "Found 1 results; showing 1.\n\n### [doc-9__chunk_0] Leaves\nsource: s | entity_type: "
        "e | score: 1.0 | url: u\nLeaves are green. … [preview: 60 more characters]\n"
    )
    full = (
        "Full text of the results you are about to cite (they were shown as previews):\n\n"
        "### [doc-9__chunk_0] Leaves\nsource: s | entity_type: e | score: 1.0 | url: u\n"
        "Leaves are green. Chlorophyll in leaves absorbs red and blue light strongly.\n"
    )
    messages = [*_conversation("What does chlorophyll absorb?", preview), Message(Role.USER, full)]
    answer = await _answer(messages)
    assert "absorbs red and blue light" in str(answer["text"])
    assert "preview" not in str(answer["text"])


async def test_asked_directly_it_says_what_it_is_instead_of_pretending_to_search() -> None:
    response = await ExtractiveProvider().generate(ChatRequest((Message(Role.USER, "hello"),)))
    assert response.text == OFFLINE_INTRO
    assert "offline extractive model" in response.text
    assert NOT_FOUND_TEXT not in response.text


async def test_with_only_submit_answer_offered_it_answers_directly() -> None:
    messages = _conversation("Where does photosynthesis take place?", search_result(PASSAGES))
    answer = await _answer(messages, tools=TOOLS[1:])
    assert answer["citations"]


async def test_with_every_tool_described_but_only_submit_answer_allowed_it_answers() -> None:
    messages = _conversation("Where does photosynthesis take place?", search_result(PASSAGES))
    choice = ToolChoice(ToolChoiceMode.AUTO, allowed=("submit_answer",))
    response = await ExtractiveProvider().generate(ChatRequest(tuple(messages), TOOLS, choice))
    assert [c.name for c in response.tool_calls] == ["submit_answer"]


async def test_without_tools_it_replies_with_extractive_text() -> None:
    messages = _conversation("Where does photosynthesis take place?", search_result(PASSAGES))
    response = await ExtractiveProvider().generate(ChatRequest(tuple(messages)))
    assert response.tool_calls == []
    assert response.stop_reason is StopReason.END_TURN
    assert "chloroplasts" in response.text


async def test_tool_choice_none_means_no_tool_call() -> None:
    request = ChatRequest(
        tuple(_conversation("photosynthesis?")), TOOLS, ToolChoice(ToolChoiceMode.NONE)
    )
    assert (await ExtractiveProvider().generate(request)).tool_calls == []


async def test_structured_output_fills_the_schema_deterministically_and_validates() -> None:
    schema = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "maxLength": 400},
            "facts": {"type": "array", "items": {"type": "string"}},
            "searches": {"type": "integer", "minimum": 0},
            "confident": {"type": "boolean"},
        },
        "required": ["summary", "facts", "searches", "confident"],
        "additionalProperties": False,
    }
    messages = _conversation("Where does photosynthesis take place?", search_result(PASSAGES))
    request = ChatRequest(tuple(messages), response_schema=schema)
    first = await ExtractiveProvider().generate(request)
    second = await ExtractiveProvider().generate(request)
    value = json.loads(first.text)
    jsonschema.validate(value, schema)
    assert first.text == second.text
    assert "chloroplasts" in value["summary"]
    assert (value["facts"], value["searches"], value["confident"]) == ([], 0, False)


async def test_the_stream_equals_the_whole_response_and_usage_is_counted() -> None:
    messages = _conversation("Where does photosynthesis take place?", search_result(PASSAGES))
    request = ChatRequest(tuple(messages), TOOLS)
    whole = await ExtractiveProvider().generate(request)
    events = [e async for e in ExtractiveProvider().stream(request)]
    final = events[-1]
    assert isinstance(final, Completed)
    assert final.response == whole
    arguments = "".join(e.arguments_delta for e in events if isinstance(e, ToolCallDelta))
    assert arguments == whole.tool_calls[0].arguments_json
    assert not [e for e in events if isinstance(e, TextDelta)]
    characters = sum(len(m.text) for m in messages)
    assert whole.usage.input_tokens >= characters // 4
    assert whole.usage.output_tokens == pytest.approx(
        len("submit_answer" + whole.tool_calls[0].arguments_json) / 4, abs=1
    )


async def test_a_japanese_question_is_answered_with_the_sentence_that_holds_its_words() -> None:
    """Japanese is written without spaces: sentences end at `。`, and the question and the
    sentences are compared as character pairs, as the search tool's keyword index compares them."""
    passages = [
        (
            "tokyo__chunk_0",
            "東京",
            "東京は日本の首都です。人口は約1400万人です。東京タワーは1958年に完成しました。",
        ),
        ("kyoto__chunk_0", "京都", "京都には多くの寺があります。紅葉の季節は美しいです。"),
    ]
    question = "東京タワーはいつ完成しましたか？"
    answer = await _answer(_conversation(question, search_result(passages)))
    text = str(answer["text"])
    assert "1958年に完成しました" in text
    assert "紅葉" not in text
    assert "寺" not in text
    assert [c["result_id"] for c in answer["citations"]] == ["tokyo__chunk_0"]  # type: ignore[attr-defined]


async def test_a_question_in_another_alphabet_is_answered_from_its_words() -> None:
    passages = [
        ("moscow__chunk_0", "Москва", "Москва — столица России. Город основан в 1147 году."),
        ("berlin__chunk_0", "Berlin", "Berlin ist die Hauptstadt Deutschlands."),
    ]
    answer = await _answer(_conversation("Когда основан город Москва?", search_result(passages)))
    assert "1147" in str(answer["text"])
    assert [c["result_id"] for c in answer["citations"]][:1] == ["moscow__chunk_0"]  # type: ignore[attr-defined]


GERMAN_PASSAGES = [
    (
        "haeuser__chunk_0",
        "Häuser",
        "Die Dächer der Häuser sind aus Schiefer. Die Stadt liegt im Norden.",
    ),
    ("bruecke__chunk_0", "Brücke", "Woraus die Brücke besteht, ist unklar. Die Brücke ist alt."),
]
GERMAN_QUESTION = "Woraus ist das Dach des Hauses?"
"""Its words meet the first passage's only as German stems (Dach / Dächer, Hauses / Häuser) and
the second passage's as they are written (Woraus, ist)."""


async def test_a_german_collections_answer_is_the_sentence_its_question_meets_in_german_stems() -> (
    None
):
    german = await _answer(
        _conversation(GERMAN_QUESTION, search_result(GERMAN_PASSAGES), language="german")
    )
    assert str(german["text"]).startswith("Die Dächer der Häuser sind aus Schiefer. [1]")
    assert [c["result_id"] for c in german["citations"]][:1] == ["haeuser__chunk_0"]  # type: ignore[attr-defined]
    english = await _answer(_conversation(GERMAN_QUESTION, search_result(GERMAN_PASSAGES)))
    assert "Schiefer" not in str(english["text"])
    assert [c["result_id"] for c in english["citations"]] == ["bruecke__chunk_0"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("language", ["klingon", "porter", "ENGLISH", ""])
async def test_a_collection_language_without_a_stemmer_compares_words_as_english(
    language: str,
) -> None:
    answer = await _answer(
        _conversation(GERMAN_QUESTION, search_result(GERMAN_PASSAGES), language=language)
    )
    assert [c["result_id"] for c in answer["citations"]] == ["bruecke__chunk_0"]  # type: ignore[attr-defined]


async def test_the_language_the_agent_names_for_the_collection_is_the_one_the_answer_uses() -> None:
    """Both sides of the contract: the agent's own first message for a German collection."""
    first = task_message(
        GERMAN_QUESTION,
        Mode.FAST,
        CallerFilter(),
        CollectionInfo(name="handbuch", keyword_language="german"),
    )
    messages = [
        Message(Role.USER, text=first),
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c1", "search", "{}"),)),
        Message(Role.TOOL, text=search_result(GERMAN_PASSAGES), tool_call_id="c1"),
    ]
    answer = await _answer(messages)
    assert [c["result_id"] for c in answer["citations"]][:1] == ["haeuser__chunk_0"]  # type: ignore[attr-defined]


async def test_a_markdown_headings_marks_stay_out_of_the_answer_and_its_words_stay_in() -> None:
    """A Markdown file's chunk opens with its heading: the answer's sentence keeps the heading's
    words (the context it names), without the `#` or the underline."""
    passages = [
        (
            "install__chunk_0",
            "Installing",
            "# Installing Quarry\n\nRun `make run` to start the three services.\n\n"
            "Configuration\n-------------\nThe default port of the agent is 50053.",
        ),
    ]
    text = await _answer_text("What is the default port of the agent?", passages)
    assert "Configuration The default port of the agent is 50053. [1]" in text
    assert "#" not in text
    assert "---" not in text


async def test_a_tables_rule_lines_stay_out_of_the_answer_and_its_rows_stay_in() -> None:
    """A docstring's reStructuredText grid table: the answer quotes the rows' words, not the
    `+-----+` and `+=====+` borders between them (they showed in the demo's answer about JSON)."""
    passages = [
        (
            "json__chunk_0",
            "json.JSONEncoder",
            "Extensible JSON encoder for Python data structures.\n\n"
            "Supports the following objects and types by default:\n\n"
            "    +-------------------+---------------+\n"
            "    | Python            | JSON          |\n"
            "    +===================+===============+\n"
            "    | dict              | object        |\n"
            "    +-------------------+---------------+\n"
            "    | list, tuple       | array         |\n"
            "    +-------------------+---------------+\n",
        ),
    ]
    text = await _answer_text("Which JSON type does a Python dict become?", passages)
    assert "| dict | object |" in text
    assert "+--" not in text
    assert "+==" not in text


async def test_an_examples_lines_keep_their_breaks_and_the_marker_follows_them() -> None:
    """A docstring's `>>>` example quoted in the answer reads as it was written, a line each, its
    output under its call, and the `[n]` marker on a line of its own where it cannot be taken for
    output; the prose lines around it are joined as before."""
    passages = [
        (
            "median__chunk_0",
            "statistics.median",
            "Return the median (middle value) of numeric data.\n\n"
            "When the number of data points is even, the median is\n"
            "interpolated by taking the average of the two middle values:\n\n"
            "    >>> median([1, 3, 5, 7])\n"
            "    4.0\n\n"
            "The data may be a sequence or an iterable.",
        ),
    ]
    text = await _answer_text(
        "How is the median of an even number of values interpolated?", passages
    )
    assert (
        "When the number of data points is even, the median is interpolated by taking the "
        "average of the two middle values:\n>>> median([1, 3, 5, 7])\n4.0\n"
        "The data may be a sequence or an iterable. [1]"
    ) in text


async def test_a_fenced_code_block_keeps_its_lines_and_indentation_in_the_answer() -> None:
    """A Markdown file's fenced example keeps its indentation (Python's blocks depend on it)."""
    passages = [
        (
            "guide__chunk_2",
            "Retries",
            "To retry a flaky call, wrap it in a loop with a backoff:\n\n"
            "```python\n"
            "for attempt in range(3):\n"
            "    try:\n"
            "        return call()\n"
            "    except TimeoutError:\n"
            "        sleep(2 ** attempt)\n"
            "```\n",
        ),
    ]
    text = await _answer_text("How do I retry a flaky call with a backoff?", passages)
    assert (
        "To retry a flaky call, wrap it in a loop with a backoff:\n```python\n"
        "for attempt in range(3):\n    try:\n        return call()\n"
        "    except TimeoutError:\n        sleep(2 ** attempt)\n```\n[1]"
    ) in text


async def test_a_tables_rows_stay_one_to_a_line_in_the_answer() -> None:
    passages = [
        (
            "json__chunk_0",
            "json.JSONEncoder",
            "Supports the following objects and types by default:\n\n"
            "    | Python      | JSON   |\n"
            "    | dict        | object |\n"
            "    | list, tuple | array  |\n",
        ),
    ]
    text = await _answer_text("Which JSON type does a Python dict become?", passages)
    assert "| Python | JSON |\n| dict | object |\n| list, tuple | array |\n[1]" in text


async def test_a_citation_marker_after_an_examples_output_goes_on_a_line_of_its_own() -> None:
    """`4.0 [1]` would read as the call's output; the marker follows on the next line."""
    passages = [
        (
            "median__chunk_0",
            "statistics.median",
            "When the number of data points is even, the median is the average of the two middle "
            "values:\n\n    >>> median([1, 3, 5, 7])\n    4.0\n",
        ),
    ]
    text = await _answer_text("What is the median of an even number of values?", passages)
    assert text.endswith(">>> median([1, 3, 5, 7])\n4.0\n[1]")


async def test_a_literal_block_under_a_double_colon_keeps_its_lines_and_indentation() -> None:
    """A reStructuredText docstring's `Example::` and the indented block under it: the block's
    lines and indentation kept, the paragraph shown with one colon as reStructuredText renders
    it, and the prose after the block back on a line of its own."""
    passages = [
        (
            "wraps__chunk_0",
            "functools.wraps",
            "Use it in a decorator like this::\n\n"
            "    def logged(func):\n"
            "        @wraps(func)\n"
            "        def inner(*args):\n"
            "            return func(*args)\n"
            "        return inner\n\n"
            "The wrapper then keeps the wrapped function's name.",
        ),
    ]
    text = await _answer_text(
        "How do I write a decorator so the wrapper keeps the function's name?", passages
    )
    assert (
        "Use it in a decorator like this:\ndef logged(func):\n    @wraps(func)\n"
        "    def inner(*args):\n        return func(*args)\n    return inner\n"
        "The wrapper then keeps the wrapped function's name. [1]"
    ) in text
    assert "::" not in text
