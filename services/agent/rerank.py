"""A search's first hits judged by a model before the model of the run sees them (opt-in:
`agent.loop.rerank_route`).

The embedding model and BM25 find the answering passage among the first ten for most questions,
but often not first: a module's overview or a sibling function ranks above the entry asked for
(`bench/first_search.py`). Telling them apart takes reading the question and the passage
together. Each of the first `rerank_candidates` hits is sent to the gateway's `rerank_route` with
the query: "does this passage answer it? yes or no". The hits judged yes come first, in the
engine's order among themselves, then the others, then the hits beyond the candidates. A
pointwise yes/no is asked, not a list to order: it works with any provider of a route (no
log-probabilities needed) and, on a small local model, does not favour the first-listed hit as a
list does (`bench/rerank_questions.py`).

A judgment that fails (the gateway or its provider down, a reply neither yes nor no) leaves that
hit where the engine put it: the search never fails because its reranking did. The caller's
deadline still ends the run.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from services.agent.messages import system, user
from services.agent.ports import ModelClient, ModelRequest, TokenUsage
from services.agent.run import Deadline
from services.agent.search import SearchHit
from services.common.errors import DeadlineExceeded, QuarryError

log = logging.getLogger(__name__)

JUDGE_SYSTEM = "You judge whether a passage answers a search query. Reply with yes or no only."
_REPLY = re.compile(r"[a-z]+")


def judge_text(query: str, hit: SearchHit, max_chars: int) -> str:
    """The user message of one judgment: the query, then the passage's title and text (its
    first `max_chars` characters, whitespace collapsed), then the question."""
    text = " ".join(hit.text.split())[:max_chars]
    return (
        f"Query: {query}\n\nPassage: {hit.title}\n{text}\n\n"
        "Does this passage answer the query? Reply yes or no."
    )


def verdict(reply: str) -> bool | None:
    """True for a reply starting with yes, False for no, None for anything else."""
    word = _REPLY.match(reply.strip().lower())
    if word is None:
        return None
    return {"yes": True, "no": False}.get(word.group())


@dataclass(frozen=True)
class Reranked:
    """A page after its first hits were judged."""

    hits: tuple[SearchHit, ...]
    judged: int
    """Hits the model judged (yes or no)."""
    answering: int
    """Hits judged yes (moved ahead of the others)."""
    failed: int
    """Judgments that failed or could not be read (those hits kept their place)."""
    usage: TokenUsage
    """Tokens the judgments spent."""
    duration_ms: int


async def rerank(
    query: str,
    hits: Sequence[SearchHit],
    *,
    model: ModelClient,
    route: str,
    candidates: int,
    max_chars: int,
    parallel: int,
    deadline: Deadline,
) -> Reranked:
    """`hits` with the first `candidates` of them judged (see the module docstring)."""
    started = time.perf_counter()
    first = list(hits[:candidates])
    gate = asyncio.Semaphore(parallel)
    usage = TokenUsage()

    async def judge(hit: SearchHit) -> bool | None:
        request = ModelRequest(
            route=route,
            messages=(system(JUDGE_SYSTEM), user(judge_text(query, hit, max_chars))),
            tools=(),
            temperature=0.0,
            max_output_tokens=3,
        )
        async with gate:
            try:
                reply = await model.generate(request, remaining_s=deadline.remaining())
            except DeadlineExceeded:
                raise
            except QuarryError as error:
                log.warning(
                    "rerank judgment failed; the hit keeps its place",
                    extra={"hit": hit.id, "route": route, "error": error.message[:200]},
                )
                return None
        usage.input_tokens += reply.usage.input_tokens
        usage.output_tokens += reply.usage.output_tokens
        usage.cache_read_tokens += reply.usage.cache_read_tokens
        usage.cache_write_tokens += reply.usage.cache_write_tokens
        usage.cost_usd += reply.usage.cost_usd
        return verdict(reply.text)

    verdicts = await asyncio.gather(*(judge(h) for h in first))
    ahead = [h for h, v in zip(first, verdicts, strict=True) if v is True]
    behind = [h for h, v in zip(first, verdicts, strict=True) if v is not True]
    return Reranked(
        hits=(*ahead, *behind, *hits[candidates:]),
        judged=sum(v is not None for v in verdicts),
        answering=len(ahead),
        failed=sum(v is None for v in verdicts),
        usage=usage,
        duration_ms=int((time.perf_counter() - started) * 1000),
    )
