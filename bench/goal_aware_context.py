"""Tokens goal-aware context saves on a scripted THINKING run.

The same scripted conversation (4 searches of 5 long results each, then an answer citing one
result) runs with results in full (`preview_chars=0`) and with previews (`--preview-chars`, the
default setting); the characters of every model request are summed and turned into tokens at the
agent's 4 characters a token.

    python -m bench.goal_aware_context [--searches 4] [--preview-chars 500]

Prints JSON and writes bench/results/goal_aware_context.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from services.agent.config import LoopSettings
from services.agent.loop import AgentLoop
from services.agent.messages import CHARS_PER_TOKEN, total_chars
from services.agent.run import Mode, RunRequest
from services.agent.testing import ScriptedModel, answer_call, search_call, turn
from tests.agent.fake_search import FakeDocument, FakeSearch

RESULTS = Path(__file__).parent / "results" / "goal_aware_context.json"
DOCUMENTS = [
    FakeDocument(
        f"doc{i}__chunk_0",
        f"Topic {i}",
        f"topic{i} guide. " + " ".join(f"detail{i}_{n}" for n in range(150)),
    )
    for i in range(10)
]


async def _tokens_sent(searches: int, preview_chars: int) -> int:
    model = ScriptedModel(
        [
            *(
                turn(f"search {n}", search_call(f"topic{n} guide", limit=5))
                for n in range(searches)
            ),
            turn("", answer_call("Topic 0 [1].", ["doc0__chunk_0"])),
            turn("", answer_call("Topic 0, checked [1].", ["doc0__chunk_0"])),
        ]
    )
    loop = AgentLoop(
        model,
        FakeSearch(DOCUMENTS, collection="bench"),
        settings=LoopSettings(preview_chars=preview_chars),
    )
    await loop.run(
        RunRequest(collection="bench", query="What does topic 0 say?", mode=Mode.THINKING)
    )
    return sum(total_chars(r.messages) for r in model.requests) // CHARS_PER_TOKEN


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=4)
    parser.add_argument("--preview-chars", type=int, default=LoopSettings().preview_chars)
    args = parser.parse_args()
    full = asyncio.run(_tokens_sent(args.searches, 0))
    previews = asyncio.run(_tokens_sent(args.searches, args.preview_chars))
    report = {
        "bench": "goal_aware_context_tokens",
        "searches": args.searches,
        "preview_chars": args.preview_chars,
        "input_tokens_full_text": full,
        "input_tokens_goal_aware": previews,
        "saved_tokens": full - previews,
        "saved_share": round((full - previews) / full, 3),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
