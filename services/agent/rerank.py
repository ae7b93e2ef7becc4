"""A search's first hits judged by a model before the model of the run sees them (opt-in:
`agent.loop.rerank_route`).

The embedding model and BM25 find the answering passage among the first ten for most questions,
but often not first: a module's overview or a sibling function ranks above the entry asked for
(`bench/first_search.py`). Telling them apart takes reading the question and the passage
together. Each of the first `rerank_candidates` hits is sent to the gateway's `rerank_route` with
the query, "does this passage answer it? yes or no", asking for the first token's
log-probabilities. A hit's score is how much likelier the model makes "yes" than "no"
(log P(yes) - log P(no), over the spellings of each among the reported tokens), and the judged
hits are ordered by it. A provider that reports no log-probabilities (Anthropic) is read from its
reply alone: yes before no, in the engine's order among each. Pointwise, not a list to order: a
small local model asked to pick from a list picks the first-listed hit most of the time (32 of
48 demo questions, fewer right at rank 1 than the engine), and its bare yes/no says yes to most
hits (a median 7 of 10), so only the margin orders them: measured with Qwen2.5-Coder-1.5B in
session 15 (issue 31's closing note); what this module does, in `bench/rerank_questions.py`.

A judgment that fails (the gateway or its provider down, a reply neither yes nor no) leaves that
hit at its place: the search never fails because its reranking did. The caller's deadline still
ends the run.

Off by default: with the local 1.5B model it lifted the demo's answering entries into the top 3
(0.562 -> 0.750) but lost on held-out collections (Cranfield nDCG@10 -0.031 within noise,
SciFact's claims -0.183: a claim is not "answered"), and costs ten model calls a search.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

from services.agent.aside import call_aside
from services.agent.messages import system, user
from services.agent.ports import ModelClient, ModelRequest, ModelResponse, TokenUsage
from services.agent.run import Deadline
from services.agent.search import SearchHit

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


TOP_LOGPROBS = 20
"""First tokens asked for: enough that both answers' spellings are among them."""


def judgment_score(reply: ModelResponse) -> float | None:
    """How much likelier the model makes yes than no: log P(yes) - log P(no) over the reported
    first tokens that read as either (a side not among them counts as the least likely reported
    token); without log-probabilities, +1 for a yes reply and -1 for a no. None: neither."""
    sides: dict[bool, list[float]] = {True: [], False: []}
    for token, logprob in reply.first_token_logprobs:
        side = verdict(token)
        if side is not None and _REPLY.fullmatch(token.strip().lower()):
            sides[side].append(logprob)
    if sides[True] or sides[False]:
        floor = min(logprob for _, logprob in reply.first_token_logprobs)
        return _logsumexp(sides[True] or [floor]) - _logsumexp(sides[False] or [floor])
    said = verdict(reply.text)
    return None if said is None else (1.0 if said else -1.0)


def _logsumexp(values: list[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


@dataclass(frozen=True)
class Reranked:
    """A page after its first hits were judged."""

    hits: tuple[SearchHit, ...]
    judged: int
    """Hits the model judged (yes or no)."""
    answering: int
    """Hits judged likelier to answer than not (score above 0)."""
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

    async def judge(hit: SearchHit) -> float | None:
        request = ModelRequest(
            route=route,
            messages=(system(JUDGE_SYSTEM), user(judge_text(query, hit, max_chars))),
            tools=(),
            temperature=0.0,
            max_output_tokens=1,
            top_logprobs=TOP_LOGPROBS,
        )
        async with gate:
            reply = await call_aside(
                model,
                request,
                deadline=deadline,
                failure="rerank judgment failed; the hit keeps its place",
                log_fields={"hit": hit.id},
            )
        if reply is None:
            return None
        usage.add(reply.usage)
        return judgment_score(reply)

    tasks = [asyncio.ensure_future(judge(h)) for h in first]
    try:
        scores = await asyncio.gather(*tasks)
    except BaseException:  # the deadline (or a fault): the judgments still running are dropped
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    judged = [i for i, score in enumerate(scores) if score is not None]
    ordered = sorted(judged, key=lambda i: (-(scores[i] or 0.0), i))
    placed = list(first)  # a hit without a judgment keeps its place
    for place, i in zip(judged, ordered, strict=True):
        placed[place] = first[i]
    return Reranked(
        hits=(*placed, *hits[candidates:]),
        judged=len(judged),
        answering=sum(1 for score in scores if score is not None and score > 0),
        failed=len(first) - len(judged),
        usage=usage,
        duration_ms=int((time.perf_counter() - started) * 1000),
    )
