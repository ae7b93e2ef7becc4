"""The extractive provider: an offline, deterministic and honest policy instead of an LLM.

It follows docs/agent-tool-contract.md. With `search` offered and nothing searched yet it searches
for the user's question. In THINKING mode, when that search was thin (fewer than `THIN_RESULTS`
results found), it searches again with the question's salient terms, keyword strategy; and, with
`read` offered, it reads the passage around the best result. Each of these calls comes with
one plain sentence saying what it does. Then it calls `submit_answer` with the passage sentences
most relevant to the question, citing exactly the results they came from — or says it could not
find the answer, citing nothing. Outside an agent run (no tools, no tool results) it says what it
is instead of pretending to have searched. Without tools inside a conversation it replies with the
same extractive text; asked for structured output it fills the schema deterministically (strings
with that text, numbers 0, arrays empty), except the `summary` the agent's `summarize` tool asks
for: the sentences of the given results closest to the focus, with their ids
(`extractive_summary.py`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema

from services.llm_gateway.errors import FatalProviderError
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Message,
    Role,
    StopReason,
    StreamEvent,
    ToolCall,
    ToolChoiceMode,
    Usage,
)
from services.llm_gateway.providers.extractive_summary import SUMMARY_SCHEMA_NAME, summarize
from services.llm_gateway.providers.extractive_text import (
    FULL_TEXT_HEADING,
    Passage,
    SearchOutcome,
    Sentence,
    ends_verbatim,
    join_sentences,
    parse_search_result,
    rank_sentences,
    read_question,
    read_searches,
    salient_terms,
    split_sentences,
)
from services.llm_gateway.providers.offline_stream import stream_response
from services.llm_gateway.schema_check import bounded_validator
from services.llm_gateway.tokens import count_text_tokens, estimate_request_tokens

SEARCH = "search"
READ = "read"
SUBMIT_ANSWER = "submit_answer"
THIN_RESULTS = 3
"""A THINKING-mode first search that found fewer results than this is followed by a keyword
search of the question's salient terms. A richer one is not: searching again with the salient
terms and the first results' titles only gave the sentence ranking more to pick wrongly from
(48 questions over the demo collection: 2 facts lost, 1 won, against FAST)."""
MAX_SENTENCES = 4
MIN_SENTENCES = 2
RELATIVE_CUTOFF = 0.35
"""Beyond the first `MIN_SENTENCES`, keep sentences scoring at least this share of the best."""
NOT_FOUND_TEXT = "I could not find this in the collection."
OFFLINE_INTRO = (
    "This is Quarry's offline extractive model, not a conversational language model: no API key "
    "for an LLM is configured, so I cannot chat. Ask a question about a collection through the "
    'agent (for example `quarry ask "How do I create a temporary directory?"`) and I will '
    "search it and answer with the passages I find, citing them. Set OPENAI_API_KEY or "
    "ANTHROPIC_API_KEY for a model that can converse."
)
MODEL = "extractive-v1"
CONTEXT_WINDOW_TOKENS = 1_000_000
MAX_FILLED_VALUES = 10_000
"""Most values a structured-output fill may build (nested `minItems` multiply, and a `$ref`
cycle never ends): beyond it the schema is refused as the caller's error."""
MAX_FILL_DEPTH = 64


class ExtractiveProvider:
    """See the module docstring."""

    kind = "extractive"

    def __init__(
        self,
        *,
        name: str = "extractive",
        model: str = MODEL,
        context_window_tokens: int = CONTEXT_WINDOW_TOKENS,
    ) -> None:
        self._name = name
        self._model = model
        self._context_window_tokens = context_window_tokens

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def context_window_tokens(self) -> int:
        return self._context_window_tokens

    async def generate(self, request: ChatRequest) -> ChatResponse:
        return await asyncio.to_thread(self.respond, request)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        async for event in stream_response(await asyncio.to_thread(self.respond, request)):
            yield event

    async def aclose(self) -> None:
        return None

    def respond(self, request: ChatRequest) -> ChatResponse:
        """The whole turn, computed synchronously (it is pure, so `generate` and `stream` run it
        in a worker thread: a large conversation or schema never holds up the event loop)."""
        if request.response_schema is not None:
            return self._reply(request, json.dumps(_structured(request), ensure_ascii=False))
        offered = {tool.name for tool in request.callable_tools}
        if request.tool_choice.mode is ToolChoiceMode.NONE:
            offered = set()
        elif request.tool_choice.mode is ToolChoiceMode.NAMED:
            offered &= {request.tool_choice.name}
        step = _next_call(request, offered)
        if step is not None:
            return self._reply(request, step[0], step[1])
        if not request.tools and not any(m.role is Role.TOOL for m in request.messages):
            return self._reply(request, OFFLINE_INTRO)
        return self._reply(request, compose_answer(request)[0])

    def _reply(self, request: ChatRequest, text: str, call: ToolCall | None = None) -> ChatResponse:
        output = text + (call.name + call.arguments_json if call else "")
        return ChatResponse(
            text=text,
            tool_calls=[call] if call else [],
            stop_reason=StopReason.TOOL_USE if call else StopReason.END_TURN,
            usage=Usage(
                input_tokens=estimate_request_tokens(request),
                output_tokens=count_text_tokens(output),
            ),
            model=self._model,
        )


def _next_call(request: ChatRequest, offered: set[str]) -> tuple[str, ToolCall] | None:
    """The next call and the sentence that says what it does, or None to answer in text."""
    question = read_question(request.messages)
    searches = read_searches(request.messages)
    call_id = f"extractive_{_calls_so_far(request.messages) + 1}"
    if SEARCH in offered and not searches:
        arguments = _search_arguments(question.text, "hybrid")
        return "", ToolCall(call_id, SEARCH, arguments)
    thin = len(searches) == 1 and searches[0].total < THIN_RESULTS
    if SEARCH in offered and question.thinking and thin:
        return _second_search(call_id, question.text, searches[0])
    if READ in offered and question.thinking and not read_searches(request.messages, READ):
        best = _best_passage(request)
        if best is not None:
            around = {"result_id": best.result_id, "scope": "around", "neighbours": 1}
            text = f"Reading the passage around the best result, {best.title or best.result_id}."
            return text, ToolCall(call_id, READ, json.dumps(around))
    if SUBMIT_ANSWER in offered:
        answer, citations = compose_answer(request)
        submitted = {"text": answer, "citations": [{"result_id": c} for c in citations]}
        return "", ToolCall(call_id, SUBMIT_ANSWER, json.dumps(submitted, ensure_ascii=False))
    return None


def _second_search(call_id: str, question: str, first: SearchOutcome) -> tuple[str, ToolCall]:
    """THINKING after a thin first search: the question's key terms, keyword strategy."""
    keywords = " ".join(salient_terms(question)) or question
    text = f"The first search found {first.total} results; searching the key terms: {keywords}."
    return text, ToolCall(call_id, SEARCH, _search_arguments(keywords, "keyword"))


def _best_passage(request: ChatRequest) -> Passage | None:
    question = read_question(request.messages)
    ranked = rank_sentences(question.text, _passages(request.messages), question.language)
    if not ranked:
        return None
    by_id = {p.result_id: p for p in _passages(request.messages)}
    return by_id.get(ranked[0].result_id)


def compose_answer(request: ChatRequest) -> tuple[str, list[str]]:
    """The most relevant passage sentences with `[n]` markers, and the result ids they cite."""
    question = read_question(request.messages)
    chosen = _choose(rank_sentences(question.text, _passages(request.messages), question.language))
    if not chosen:
        return NOT_FOUND_TEXT, []
    citations: list[str] = []
    parts = []
    for sentence in chosen:
        if not sentence.result_id:
            parts.append(sentence.text)
            continue
        if sentence.result_id not in citations:
            citations.append(sentence.result_id)
        marker = f"[{citations.index(sentence.result_id) + 1}]"
        gap = "\n" if ends_verbatim(sentence.text) else " "
        parts.append(f"{sentence.text}{gap}{marker}")
    return join_sentences(parts), citations


def _choose(ranked: list[Sentence]) -> list[Sentence]:
    if not ranked:
        return []
    best = ranked[0].score
    chosen = ranked[:MIN_SENTENCES]
    for sentence in ranked[MIN_SENTENCES:MAX_SENTENCES]:
        if sentence.score >= RELATIVE_CUTOFF * best:
            chosen.append(sentence)
    return chosen


def _passages(messages: tuple[Message, ...]) -> list[Passage]:
    """Passages of successful searches and reads, each in its fullest text seen (the agent's
    full-text message replaces a preview); else, for plain chat, prior assistant and tool text."""
    outcomes = [*read_searches(messages), *read_searches(messages, READ)]
    outcomes += [
        parse_search_result(m.text)
        for m in messages
        if m.role in (Role.USER, Role.TOOL) and m.text.startswith(FULL_TEXT_HEADING)
    ]
    fullest: dict[str, Passage] = {}
    for passage in (p for outcome in outcomes for p in outcome.passages):
        known = fullest.get(passage.result_id)
        if known is None or len(passage.text) > len(known.text):
            fullest[passage.result_id] = passage
    if fullest:
        return list(fullest.values())
    return [
        Passage(result_id="", text=m.text)
        for m in messages
        if m.role in (Role.ASSISTANT, Role.TOOL) and m.text and not m.is_error
    ]


def _calls_so_far(messages: tuple[Message, ...]) -> int:
    return sum(len(m.tool_calls) for m in messages if m.role is Role.ASSISTANT)


def _search_arguments(query: str, strategy: str) -> str:
    arguments = {
        "query": {"primary": query, "variations": []},
        "filter_groups": [],
        "limit": 10,
        "offset": 0,
        "retrieval_strategy": strategy,
    }
    return json.dumps(arguments, ensure_ascii=False)


def _structured(request: ChatRequest) -> Any:
    """The summary the contract names (`extractive_summary`), else a deterministic fill; either
    checked against the response schema."""
    schema = request.response_schema or {}
    if request.response_schema_name == SUMMARY_SCHEMA_NAME:
        value = summarize(request)
    else:
        value = _Filler(_summary(request), schema).value_for(schema, 0)
    try:
        bounded_validator(schema).validate(value)
    except jsonschema.ValidationError as error:
        raise FatalProviderError(
            f"extractive cannot fill this schema: {error.message}", caller_error=True
        ) from None
    return value


def _summary(request: ChatRequest) -> str:
    """Relevant sentences of the conversation's tool results and assistant text."""
    text, _ = compose_answer(request)
    if text != NOT_FOUND_TEXT:
        return text
    sources = [
        m.text
        for m in request.messages
        if m.role in (Role.ASSISTANT, Role.TOOL) and m.text and not m.is_error
    ]
    sentences = [s for source in sources for s in split_sentences(source)]
    return join_sentences(sentences[:MAX_SENTENCES]) or NOT_FOUND_TEXT


class _Filler:
    """Builds the value, counting what it builds: at most `MAX_FILLED_VALUES` values, nested at
    most `MAX_FILL_DEPTH` deep (a `$ref` cycle through required values never bottoms out)."""

    def __init__(self, summary: str, root: dict[str, Any]) -> None:
        self.summary = summary
        self.root = root
        self.filled = 0

    def value_for(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict):  # `true`, `{}`: anything goes
            schema = {}
        self.filled += 1
        if self.filled > MAX_FILLED_VALUES or depth > MAX_FILL_DEPTH:
            raise FatalProviderError(
                f"extractive cannot fill this schema: its smallest value has more than "
                f"{MAX_FILLED_VALUES} values or nests deeper than {MAX_FILL_DEPTH} levels "
                "(the limits)",
                caller_error=True,
            )
        if "$ref" in schema:
            return self.value_for(_resolve(schema["$ref"], self.root), depth + 1)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf", "allOf"):
            if schema.get(key):
                return self.value_for(schema[key][0], depth + 1)
        kind = schema.get("type", "object" if "properties" in schema else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object":
            properties = schema.get("properties", {})
            return {name: self.value_for(sub, depth + 1) for name, sub in properties.items()}
        if kind == "array":
            count = int(schema.get("minItems", 0))
            return [self.value_for(schema.get("items", {}), depth + 1) for _ in range(count)]
        if kind in ("integer", "number"):
            return max(0, schema.get("minimum", 0))
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        limit = schema.get("maxLength")
        return self.summary[:limit] if isinstance(limit, int) else self.summary


def _resolve(reference: str, root: dict[str, Any]) -> dict[str, Any]:
    node: Any = root
    for part in [p for p in reference.removeprefix("#").split("/") if p]:  # "#": the root
        node = node.get(part, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, dict) else {}
