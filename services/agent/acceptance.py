"""Answer acceptance and refinement: what the model has seen (what it may cite), the answers it
submits checked against that, sent back when they cite unseen results, cite results it saw only
as previews (goal-aware context), or are unsure while there is room to refine; and, when the run
ends without an accepted answer, the answer it ends with (a draft, the model's plain text, or an
honest fallback)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.agent.answers import (
    SeenResults,
    accept_answer,
    answer_from_text,
    fallback_answer,
    unknown_citations,
)
from services.agent.config import LoopSettings
from services.agent.prompt import FORCE_ANSWER
from services.agent.run import FinalAnswer, StopReason
from services.agent.search import SearchHit
from services.agent.tools import ToolOutcome
from services.agent.tools.results import full_texts
from services.agent.tools.submit_answer import Answer


@dataclass(frozen=True)
class Review:
    """What becomes of one submitted answer: accepted (`answer`), or sent back (`reply`)."""

    answer: FinalAnswer | None = None
    reply: str = ""
    """The tool result that sends the answer back; empty when accepted."""
    is_error: bool = False
    cited: tuple[str, ...] = ()
    """The ids the answer cites (after acceptance)."""


class AnswerDesk:
    """One run's results seen and answers received."""

    def __init__(self, settings: LoopSettings) -> None:
        self.settings = settings
        self.seen = SeenResults()
        """Every result shown to the model: what it may cite."""
        self.found = SeenResults()
        """Every result the searches returned, shown or not: fills the run's `limit`."""
        self.previews: dict[str, SearchHit] = {}
        """Results shown as previews and not yet given in full (goal-aware context)."""
        self.full_text_given = False
        self.citations_rejected = False
        self.refused = 0
        """Answer submissions sent back (invalid arguments, unseen citations)."""
        self.refinements = 0
        self.draft: FinalAnswer | None = None
        """An answer sent back for refinement; it stands if no better one comes."""
        self.plain_text = ""
        """The model's last turn of text without a tool call: the answer if none is submitted."""

    def saw(self, outcome: ToolOutcome) -> None:
        """What a tool call showed: citable from now on."""
        self.seen.add(outcome.shown)
        self.previews.update({h.id: h for h in outcome.previewed})
        for result_id in outcome.read_in_full:  # read whole: no full-text round needed
            self.previews.pop(result_id, None)
        self.found.add(outcome.found)

    def review(
        self,
        answer: Answer,
        *,
        may_refine: bool,
        room_to_refine: Callable[[], bool],
        budget_chars: int,
        thinking: bool,
    ) -> Review:
        """Accept `answer`, or say why it goes back: unseen citations (once; then they are
        dropped), cited previews (their full text, once), low confidence (refinement rounds,
        THINKING only, while `room_to_refine`)."""
        unknown = unknown_citations(answer, self.seen)
        if unknown and not self.citations_rejected:
            self.citations_rejected = True
            self.refused += 1
            return Review(
                reply="These citations name results you have not seen in this conversation: "
                + ", ".join(unknown)
                + ". Cite only ids shown in search results (`### [result_id] title`) and "
                "call submit_answer again.",
                is_error=True,
            )
        accepted = accept_answer(answer, self.seen)
        cited = tuple(c.result_id for c in accepted.citations)
        cited_previews = [self.previews[i] for i in cited if i in self.previews]
        if may_refine and cited_previews and not self.full_text_given:
            self.full_text_given = True
            return Review(reply=self.give_full_text(cited_previews, budget_chars), cited=cited)
        if may_refine and self._refine(accepted, thinking=thinking, room=room_to_refine):
            self.draft = accepted
            return Review(reply=_refinement_request(accepted), cited=cited)
        return Review(answer=accepted, cited=cited)

    def give_full_text(self, hits: list[SearchHit], budget_chars: int) -> str:
        """The full text of `hits` within the Layer-1 budget; they are previews no more."""
        return self._in_full(hits, budget_chars)[0]

    def _in_full(self, hits: list[SearchHit], budget_chars: int) -> tuple[str, list[SearchHit]]:
        text, given = full_texts(hits, max_chars=budget_chars)
        for hit in given:
            self.previews.pop(hit.id, None)
        return text, given

    def best_previews(self) -> list[SearchHit]:
        return sorted(self.previews.values(), key=lambda h: h.score, reverse=True)

    def before_answering(self, stop_reason: StopReason, budget_chars: int) -> list[str]:
        """What the answer-only call is told first: the best previews in full (it composes the
        answer from them), then, when a limit ended the search phase, to answer now."""
        given = self._in_full(self.best_previews(), budget_chars) if self.previews else None
        told = [given[0]] if given and given[1] else []
        if stop_reason is not StopReason.ANSWERED:
            told.append(FORCE_ANSWER)
        return told

    def _refine(self, answer: FinalAnswer, *, thinking: bool, room: Callable[[], bool]) -> bool:
        """Whether a low-confidence THINKING answer gets one more round (budget left, rounds
        left): self-evaluation, bounded so it never loops."""
        low = answer.confidence is not None and answer.confidence < self.settings.refine_below
        if not (thinking and low and room()):
            return False
        if self.refinements >= self.settings.refinement_rounds:
            return False
        self.refinements += 1
        return True

    def settle(
        self, stop_reason: StopReason, *, searched: bool, budget_limit: str = ""
    ) -> tuple[FinalAnswer, StopReason]:
        """The answer of a run that ended without an accepted one: the refinement draft, else
        the model's plain text, else the honest fallback (`budget_limit`: the budget stopped
        it)."""
        if self.draft is not None:
            return self.draft, StopReason.ANSWERED
        if self.plain_text:
            return answer_from_text(self.plain_text, self.seen), stop_reason
        if budget_limit:
            return fallback_answer(self.seen, stopped_by=budget_limit), StopReason.BUDGET_EXHAUSTED
        return fallback_answer(self.seen, searched=searched), StopReason.FALLBACK_ANSWER

    def too_long(self) -> tuple[FinalAnswer, StopReason]:
        """The answer of a run whose conversation no longer fits the model."""
        if self.draft is not None:
            return self.draft, StopReason.ANSWERED
        return fallback_answer(self.seen), StopReason.FALLBACK_ANSWER


def _refinement_request(answer: FinalAnswer) -> str:
    missing = "; ".join(answer.unanswered) or "not stated"
    return (
        f"Answer received with confidence {answer.confidence:.2f}; unanswered parts: {missing}. "
        "You have one refinement round: search (or read) for what is missing, then call "
        "submit_answer again. If nothing better turns up, submit the same answer; it stands."
    )
