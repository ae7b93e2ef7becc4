"""Classic test collections (Cranfield, CISI, NPL, CACM, LISA) in BEIR layout, for evaluation only.

    python bench/classic_collections.py cranfield RAW_DIR OUT_DIR
    python bench/classic_collections.py cisi RAW_DIR OUT_DIR
    python bench/classic_collections.py npl RAW_DIR OUT_DIR
    python bench/classic_collections.py cacm RAW_DIR OUT_DIR
    python bench/classic_collections.py lisa RAW_DIR OUT_DIR

Reads the collection's original files from RAW_DIR (taken by hand, at development time, from a
public copy: see the SOURCE.md this writes) and writes `corpus.jsonl`, `queries.jsonl` and
`qrels/test.tsv` under OUT_DIR — the layout `bench/harness.load_beir` and `bench/eval_beir.py`
read. Nothing here downloads anything, and none of it is shipped with the product: keep OUT_DIR
outside the repository (e.g. `/work/datasets/<name>`).

* cranfield: 1,400 aeronautics abstracts (title + text), 225 judged questions, graded 1-4.
* cisi: 1,460 library-science abstracts, 76 judged long, vague information needs, binary.
* npl: 11,429 one-line electrical-engineering abstracts (no title), 93 judged short queries,
  binary; an empty record is dropped. Complete copies (and ir_datasets) hold 11,429 records; the
  README's figures were taken on a copy holding 11,426 (one public copy lost three records,
  6984, 8139 and 8143, in a later commit).
* cacm: 3,204 bibliographic records of Communications of the ACM 1958-1979, 52 judged queries
  (64 in `query.text`), binary. Half the records are a title alone (1,617 have no abstract):
  short titles, short texts, the kind of collection where BM25 has little to hold on to. A record
  with an abstract is `{title: .T, text: .W}`; a title-only record is `{title: "", text: .T}` (a
  search tool refuses an empty text, and the title is all the record says). Each record's `.K`
  keywords and `.A` authors follow its text ("Keywords: …", "Authors: …"): two queries ask for an
  author. `qrels.text` writes query ids with a leading zero (`01`): they are read as numbers.
* lisa: 6,004 Library and Information Science Abstracts records of 1982 (`LISA0.001` ...
  `LISA5.850`, CRLF lines, records split by a line of asterisks: `Document N`, the title up to
  the first blank line, then the abstract), 35 judged natural-language requests (`LISA.QUE`,
  each ending with `#`), binary. The judgements are read from `LISARJ.NUM` (query, count, ids):
  `LISA.REL` of the same distribution lost query 22 and names 23 as 35. Records 1998-2001 come
  twice in the files (1993-1997 are missing): each is kept once, 5,999 documents. A record
  without an abstract would be its title alone, as in CACM (none is, in these files).

Query ids of Cranfield: `cran.qry` numbers its 225 queries 1..365 with gaps, but `cranqrel`
numbers them 1..225 in file order (a known trap of that collection): the queries are renumbered in
file order here so that both agree. Cranfield's grades (1 = complete answer ... 4 = minimal
interest, -1 = of no interest) become gains 4..1, and -1 is dropped.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path

Converted = tuple[list[dict[str, str]], list[dict[str, str]], list[tuple[str, str, int]]]
"""(corpus `{_id, title, text}`, queries `{_id, text}`, judgements (query, document, gain))."""
_FIELD = re.compile(r"^\.([A-Z])\s*(.*)$")


def smart_records(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(id, {field letter: text}) of each record of a SMART file (`.I n`, `.T`, `.W`, ...)."""
    record_id: str | None = None
    fields: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        match = _FIELD.match(line)
        if match and match.group(1) == "I":
            if record_id is not None:
                yield record_id, _joined(fields)
            record_id, fields, current = match.group(2).strip(), {}, None
        elif match and len(line.split()) == 1 and line.startswith("."):
            current = match.group(1)
            fields.setdefault(current, [])
        elif current is not None:
            fields[current].append(line)
    if record_id is not None:
        yield record_id, _joined(fields)


def _joined(fields: dict[str, list[str]]) -> dict[str, str]:
    return {k: " ".join(" ".join(v).split()) for k, v in fields.items()}


def slash_records(text: str) -> Iterator[tuple[str, str]]:
    """(id, body) of each record of NPL's files: an id line, body lines, a line holding `/`."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.strip() == "/":
            if lines:
                yield lines[0].strip(), " ".join(" ".join(lines[1:]).split())
            lines = []
        elif line.strip() or lines:
            lines.append(line)


def cranfield(raw: Path) -> Converted:
    corpus = [
        {"_id": i, "title": f.get("T", ""), "text": f.get("W", "")}
        for i, f in smart_records(_read(raw / "cran.all.1400"))
    ]
    queries = [
        {"_id": str(n), "text": f.get("W", "")}
        for n, (_, f) in enumerate(smart_records(_read(raw / "cran.qry")), start=1)
    ]
    qrels = []
    for line in _read(raw / "cranqrel").splitlines():
        if line.strip():
            query, doc, grade = line.split()[:3]
            if 1 <= int(grade) <= 4:
                qrels.append((query, doc, 5 - int(grade)))
    return corpus, queries, qrels


def cisi(raw: Path) -> Converted:
    corpus = [
        {"_id": i, "title": f.get("T", ""), "text": f.get("W", "")}
        for i, f in smart_records(_read(raw / "CISI.ALL"))
    ]
    queries = [
        {"_id": i, "text": " ".join(p for p in (f.get("T", ""), f.get("W", "")) if p)}
        for i, f in smart_records(_read(raw / "CISI.QRY"))
    ]
    qrels = []
    for line in _read(raw / "CISI.REL").splitlines():
        if line.strip():
            query, doc = line.split()[:2]
            qrels.append((query, doc, 1))
    return corpus, queries, qrels


def npl(raw: Path) -> Converted:
    corpus = [
        {"_id": i, "title": "", "text": body} for i, body in slash_records(_read(raw / "doc-text"))
    ]
    queries = [
        {"_id": i, "text": body.lower()} for i, body in slash_records(_read(raw / "query-text"))
    ]
    qrels = [
        (query, doc, 1)
        for query, body in slash_records(_read(raw / "rlv-ass"))
        for doc in body.split()
    ]
    return corpus, queries, qrels


_CACM_EXTRA = (("K", "Keywords"), ("A", "Authors"))


def cacm(raw: Path) -> Converted:
    corpus = []
    for i, f in smart_records(_read(raw / "cacm.all")):
        title, text = (f.get("T", ""), f["W"]) if f.get("W") else ("", f.get("T", ""))
        extra = [f"{name}: {f[key]}" for key, name in _CACM_EXTRA if f.get(key)]
        corpus.append({"_id": i, "title": title, "text": " ".join([text, *extra]).strip()})
    queries = [
        {"_id": i, "text": f.get("W", "")} for i, f in smart_records(_read(raw / "query.text"))
    ]
    qrels = []
    for line in _read(raw / "qrels.text").splitlines():
        if line.strip():
            query, doc = line.split()[:2]
            qrels.append((str(int(query)), str(int(doc)), 1))
    return corpus, queries, qrels


_LISA_RECORD = re.compile(r"^Document\s+(\d+)\s*$")
_LISA_END = re.compile(r"^\*+\s*$")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def lisa(raw: Path) -> Converted:
    corpus: dict[str, dict[str, str]] = {}
    lines = "\n".join(_read(p) for p in sorted(raw.glob("LISA[0-9].*"))).splitlines()
    record: list[str] | None = None
    for line in [*(line.rstrip("\r") for line in lines), "*"]:
        match = _LISA_RECORD.match(line)
        if match:
            record = [match.group(1)]
        elif record is not None and _LISA_END.match(line):
            doc_id, body = record[0], "\n".join(record[1:]).strip()
            title, _, abstract = _BLANK_LINE.sub("\n\n", body, count=1).partition("\n\n")
            title, abstract = " ".join(title.split()), " ".join(abstract.split())
            kept = {"title": title, "text": abstract} if abstract else {"title": "", "text": title}
            corpus.setdefault(doc_id, {"_id": doc_id, **kept})
            record = None
        elif record is not None:
            record.append(line)
    queries = []
    for block in _read(raw / "LISA.QUE").replace("\r", "").split("#"):
        number, _, text = block.strip().partition("\n")
        if number.strip().isdigit():
            queries.append({"_id": number.strip(), "text": " ".join(text.split())})
    numbers = [int(t) for t in _read(raw / "LISARJ.NUM").split()]
    qrels, at = [], 0
    while at < len(numbers):
        query, count = numbers[at], numbers[at + 1]
        qrels += [(str(query), str(doc), 1) for doc in numbers[at + 2 : at + 2 + count]]
        at += 2 + count
    return list(corpus.values()), queries, qrels


CONVERTERS = {"cranfield": cranfield, "cisi": cisi, "npl": npl, "cacm": cacm, "lisa": lisa}


def write_beir(
    out: Path,
    corpus: list[dict[str, str]],
    queries: list[dict[str, str]],
    qrels: list[tuple[str, str, int]],
) -> dict[str, int]:
    """Write the BEIR layout. Documents without text (Cranfield 471 and 995) are dropped (a
    search tool refuses them); only judged pairs whose query and document exist are kept."""
    corpus = [d for d in corpus if d["text"].strip()]
    doc_ids = {d["_id"] for d in corpus}
    query_ids = {q["_id"] for q in queries if q["text"]}
    kept = sorted(
        {(q, d): g for q, d, g in qrels if q in query_ids and d in doc_ids}.items(),
        key=lambda item: (_in_order(item[0][0]), _in_order(item[0][1])),
    )
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for d in corpus:
            f.write(json.dumps({**d, "metadata": {}}) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as f:
        for q in queries:
            if q["text"]:
                f.write(json.dumps({**q, "metadata": {}}) + "\n")
    with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for (query, doc), gain in kept:
            f.write(f"{query}\t{doc}\t{gain}\n")
    return {
        "documents": len(corpus),
        "queries": len(query_ids),
        "judged_queries": len({q for (q, _), _ in kept}),
        "judgements": len(kept),
    }


def _in_order(record_id: str) -> tuple[int, str]:
    """Numeric ids in numeric order (2 before 10), other ids (GPE's) in string order."""
    return (int(record_id), "") if record_id.isdigit() else (-1, record_id)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=sorted(CONVERTERS))
    parser.add_argument("raw", type=Path, help="directory holding the original files")
    parser.add_argument("out", type=Path, help="where the BEIR layout is written")
    args = parser.parse_args()
    counts = write_beir(args.out, *CONVERTERS[args.name](args.raw))
    print(json.dumps({"collection": args.name, **counts}))


if __name__ == "__main__":
    main()
