"""From a submitted answer to the final response: citations checked against what was seen,
results ordered cited-first, and the honest fallback when the model never answered."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from services.agent.run import Citation, FinalAnswer
from services.agent.search import SearchHit
from services.agent.tools import Answer

_MARKER = re.compile(r"\[(\d{1,3})\]")


class SeenResults:
    """Every result shown to the model in this run, by id, with its best score."""

    def __init__(self) -> None:
        self._hits: dict[str, SearchHit] = {}

    def add(self, hits: Sequence[SearchHit]) -> None:
        for hit in hits:
            known = self._hits.get(hit.id)
            if known is None or hit.score > known.score:
                self._hits[hit.id] = hit

    def __contains__(self, result_id: object) -> bool:
        return result_id in self._hits

    def __len__(self) -> int:
        return len(self._hits)

    @property
    def by_id(self) -> Mapping[str, SearchHit]:
        return self._hits

    def best(self) -> list[SearchHit]:
        return sorted(self._hits.values(), key=lambda h: h.score, reverse=True)


def unknown_citations(answer: Answer, seen: SeenResults) -> list[str]:
    return [c.result_id for c in answer.citations if c.result_id not in seen]


def accept_answer(answer: Answer, seen: SeenResults) -> FinalAnswer:
    """Keep only citations of seen results (first occurrence), renumbering the [n] markers."""
    kept: list[str] = []
    new_number: dict[int, int | None] = {}
    for position, citation in enumerate(answer.citations, start=1):
        result_id = citation.result_id
        if result_id not in seen:
            new_number[position] = None
            continue
        if result_id not in kept:
            kept.append(result_id)
        new_number[position] = kept.index(result_id) + 1
    text = _renumber(answer.text, new_number) if new_number else answer.text
    return FinalAnswer(
        text=text,
        citations=tuple(_citation(seen.by_id[i]) for i in kept),
        confidence=answer.confidence,
        unanswered=tuple(answer.unanswered),
    )


def _renumber(text: str, new_number: Mapping[int, int | None]) -> str:
    def replace(match: re.Match[str]) -> str:
        old = int(match.group(1))
        if old not in new_number:
            return match.group(0)
        number = new_number[old]
        return "" if number is None else f"[{number}]"

    return _MARKER.sub(replace, text)


def _citation(hit: SearchHit) -> Citation:
    return Citation(result_id=hit.id, title=hit.title, url=hit.url, web=hit.web is not None)


def final_results(
    answer: FinalAnswer, seen: SeenResults, limit: int, *, found: SeenResults | None = None
) -> tuple[SearchHit, ...]:
    """Cited results in citation order, then the others seen by best score, then the others
    `found` (returned by the searches but not shown to the model), up to `limit`."""
    cited = [seen.by_id[c.result_id] for c in answer.citations]
    cited_ids = {h.id for h in cited}
    others = [h for h in seen.best() if h.id not in cited_ids]
    listed = cited_ids | {h.id for h in others}
    unseen = [h for h in (found.best() if found else []) if h.id not in listed]
    return tuple([*cited, *others, *unseen][:limit])


_ID_MARKER = re.compile(r"\[([^\[\]\s]+__chunk_\d+)\]")


def answer_from_text(text: str, seen: SeenResults) -> FinalAnswer:
    """A plain-text answer (a model turn without `submit_answer`), its citations validated: a
    `[result_id]` marker naming a seen result becomes a citation (numbered in order of first
    mention); one naming an unseen result, and a bare `[n]` (no citation list to check it
    against), is removed."""
    kept: list[str] = []

    def cite(match: re.Match[str]) -> str:
        result_id = match.group(1)
        if result_id not in seen:
            return ""
        if result_id not in kept:
            kept.append(result_id)
        return f"[{kept.index(result_id) + 1}]"

    cited = _ID_MARKER.sub(cite, text)
    cleaned = re.sub(r" ?\[\d{1,3}\]", "", cited) if not kept else cited
    return FinalAnswer(
        text=cleaned.strip(), citations=tuple(_citation(seen.by_id[i]) for i in kept)
    )


def fallback_answer(
    seen: SeenResults, *, top: int = 3, stopped_by: str = "", searched: bool = True
) -> FinalAnswer:
    """What the agent says when the model never submitted an answer: nothing invented.

    `stopped_by` names the limit that ended the run (e.g. `token budget (100 tokens)`); the
    answer then says so rather than suggesting the collection lacks the answer. `searched`
    False: no search ran, so the answer claims none."""
    best = seen.best()[:top]
    if stopped_by:
        stopped = f"The run stopped at its {stopped_by} before the model answered. "
        if not best:
            return FinalAnswer(
                text=stopped + "No results were read, so this says nothing about whether the "
                "collection holds the answer: ask again with a larger budget."
            )
        listed = "; ".join(f"[{n}] {h.title or h.id}" for n, h in enumerate(best, start=1))
        return FinalAnswer(
            text=stopped + f"The most relevant results read so far: {listed}.",
            citations=tuple(_citation(h) for h in best),
        )
    if not best and not searched:
        return FinalAnswer(
            text="The model gave no answer and no search was run, so this says nothing about "
            "whether the collection holds the answer: ask again."
        )
    if not best:
        return FinalAnswer(
            text="The search did not produce an answer: no relevant results were found."
        )
    listed = "; ".join(f"[{n}] {hit.title or hit.id}" for n, hit in enumerate(best, start=1))
    return FinalAnswer(
        text="The search did not produce a conclusive answer. "
        f"The most relevant results found were: {listed}.",
        citations=tuple(_citation(h) for h in best),
    )
