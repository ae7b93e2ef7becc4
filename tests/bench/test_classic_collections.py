"""Classic collections become BEIR layout the way `bench/harness.load_beir` reads it."""

from __future__ import annotations

from pathlib import Path

from bench.classic_collections import cacm, cisi, cranfield, lisa, npl, write_beir
from bench.eval_beir import paired_interval
from bench.harness import load_beir


def _raw(tmp_path: Path, files: dict[str, str]) -> Path:
    """A directory of a collection's original files, by name."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for name, text in files.items():
        (raw / name).write_text(text)
    return raw


CRAN_DOCS = """.I 1
.T
wing in a slipstream .
.A
brenckman,m.
.B
j. ae. scs. 25, 1958, 324.
.W
wing in a slipstream .
  an experimental study of a wing .
.I 2
.T
empty record
.A
nobody
.B
nowhere
.W
.I 3
.T
heat transfer in slabs .
.W
heat conduction in composite slabs .
"""
CRAN_QUERIES = """.I 001
.W
what similarity laws apply to a wing .
.I 004
.W
what problems of heat conduction in slabs .
"""
CRAN_QRELS = "1 1 2\n1 3 4\n2 3 1\n2 1 -1\n2 2 1\n"


def test_cranfield_renumbers_its_queries_maps_grades_to_gains_and_drops_empty_documents(
    tmp_path: Path,
) -> None:
    raw = _raw(
        tmp_path,
        {
            "cran.all.1400": CRAN_DOCS,
            "cran.qry": CRAN_QUERIES,
            "cranqrel": CRAN_QRELS,
        },
    )
    counts = write_beir(tmp_path / "out", *cranfield(raw))
    assert counts == {"documents": 2, "queries": 2, "judged_queries": 2, "judgements": 3}
    data = load_beir(tmp_path / "out")
    assert data.queries == {
        "1": "what similarity laws apply to a wing .",
        "2": "what problems of heat conduction in slabs .",
    }
    # grade 1 (complete answer) → gain 4 ... 4 (minimal interest) → 1; -1 and the empty doc go
    assert data.qrels == {"1": {"1": 3, "3": 1}, "2": {"3": 4}}
    first = data.corpus[0]
    assert (first["_id"], first["title"]) == ("1", "wing in a slipstream .")
    assert first["text"] == "wing in a slipstream . an experimental study of a wing ."


def test_cisi_joins_a_query_title_and_text_and_keeps_only_judged_pairs(tmp_path: Path) -> None:
    raw = _raw(
        tmp_path,
        {
            "CISI.ALL": (
                ".I 1\n.T\nDewey Decimal\n.A\nComaromi\n.W\n   The present study\nof the DDC.\n"
                ".X\n1\t5\t1\n"
            ),
            "CISI.QRY": ".I 1\n.T\nTitles\n.W\nWhat makes a title?\n.I 2\n.W\nOther?\n",
            "CISI.REL": "     1     1\t0\t0.000000\n     1     9\t0\t0.000000\n",
        },
    )
    write_beir(tmp_path / "out", *cisi(raw))
    data = load_beir(tmp_path / "out")
    assert data.queries == {"1": "Titles What makes a title?"}
    assert data.qrels == {"1": {"1": 1}}
    assert data.corpus[0]["text"] == "The present study of the DDC."


def test_npl_reads_slash_separated_records(tmp_path: Path) -> None:
    raw = _raw(
        tmp_path,
        {
            "doc-text": (
                "1\ncompact memories have\nflexible capacities\n   /\n"
                "2\nan analogue computer\n   /\n"
            ),
            "query-text": "1\nCOMPACT MEMORIES\n/\n",
            "rlv-ass": "1\n    1     2\n   /\n",
        },
    )
    write_beir(tmp_path / "out", *npl(raw))
    data = load_beir(tmp_path / "out")
    assert [d["text"] for d in data.corpus] == [
        "compact memories have flexible capacities",
        "an analogue computer",
    ]
    assert data.queries == {"1": "compact memories"}
    assert data.qrels == {"1": {"1": 1, "2": 1}}


CACM_DOCS = """.I 1
.T
Preliminary Report-International Algebraic Language
.B
CACM December, 1958
.A
Perlis, A. J.
.N
CA581203 JB March 22, 1978  8:28 PM
.X
100\t5\t1
.I 2
.T
Hash Table Methods
.W
A survey of
 hashing.
.K
hashing, scatter storage
.X
2\t5\t2
"""


def test_cacm_makes_a_title_only_record_its_text_and_adds_keywords_and_authors(
    tmp_path: Path,
) -> None:
    raw = _raw(
        tmp_path,
        {
            "cacm.all": CACM_DOCS,
            "query.text": ".I 1\n.W\n articles by Perlis\n.N\n 1. someone\n.I 2\n.W\n hashing\n",
            "qrels.text": "01 0001  0 0\n02 2  0 0\n02 3  0 0\n",
        },
    )
    counts = write_beir(tmp_path / "out", *cacm(raw))
    assert counts == {"documents": 2, "queries": 2, "judged_queries": 2, "judgements": 2}
    data = load_beir(tmp_path / "out")
    assert [(d["title"], d["text"]) for d in data.corpus] == [
        ("", "Preliminary Report-International Algebraic Language Authors: Perlis, A. J."),
        ("Hash Table Methods", "A survey of hashing. Keywords: hashing, scatter storage"),
    ]
    assert data.queries == {"1": "articles by Perlis", "2": "hashing"}
    # `01` in qrels.text is query 1; document 3 does not exist
    assert data.qrels == {"1": {"1": 1}, "2": {"2": 1}}


LISA_FIRST = (
    "Document    1\r\nTHE INDIAN COUNCIL OF LIBRARY\r\nSERVICES: A PROPOSAL.\r\n     \r\n"
    "CRITICALLY EXAMINES THE\r\nINDIAN LIBRARY SCENE.\r\n"
    "********************************************\r\n"
    "Document 2\r\nA TITLE ALONE.\r\n********************************************\r\n"
)
LISA_SECOND = (
    "Document    2\r\nA TITLE ALONE.\r\n********************************************\r\n"
    "Document    3\r\nNON-USERS.\r\n\r\nWHO DOES NOT USE LIBRARIES.\r\n"
    "********************************************\r\n"
)


def test_lisa_splits_title_and_abstract_keeps_a_repeated_record_once_and_reads_lisarj_num(
    tmp_path: Path,
) -> None:
    raw = _raw(
        tmp_path,
        {
            "LISA0.001": LISA_FIRST,
            "LISA0.501": LISA_SECOND,
            "LISA.QUE": "1\r\nI AM INTERESTED IN\r\nINDIAN LIBRARIES. #\r\n2\r\nNON-USE. #\r\n",
            "LISA.REL": "Query 1\r\nnot read\r\n",
            "LISARJ.NUM": "  1  2  1  2\r\n  2  1  3\r\n",
        },
    )
    counts = write_beir(tmp_path / "out", *lisa(raw))
    assert counts == {"documents": 3, "queries": 2, "judged_queries": 2, "judgements": 3}
    data = load_beir(tmp_path / "out")
    assert [(d["_id"], d["title"], d["text"]) for d in data.corpus] == [
        (
            "1",
            "THE INDIAN COUNCIL OF LIBRARY SERVICES: A PROPOSAL.",
            "CRITICALLY EXAMINES THE INDIAN LIBRARY SCENE.",
        ),
        ("2", "", "A TITLE ALONE."),
        ("3", "NON-USERS.", "WHO DOES NOT USE LIBRARIES."),
    ]
    assert data.queries == {"1": "I AM INTERESTED IN INDIAN LIBRARIES.", "2": "NON-USE."}
    assert data.qrels == {"1": {"1": 1, "2": 1}, "2": {"3": 1}}


def test_the_paired_interval_brackets_the_mean_difference() -> None:
    a = {str(i): 0.5 + (0.1 if i % 2 else 0.0) for i in range(40)}
    b = {str(i): 0.5 for i in range(40)}
    mean, low, high = paired_interval(a, b)
    assert mean == 0.05
    assert 0.0 < low <= mean <= high < 0.1
    assert paired_interval(b, b) == (0.0, 0.0, 0.0)
