"""GPE's fact-checking evidence as a BEIR-layout retrieval collection, for evaluation only.

    pip download --no-deps gpe-eval==0.2.2 -d /tmp/gpe && unzip /tmp/gpe/*.whl -d /tmp/gpe
    python bench/gpe_collection.py /tmp/gpe/gpe/data/gpe.jsonl OUT_DIR

GPE (PyPI `gpe-eval` 0.2.2, MIT) is a fact-checking benchmark of 638 claims made in 2025-2026
(politics, medicine, science, history, celebrity gossip, everyday life), each with the evidence an
assessor found for it on the Web, PolitiFact, Wikipedia and academic sources, and with "related
distractors": pages found by searching the claim's entities (the same people, places, bodies)
that say nothing about the claim. So the collection is news and web pages about named entities,
where many pages share a claim's names and only a few answer it, written after MiniLM was
trained: a kind neither SciFact nor the classic collections have.

* corpus: every benign evidence page and every related distractor, once (9,025 pages, 1,544 of
  them shared between claims; 3 distractors have no text and are dropped: 9,022). A page is
  `{title, text}`: the text is its extracted passages, or, for a page that has none (most
  distractors), its search-result summary; of two copies of one page, the longer text is kept.
* queries: each claim's text (`original_claim`); subclaims are not used.
* judgements: a claim's benign evidence pages, gain 1 (5,833, a median of 8 per claim).
  Distractors are never relevant.
* Not used: the poisoned evidence (passages fabricated to be retrieved for a claim and mislead
  its checker). Whether such a passage is "relevant" is the question that benchmark asks, not a
  retrieval judgement.

Nothing here downloads anything; the wheel is taken by hand at development time, and none of it
is shipped with the product: keep OUT_DIR outside the repository (e.g. `/work/datasets/gpe`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.classic_collections import Converted, write_beir


def gpe(claims_file: Path) -> Converted:
    """(corpus, queries, judgements) from GPE's `gpe.jsonl` (one claim per line)."""
    pages: dict[str, dict[str, str]] = {}
    queries: list[dict[str, str]] = []
    qrels: list[tuple[str, str, int]] = []
    with claims_file.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            claim = json.loads(line)
            queries.append(
                {"_id": claim["claim_id"], "text": " ".join(claim["original_claim"].split())}
            )
            environment = claim["evidence_environment"]
            for page in [*environment["benign"], *environment["related_distractor"]]:
                converted = _page(page)
                known = pages.get(converted["_id"])
                if known is None or len(converted["text"]) > len(known["text"]):
                    pages[converted["_id"]] = converted
            qrels.extend(
                (claim["claim_id"], page["evidence_id"], 1) for page in environment["benign"]
            )
    return list(pages.values()), queries, qrels


def _page(page: dict[str, Any]) -> dict[str, str]:
    passages = [p for p in page.get("contents") or [] if p and p.strip()]
    text = " ".join(passages) if passages else page.get("summary") or ""
    return {
        "_id": page["evidence_id"],
        "title": " ".join((page.get("title") or "").split()),
        "text": " ".join(text.split()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("claims", type=Path, help="GPE's gpe/data/gpe.jsonl")
    parser.add_argument("out", type=Path, help="where the BEIR layout is written")
    args = parser.parse_args()
    counts = write_beir(args.out, *gpe(args.claims))
    print(json.dumps({"collection": "gpe", **counts}))


if __name__ == "__main__":
    main()
