"""Layer 1: results as the model sees them, within a budget. The lowest-ranked results are dropped
whole and a result is never cut, except to a preview (goal-aware context)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from services.agent.messages import CHARS_PER_TOKEN
from services.agent.search import SearchHit


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
