"""GPE's claims and evidence become a BEIR-layout collection as `bench/harness.load_beir` reads."""

from __future__ import annotations

import json
from pathlib import Path

from bench.classic_collections import write_beir
from bench.gpe_collection import gpe
from bench.harness import load_beir


def _page(evidence_id: str, kind: str, **fields: object) -> dict[str, object]:
    return {"evidence_id": evidence_id, "evidence_type": kind, "title": "", **fields}


def _claim(
    claim_id: str, text: str, benign: list[dict[str, object]], distractors: list[dict[str, object]]
) -> str:
    poisoned = {
        "fakegpt": [_page(f"malicious-{claim_id}", "poisoned", contents=["A fabricated report."])]
    }
    return json.dumps(
        {
            "claim_id": claim_id,
            "original_claim": text,
            "ground_truth": "false",
            "subclaims": ["a subclaim that is not a query"],
            "evidence_environment": {
                "benign": benign,
                "poisoned": poisoned,
                "related_distractor": distractors,
            },
        }
    )


def test_gpe_claims_judge_their_benign_evidence_and_never_the_distractors_or_the_poison(
    tmp_path: Path,
) -> None:
    shared = _page(
        "politifact-1", "benign", title="Fake quotes", contents=["Quotes were  made up.", " "]
    )
    claims = tmp_path / "gpe.jsonl"
    claims.write_text(
        "\n".join(
            [
                _claim(
                    "benchmark-000010",
                    "An actor  praised a president.",
                    [shared, _page("wiki-2", "benign", title="Actor", contents=["He acts."])],
                    [
                        _page(
                            "related-web-3",
                            "related_distractor",
                            title="Tax policy",
                            summary="Taxes cut.",
                        )
                    ],
                ),
                _claim(
                    "benchmark-000002",
                    "A singer changed nationality.",
                    [
                        {
                            **shared,
                            "contents": [
                                "Quotes were made up.",
                                "The longer copy of the same page.",
                            ],
                        }
                    ],
                    [_page("related-web-4", "related_distractor", summary="")],
                ),
                "",
            ]
        )
    )

    counts = write_beir(tmp_path / "out", *gpe(claims))
    collection = load_beir(tmp_path / "out")

    assert counts == {"documents": 3, "queries": 2, "judged_queries": 2, "judgements": 3}
    documents = {d["_id"]: d for d in collection.corpus}
    # the empty page is dropped
    assert set(documents) == {"politifact-1", "wiki-2", "related-web-3"}
    assert documents["politifact-1"] == {
        "_id": "politifact-1",
        "title": "Fake quotes",
        "text": "Quotes were made up. The longer copy of the same page.",
        "metadata": {},
    }
    assert documents["related-web-3"]["text"] == "Taxes cut."  # no passages: the search summary
    assert collection.queries == {
        "benchmark-000010": "An actor praised a president.",
        "benchmark-000002": "A singer changed nationality.",
    }
    assert collection.qrels == {
        "benchmark-000010": {"politifact-1": 1, "wiki-2": 1},
        "benchmark-000002": {"politifact-1": 1},
    }
    lines = (tmp_path / "out" / "qrels" / "test.tsv").read_text().splitlines()
    assert lines[1].startswith("benchmark-000002\t")  # string ids are ordered as strings
