"""`bench/eval_beir.py` evaluates a BEIR collection it has never seen the way BEIR does: a query
that is itself a document (ArguAna, Quora) is not scored against itself, title-only documents are
searchable, long queries and pages go through, and a missing split says which ones exist."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from bench import eval_beir
from bench.eval_beir import evaluate
from bench.eval_scifact import per_query_ndcg, scores
from bench.harness import load_beir, running_search_tool
from bench.scifact_collection import INGEST_BATCH, indexable, ingest_batches
from services.search_tool.config import SearchToolSettings
from services.search_tool.documents import Document


def _beir(
    root: Path,
    corpus: list[dict[str, str]],
    queries: list[dict[str, str]],
    qrels: list[tuple[str, str, int]],
    *,
    split: str = "test",
) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    lines = "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels)
    (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + lines)
    return root


def test_a_query_that_is_a_document_is_not_scored_against_itself_but_a_namesake_is(
    tmp_path: Path,
) -> None:
    root = _beir(
        tmp_path,
        corpus=[
            {"_id": "arg-pro", "title": "Vegetarianism", "text": "Meat  harms the climate."},
            {"_id": "arg-con", "title": "", "text": "Farming feeds people."},
            {"_id": "arg-2", "title": "Energy", "text": "Reactors  are safe."},
            {"_id": "arg-2-con", "title": "Energy", "text": "Waste lasts."},
            {"_id": "5", "title": "", "text": "A wing in a slipstream."},
            {"_id": "7", "title": "", "text": "Heat transfer in slabs."},
        ],
        queries=[
            {"_id": "arg-pro", "text": "Meat harms the climate."},
            {"_id": "arg-2", "text": "Energy Reactors are safe."},  # the title, then the text
            {"_id": "5", "text": "what similarity laws apply to a wing"},
        ],
        qrels=[("arg-pro", "arg-con", 1), ("arg-2", "arg-2-con", 1), ("5", "7", 1)],
    )
    data = load_beir(root)
    # query 5 is not document 5's text
    assert data.queries_that_are_documents == {"arg-pro", "arg-2"}

    rankings = {"arg-pro": ["arg-pro", "arg-con"], "arg-2": ["arg-2", "arg-2-con"], "5": ["5", "7"]}
    assert per_query_ndcg(rankings, data) == pytest.approx(
        {"arg-pro": 1.0, "arg-2": 1.0, "5": 0.6309}, abs=1e-4
    )
    assert scores(rankings, data)["ndcg@10"] == pytest.approx((2.0 + 0.6309) / 3, abs=1e-4)


def test_the_collection_is_read_as_beirs_loader_reads_it(tmp_path: Path) -> None:
    root = _beir(
        tmp_path,
        corpus=[
            {"_id": "d1", "title": "", "text": "first copy"},
            {"_id": "d1", "title": "", "text": "second copy"},
            {"_id": "d2", "title": "", "text": "other"},
        ],
        queries=[{"_id": "q1", "text": "copy"}, {"_id": "q2", "text": "  "}],
        qrels=[
            ("q1", "d1", 1),
            ("q1", "d2", 0),
            ("q1", "gone", 2),
            ("q2", "d2", 1),
            ("q3", "d2", 1),
        ],
    )
    data = load_beir(root)
    assert [d["text"] for d in data.corpus] == ["second copy", "other"]  # the last copy counts
    assert data.queries == {"q1": "copy"}  # q2 has no text, q3 no query: neither is scored
    assert data.qrels == {"q1": {"d1": 1, "gone": 2}}  # a judged document the corpus lacks stays


def test_numeric_ids_written_as_json_numbers_and_qrels_without_a_header_are_read(
    tmp_path: Path,
) -> None:
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": 7, "text": "seven"}\n{"_id": 8, "text": "8"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": 1, "text": "which number"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("1\t7\t1\n\n1 8 2\n")
    data = load_beir(tmp_path)
    assert [d["_id"] for d in data.corpus] == ["7", "8"]
    assert data.queries == {"1": "which number"}
    assert data.qrels == {"1": {"7": 1, "8": 2}}  # the first line is a judgement, not a header


def test_a_malformed_judgement_names_its_file_and_line(tmp_path: Path) -> None:
    root = _beir(
        tmp_path, [{"_id": "d", "text": "t"}], [{"_id": "q", "text": "t"}], [("q", "d", 1)]
    )
    with (root / "qrels" / "test.tsv").open("a") as qrels:
        qrels.write("q\t0\td\t1\n")  # TREC's four columns are not BEIR's three
    with pytest.raises(SystemExit, match=r"test\.tsv:3: not `query-id corpus-id score`"):
        load_beir(root)


def test_a_missing_split_names_the_splits_the_collection_has(tmp_path: Path) -> None:
    root = _beir(
        tmp_path, [{"_id": "d", "text": "t"}], [{"_id": "q", "text": "t"}], [], split="dev"
    )
    with pytest.raises(SystemExit, match=r"qrels/test\.tsv.*its qrels splits: dev \(--split\)"):
        load_beir(root)
    assert load_beir(root, split="dev").split == "dev"


def test_a_document_with_only_a_title_is_its_title_and_one_with_nothing_is_left_out() -> None:
    assert indexable({"_id": "a", "title": "Title", "text": "Text"}) == ("Title", "Text")
    assert indexable({"_id": "b", "title": "A paper without an abstract", "text": " "}) == (
        "",
        "A paper without an abstract",
    )
    assert indexable({"_id": "c", "text": "no title field"}) == ("", "no title field")
    assert indexable({"_id": "d", "title": "", "text": ""}) is None


def test_ingest_batches_keep_the_order_and_bound_documents_and_bytes() -> None:
    def document(i: int, size: int) -> Document:
        return Document(id=str(i), title="", text="x" * size)

    small = [document(i, 10) for i in range(INGEST_BATCH + 1)]
    assert [len(b) for b in ingest_batches(small)] == [INGEST_BATCH, 1]

    pages = [document(0, 600_000), document(1, 600_000), document(2, 3_000_000), document(3, 5)]
    batches = list(ingest_batches(pages))
    assert [[d.id for d in b] for b in batches] == [["0"], ["1"], ["2"], ["3"]]


ARGUMENTS = {
    "veg": (
        "Being vegetarian helps the environment: meat production emits greenhouse gases.",
        "Livestock farming on grassland stores carbon, so meat is not the climate's enemy.",
    ),
    "nuclear": (
        "Nuclear power is the safest low-carbon source of electricity for the grid.",
        "Reactors leave radioactive waste for millennia and accidents poison regions.",
    ),
    "uniform": (
        "School uniforms end bullying over clothes and build a sense of belonging.",
        "Uniforms suppress pupils' self-expression and cost poor families money.",
    ),
}


def test_an_argument_collection_is_evaluated_through_grpc_without_its_queries_finding_themselves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[SearchToolSettings] = []
    serve = running_search_tool

    def recording(settings: SearchToolSettings) -> Any:
        served.append(settings)
        return serve(settings)

    monkeypatch.setattr(eval_beir, "running_search_tool", recording)
    corpus = [{"_id": f"{k}-pro", "title": "", "text": p} for k, (p, _) in ARGUMENTS.items()]
    corpus += [{"_id": f"{k}-con", "title": "", "text": c} for k, (_, c) in ARGUMENTS.items()]
    long_argument = " ".join([ARGUMENTS["veg"][0]] * 60)  # over the 4,000 characters of a Search
    corpus[0]["text"] = long_argument
    corpus += [
        {"_id": "paper", "title": "A survey of sorting algorithms", "text": ""},
        {"_id": "blank", "title": "", "text": ""},
    ]
    queries = [{"_id": d["_id"], "text": d["text"]} for d in corpus if d["_id"].endswith("-pro")]
    qrels = [(f"{k}-pro", f"{k}-con", 1) for k in ARGUMENTS]
    root = _beir(tmp_path / "arguments", corpus, queries, qrels)
    assert len(long_argument) > 4_000

    result = asyncio.run(evaluate(root, "arguments", tmp_path / "work", through_grpc=True))

    assert result["queries_that_are_documents"] == 3
    assert result["ingest"]["documents_title_only"] == 1
    assert result["ingest"]["documents_without_text"] == 1
    for strategy in ("SEMANTIC", "KEYWORD", "HYBRID"):
        assert result["grpc"][strategy]["queries"] == 3
    # each argument's counter-argument, on its own topic, is the first hit once the argument
    # itself is set aside; scored against itself it would be second (nDCG 0.63)
    assert result["grpc"]["SEMANTIC"]["ndcg@10"] == 1.0
    assert result["replayed"]["HYBRID (configured)"]["ndcg@10"] == 1.0
    # the gRPC run measures the product as it ships: the configured fusion, not the calibrated
    assert [s.fusion.model_dump() for s in served] == [result["configured_fusion"]]
    assert served[0].fusion.calibrate is False
    assert result["grpc_fusion"] == result["configured_fusion"]
    assert (
        result["grpc"]["HYBRID"]["ndcg@10"] == result["replayed"]["HYBRID (configured)"]["ndcg@10"]
    )
