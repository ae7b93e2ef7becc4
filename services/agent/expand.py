"""A search's query expanded by a model before it is sent (opt-in: `agent.loop.expand_queries`):
a hypothetical answer added to the dense side (HyDE, Gao et al. 2022, "Precise Zero-Shot Dense
Retrieval without Relevance Labels").

A question and the passage that answers it are phrased apart ("How do I make a scratch folder
that cleans itself up?" against "tempfile.TemporaryDirectory() ... removed on completion of the
context"), and the embedding model places them apart too; a passage a model writes to answer the
question is phrased like the documents, right or wrong in its details. The gateway's
`expand_route` (empty: the run's own route) is asked, at temperature 0, for a short passage
answering the query (at most `expand_max_tokens` tokens), and the search is sent with the query
followed by that passage as one more of its variations (in place of the model's ninth when it gave
all nine, the search tool's bound: `tools/search.py`). The keyword side keeps the query alone
(the variations are dense only), and the dense side scores each chunk by its best cosine over
the query and its variations, so a chunk the query alone finds is still found.

Measured in session 16 with the local Qwen2.5-Coder-1.5B (`bench/expand_questions.py`, issue
31's closing note, the README's measured performance): on the 48 demo questions the first HYBRID
search's answering entry reaches the top 3 far more often (0.562 -> 0.708; rank 1 0.458 -> 0.500,
within noise; SEMANTIC rank 1 0.417 -> 0.625); held out, on nine collections, HYBRID nDCG@10
moved -0.009 .. +0.022, 5 down and 4 up, all but one within noise (Debian +0.022). On 150
demo questions written afterwards and held out (session 17) the first HYBRID search's MRR@10
rose 0.682 -> 0.714 (beyond noise) and rank 1 0.580 -> 0.613 (within noise). Off by default: it
costs a model call per distinct query and its rank-1 gain is within noise on the held-out
questions, with nothing gained on the held-out collections with this model.
The form was chosen in a lab on the demo questions, Cranfield and SciFact before the other
collections were measured: the passage alone as the dense query gained more on the demo (rank 1
0.542) and lost more on Cranfield (-0.017); its vector summed with the query's, or the query and
passage as the only dense query, lost more on Cranfield too (-0.009); the passage added to the
keyword query (query2doc) lost on Cranfield's keyword side (-0.027).

A failed expansion leaves the search as the model asked for it: the gateway or its provider down,
an empty reply, or a reply from the offline `extractive` provider (e.g. the route's fallback),
which cannot write a passage. A search never fails because its expansion did: one the search
tool refuses for the passage's variation (a search tool configured with a smaller bound on a
query than the agent's) is sent again as asked. The caller's deadline still ends the run. A
query is expanded once a run: a second page, the same query again, or a search of it running
beside the one that asked (a turn's parallel searches), reuses it, so pages of one query are
pages of one ranking.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from services.agent.aside import call_aside
from services.agent.messages import system, user
from services.agent.ports import ModelClient, ModelRequest, TokenUsage
from services.agent.run import Deadline

log = logging.getLogger(__name__)

EXTRACTIVE = "extractive"
"""The gateway's offline provider kind: it quotes search results and cannot write a passage (it
answers a bare query with its introduction), so its reply is not searched."""

EXPAND_SYSTEM = (
    "You write a short passage, as it would appear in a document, that answers a search query. "
    "Write only the passage, no preamble."
)


def expansion_text(query: str, passage: str) -> str:
    """The variation searched: the query, then the passage with its whitespace collapsed."""
    return f"{query}\n{' '.join(passage.split())}"


@dataclass(frozen=True)
class Expansion:
    """What a query's expansion gave."""

    passage: str
    """The model's passage (whitespace collapsed); empty when the expansion failed."""
    usage: TokenUsage
    """Tokens the expansion spent."""
    duration_ms: int
    refused: bool = False
    """The search tool refused the query with the passage (e.g. a `limits.query_chars` below the
    agent's `loop.max_query_chars`): the search went as asked, and so do the query's next."""

    @property
    def failed(self) -> bool:
        """No passage was searched: none was written, or the search tool refused it."""
        return not self.passage or self.refused


class RunExpansions:
    """A run's query expansions, by query: a query is expanded once a run, and a search of a
    query whose passage is being written (a turn's parallel searches) waits for that one."""

    def __init__(self) -> None:
        self._written: dict[str, Expansion] = {}
        self._writing: dict[str, asyncio.Future[Expansion | None]] = {}

    async def of(
        self, query: str, write: Callable[[], Awaitable[Expansion | None]]
    ) -> tuple[Expansion | None, bool]:
        """`query`'s expansion, written by `write` unless the run has it or is writing it, and
        whether it was the run's already (no model call); None: `write` asked for none."""
        earlier = self._written.get(query)
        if earlier is not None:
            return earlier, True
        writing = self._writing.get(query)
        if writing is not None:
            written = await asyncio.shield(writing)
            return written, written is not None
        # registered before the first await: a search beside this one finds it
        writing = asyncio.ensure_future(write())
        self._writing[query] = writing
        try:
            expansion = await writing
        finally:
            del self._writing[query]
        if expansion is not None:
            self._written[query] = expansion
        return expansion, False

    def refused(self, query: str, expansion: Expansion) -> Expansion:
        """`expansion` refused by the search tool: the query's next searches go as asked."""
        refused = replace(expansion, refused=True)
        self._written[query] = refused
        return refused


async def expand(
    query: str,
    *,
    model: ModelClient,
    route: str,
    max_output_tokens: int,
    deadline: Deadline,
) -> Expansion:
    """A passage answering `query`, written by `route`'s model (see the module docstring)."""
    started = time.perf_counter()
    request = ModelRequest(
        route=route,
        messages=(system(EXPAND_SYSTEM), user(f"Query: {query}")),
        tools=(),
        temperature=0.0,
        max_output_tokens=max_output_tokens,
    )
    usage = TokenUsage()
    passage = ""
    reply = await call_aside(
        model,
        request,
        deadline=deadline,
        failure="query expansion failed; the search goes as asked",
        log_fields={},
    )
    if reply is not None:
        usage.add(reply.usage)
        if reply.provider_kind == EXTRACTIVE:
            log.info(
                "query expansion answered by the extractive provider, which writes no passage; "
                "the search goes as asked",
                extra={"route": route, "provider": reply.provider},
            )
        else:
            passage = " ".join(reply.text.split())
    return Expansion(passage, usage, int((time.perf_counter() - started) * 1000))
