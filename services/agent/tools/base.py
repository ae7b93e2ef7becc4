"""The tools the model gets: `search`, `read`, `count`, `calculate` and `submit_answer`, and the
opt-in `ask_user`.

A request may name the tools a run may use (`allowed_tools`); `submit_answer` is always offered,
`ask_user` only when named.
Their JSON schemas are generated from the same pydantic models that validate the arguments, so
what the model is told and what is accepted cannot drift apart. Search results are formatted for
the model within the Layer-1 budget: lowest-ranked results are dropped whole, a result is never cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from services.agent.calculator import FUNCTION_NAMES, MAX_EXPRESSION_CHARS
from services.agent.filters import FilterGroup
from services.agent.messages import CHARS_PER_TOKEN
from services.agent.ports import ToolSpec
from services.agent.search import DocumentCount, SearchHit, Strategy

M = TypeVar("M", bound=BaseModel)

SEARCH = "search"
READ = "read"
COUNT = "count"
CALCULATE = "calculate"
SUBMIT_ANSWER = "submit_answer"
ASK_USER = "ask_user"
MAX_QUESTION_CHARS = 500


class SearchQuery(BaseModel):
    """What to search for."""

    primary: str = Field(
        min_length=1, description="The main query; feeds keyword and semantic retrieval."
    )
    variations: list[str] = Field(
        default_factory=list,
        max_length=9,
        description="Up to 9 rephrasings; semantic retrieval only.",
    )


class SearchPlan(BaseModel):
    """Arguments of the `search` tool."""

    query: SearchQuery
    filter_groups: list[FilterGroup] = Field(
        default_factory=list,
        description="OR of groups, each an AND of conditions; combined with the caller's filter "
        "(you can narrow the search, never widen it). Empty: no extra filter.",
    )
    limit: int = Field(default=10, ge=1, le=200, description="Results to return.")
    offset: int = Field(default=0, ge=0, le=1000, description="Results to skip (paging).")
    retrieval_strategy: Strategy = Field(
        default="hybrid",
        description="semantic (meaning), keyword (exact terms, BM25) or hybrid (both, fused).",
    )


class CitationRef(BaseModel):
    """One source the answer relies on."""

    result_id: str = Field(
        min_length=1, description="Id of a search result you saw, e.g. doc-7__chunk_0."
    )


class Answer(BaseModel):
    """Arguments of the `submit_answer` tool."""

    text: str = Field(min_length=1, description="The answer; cite sources as [1], [2], ...")
    citations: list[CitationRef] = Field(
        default_factory=list,
        description="The results the answer relies on, in the order of their [n] markers.",
    )
    confidence: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="How sure you are that the results fully answer the question, from 0 to 1.",
    )
    unanswered: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="Parts of the question the results do not answer (empty when none).",
    )


MAX_NEIGHBOURS = 10
MAX_READ_CHUNKS = 200


class ReadPlan(BaseModel):
    """Arguments of the `read` tool."""

    result_id: str = Field(
        min_length=1,
        description="Id of a result you saw (the id in `### [result_id] title`); its document is "
        "read.",
    )
    scope: Literal["around", "document"] = Field(
        default="around",
        description="around: the result's chunk with `neighbours` chunks before and after it; "
        "document: the whole document from its first chunk, as far as the budget allows.",
    )
    neighbours: int = Field(
        default=2, ge=0, le=MAX_NEIGHBOURS, description="around: chunks on each side."
    )


class CountPlan(BaseModel):
    """Arguments of the `count` tool."""

    filter_groups: list[FilterGroup] = Field(
        default_factory=list,
        description="What to count, as in `search` (combined with the caller's filter). Empty: "
        "the whole collection.",
    )
    group_by: list[str] = Field(
        default_factory=list,
        max_length=3,
        description="Break the count down by up to 3 fields: source, entity_type, title, "
        "metadata.<key>, or created_at / updated_at (a date histogram).",
    )
    date_interval: Literal["year", "month", "day"] = Field(
        default="month", description="Bucket width of a created_at / updated_at breakdown."
    )
    max_buckets: int = Field(default=20, ge=1, le=100, description="Values listed per breakdown.")


class Calculation(BaseModel):
    """Arguments of the `calculate` tool."""

    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="Arithmetic over numbers you read, e.g. (1250 - 980) / 980 * 100. "
        "Operators + - * / // % ** and parentheses; functions " + ", ".join(FUNCTION_NAMES) + ".",
    )


class UserQuestion(BaseModel):
    """Arguments of the `ask_user` tool."""

    question: str = Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description="One short, specific question for the person who asked, e.g. which version "
        "or which meaning of a term they mean.",
    )


def tool_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON schema, `$ref`s inlined and titles removed, ready for any provider."""
    schema = model.model_json_schema()
    definitions = schema.pop("$defs", {})
    return _inline(schema, definitions)  # type: ignore[no-any-return]


def _inline(node: Any, definitions: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = definitions[node["$ref"].rsplit("/", 1)[-1]]
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return _inline(merged, definitions)
        return {
            k: _inline(v, definitions)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_inline(item, definitions) for item in node]
    return node


SEARCH_TOOL = ToolSpec(
    name=SEARCH,
    description="Search the collection for relevant passages. Use different retrieval strategies, "
    "rephrasings and filters to refine results.",
    parameters=tool_schema(SearchPlan),
)
SUBMIT_ANSWER_TOOL = ToolSpec(
    name=SUBMIT_ANSWER,
    description="Submit the final answer with citations. Call this when you have enough "
    "information to answer the user's query, or when further searching would not improve it.",
    parameters=tool_schema(Answer),
)
CALCULATE_TOOL = ToolSpec(
    name=CALCULATE,
    description="Evaluate an arithmetic expression exactly (sums, differences, ratios, "
    "percentages) over numbers found in the results. Use it instead of computing in your head.",
    parameters=tool_schema(Calculation),
)
READ_TOOL = ToolSpec(
    name=READ,
    description="Read more of a document a result came from: the passage around the result, or "
    "the whole document. Use it when a result is cut off, refers to text before or after it, or "
    "the answer needs the full context.",
    parameters=tool_schema(ReadPlan),
)
COUNT_TOOL = ToolSpec(
    name=COUNT,
    description="Count the documents matching a filter, optionally broken down by source, entity "
    "type, a metadata key or a date histogram. Use it for how-many / which-sources / over-time "
    "questions instead of counting search results.",
    parameters=tool_schema(CountPlan),
)
ASK_USER_TOOL = ToolSpec(
    name=ASK_USER,
    description="Ask the person who asked a clarifying question and wait for the answer. Use it "
    "only when the question is ambiguous in a way the collection cannot settle; the person may "
    "not answer.",
    parameters=tool_schema(UserQuestion),
)
OPTIONAL_TOOLS: dict[str, ToolSpec] = {
    SEARCH: SEARCH_TOOL,
    READ: READ_TOOL,
    COUNT: COUNT_TOOL,
    CALCULATE: CALCULATE_TOOL,
}
"""Every tool a run offers unless its request names others, in the order they are offered."""
OPT_IN_TOOLS: dict[str, ToolSpec] = {ASK_USER: ASK_USER_TOOL}
"""Tools offered only when a request names them (after the others)."""
TOOL_NAMES = (*OPTIONAL_TOOLS, SUBMIT_ANSWER)
"""The tools of a run whose request names none."""
REQUESTABLE_TOOL_NAMES = (*OPTIONAL_TOOLS, *OPT_IN_TOOLS, SUBMIT_ANSWER)
"""Every name a request's tool list may hold."""


def offered_tools(allowed: frozenset[str]) -> tuple[ToolSpec, ...]:
    """The tools of a run: the standard tools allowed (all when `allowed` names none of them),
    the opt-in tools named, then `submit_answer`."""
    standard = allowed & OPTIONAL_TOOLS.keys()
    chosen = [spec for name, spec in OPTIONAL_TOOLS.items() if not standard or name in allowed]
    opted_in = [spec for name, spec in OPT_IN_TOOLS.items() if name in allowed]
    return (*chosen, *opted_in, SUBMIT_ANSWER_TOOL)


class ToolArgumentsError(ValueError):
    """Tool arguments the model must correct; the message tells it how."""


def parse_arguments(model: type[M], arguments_json: str) -> M:
    """Validate a tool call's arguments, or explain to the model what to fix."""
    try:
        raw = json.loads(arguments_json or "{}")
    except json.JSONDecodeError as error:
        raise ToolArgumentsError(
            f"The arguments are not valid JSON ({error.msg} at position {error.pos}). "
            "Call the tool again with a JSON object matching its schema."
        ) from error
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in error.errors()
        )
        raise ToolArgumentsError(
            f"The arguments do not match the schema: {problems}. Fix them and call again."
        ) from error


@dataclass(frozen=True)
class FormattedResults:
    """A search tool result as the model sees it."""

    text: str
    shown: list[SearchHit]
    """The hits that fit the budget, best first; only these count as seen."""
    previewed: list[SearchHit] = field(default_factory=list)
    """The shown hits whose text was cut to a preview."""


def result_budget_chars(context_window_tokens: int, share: float) -> int:
    return int(context_window_tokens * share * CHARS_PER_TOKEN)


def format_results(
    hits: Sequence[SearchHit], total: int, *, max_chars: int, preview_chars: int = 0
) -> FormattedResults:
    """Results best first until the budget is spent; lower-ranked ones are dropped whole. With
    `preview_chars`, longer texts are cut to a preview at a word boundary (goal-aware context)."""
    blocks: list[str] = []
    used = len(_header(total, len(hits)))
    for hit in hits:
        block = result_block(hit, preview_chars)
        if used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block)
    shown = list(hits[: len(blocks)])
    text = _header(total, len(shown)) + "".join(blocks)
    if not hits:
        text += "\nNo results. Try other words, another retrieval strategy or fewer filters.\n"
    previewed = [h for h in shown if preview_chars and len(h.text) > preview_chars]
    return FormattedResults(text=text, shown=shown, previewed=previewed)


def _header(total: int, shown: int) -> str:
    return f"Found {total} results; showing {shown}.\n"


def result_block(hit: SearchHit, preview_chars: int = 0) -> str:
    """One result as the model sees it; with `preview_chars`, a longer text is cut to a preview."""
    meta = (
        f"source: {hit.source} | entity_type: {hit.entity_type} | "
        f"score: {hit.score:.4f} | url: {hit.url}"
    )
    return f"\n### [{hit.id}] {hit.title}\n{meta}\n{preview(hit.text, preview_chars)}\n"


def preview(text: str, chars: int) -> str:
    """`text` itself, or its first `chars` characters (cut at a word) and what was left out."""
    if chars <= 0 or len(text) <= chars:
        return text
    cut = text[:chars].rsplit(" ", 1)[0] or text[:chars]
    return f"{cut} … [preview: {len(text) - len(cut)} more characters]"


def full_texts(hits: Sequence[SearchHit], *, max_chars: int) -> tuple[str, list[SearchHit]]:
    """The full text of `hits` in order until the budget is spent, and the hits included."""
    header = "Full text of the results you are about to cite (they were shown as previews):\n"
    blocks: list[str] = []
    used = len(header)
    for hit in hits:
        block = result_block(hit)
        if used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block)
    return header + "".join(blocks), list(hits[: len(blocks)])


def format_read(
    document_id: str, chunks: Sequence[SearchHit], chunk_count: int, *, max_chars: int
) -> FormattedResults:
    """A read's chunks in order until the budget is spent; a chunk is never cut."""
    blocks: list[str] = []
    used = 0
    for chunk in chunks:
        block = _read_block(chunk)
        if used + len(block) > max_chars:
            break
        blocks.append(block)
        used += len(block)
    shown = list(chunks[: len(blocks)])
    if shown:
        span = f"chunks {shown[0].chunk_index}-{shown[-1].chunk_index} of {chunk_count}"
    else:
        span = f"no chunk fits the budget ({chunk_count} chunks)"
    return FormattedResults(text=f"Read {document_id}: {span}.\n" + "".join(blocks), shown=shown)


def _read_block(hit: SearchHit) -> str:
    meta = f"source: {hit.source} | entity_type: {hit.entity_type} | url: {hit.url}"
    return f"\n### [{hit.id}] {hit.title}\n{meta}\n{hit.text}\n"


def format_count(count: DocumentCount) -> str:
    """A count as the model sees it: totals, then each breakdown's `value: documents` lines."""
    bound = "" if count.exact else " at least"
    lines = [
        f"Counted{bound} {count.document_count} documents ({count.chunk_count} chunks) "
        "matching the filter."
    ]
    if not count.exact:
        lines.append("The count stopped early: these numbers are lower bounds.")
    for breakdown in count.breakdowns:
        lines.append(f"\n### Documents by {breakdown.field}")
        lines += [f"{f.value}: {f.count}" for f in breakdown.buckets]
        if breakdown.omitted:
            lines.append(f"({breakdown.omitted} more values not listed)")
    return "\n".join(lines) + "\n"
