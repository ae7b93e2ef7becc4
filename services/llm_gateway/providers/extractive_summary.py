"""The extractive provider's summary (docs/agent-tool-contract.md, "GenerateStructured: summary").

Asked for structured output named `summary`, it reads the focus (`## Focus`) and the results
(`### [result_id] title` blocks under `## Results`) of the last user message and answers with the
sentences of those results closest to the focus (BM25 over sentences, as its answers are built,
words compared in the language `## Collection` names), best first, each with the id of the result
it came from:

    {"summary": "<the sentences, joined>",
     "points": [{"text": "<one sentence>", "result_ids": ["<its result id>"]}, ...]}

Deterministic, and honest when nothing matches: no points, and a summary that says so.
"""

from __future__ import annotations

from typing import Any

from services.llm_gateway.model import ChatRequest, Role
from services.llm_gateway.providers.extractive_text import (
    Sentence,
    join_sentences,
    keyword_language,
    parse_search_result,
    rank_sentences,
    sections,
    split_at_last_section,
)

SUMMARY_SCHEMA_NAME = "summary"
"""The `schema_name` of GenerateStructured that asks for this summary."""
MAX_POINTS = 6
MIN_POINTS = 2
RELATIVE_CUTOFF = 0.35
"""Beyond the first `MIN_POINTS`, keep sentences scoring at least this share of the best."""


def summarize(request: ChatRequest) -> dict[str, Any]:
    """The summary of the last user message's results under its focus."""
    users = [m for m in request.messages if m.role is Role.USER]
    head, results = split_at_last_section(users[-1].text if users else "", "Results")
    parts = sections(head)
    focus = " ".join(parts.get("focus", "").split())
    passages = list(parse_search_result(results).passages)
    language = keyword_language(parts.get("collection", ""))
    chosen = _choose(rank_sentences(focus, passages, language))
    if not chosen:
        shown = focus or "(no focus given)"
        return {"summary": f"No sentence of these results matches the focus: {shown}", "points": []}
    return {
        "summary": join_sentences([s.text for s in chosen]),
        "points": [{"text": s.text, "result_ids": [s.result_id]} for s in chosen],
    }


def _choose(ranked: list[Sentence]) -> list[Sentence]:
    if not ranked:
        return []
    best = ranked[0].score
    return ranked[:MIN_POINTS] + [
        s for s in ranked[MIN_POINTS:MAX_POINTS] if s.score >= RELATIVE_CUTOFF * best
    ]
