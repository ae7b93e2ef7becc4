"""Does storing SciFact's vectors as bfloat16 (Vespa `tensor<bfloat16>`) and ranking by the dot
product (`prenormalized-angular`) move dense nDCG@10? Exact nearest neighbours over every chunk,
three ways, on the same recorded MiniLM vectors:

* `float32-cosine`: the vectors as the embedder made them, cosine (what `angular` computes);
* `bfloat16-cosine`: each vector rounded to bfloat16 (round to nearest even, as Vespa converts a
  float fed into a bfloat16 tensor), cosine;
* `bfloat16-dot`: the rounded vectors, plain dot product (what `prenormalized-angular` ranks by;
  MiniLM's vectors are unit length before rounding).

The collection is the product's own (`bench/scifact_collection.py`: LanceDB under
`var/eval/scifact`, vectors cached in `var/eval/scifact-vectors.npz`); the test queries are
embedded by the same cached embedder. Documents rank by their best chunk (as the evaluation
does). Exact search isolates the precision question from HNSW's approximation.

`--as-built` measures the collection as it stands, without ingesting the rest (a build stopped
part way: ingest skips what is stored, so the full command resumes it later). The figure is then
over the abstracts stored so far and only the test queries with a judged-relevant abstract among
them; the JSON says so (`partial`, `abstracts_stored`, `queries`) and names the file
`…-partial.json` by default: a smaller corpus has fewer near ties, so it is weaker evidence than
the full run.

Usage: python -m bench.vespa_vector_precision [--out FILE] [--scifact DIR] [--as-built]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import numpy.typing as npt

from bench.eval_scifact import ndcg_at
from bench.harness import REPO_ROOT, SCIFACT_DIR, VAR_DIR, emit, load_scifact, machine, note
from bench.scifact_collection import COLLECTION, build_collection, cached_embedder

DATA_DIR = VAR_DIR / "eval" / "scifact"
TOP_DOCUMENTS = 10


def to_bfloat16(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Each float32 rounded to the nearest bfloat16 (ties to even), back as float32."""
    bits = vectors.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def rankings(
    chunks: npt.NDArray[np.float32],
    documents: list[str],
    queries: npt.NDArray[np.float32],
    *,
    cosine: bool,
) -> list[list[str]]:
    """Each query's documents, best chunk first, top `TOP_DOCUMENTS`."""
    matrix = chunks
    if cosine:
        matrix = chunks / np.linalg.norm(chunks, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    scores = queries @ matrix.T
    ranked: list[list[str]] = []
    for row in scores:
        order = np.argsort(-row, kind="stable")
        seen: list[str] = []
        for index in order:
            document = documents[index]
            if document not in seen:
                seen.append(document)
                if len(seen) == TOP_DOCUMENTS:
                    break
        ranked.append(seen)
    return ranked


async def chunk_vectors() -> tuple[npt.NDArray[np.float32], list[str]]:
    connection = await lancedb.connect_async(str(DATA_DIR))
    table = await connection.open_table(COLLECTION)
    arrow = await table.query().select(["document_id", "vector"]).to_arrow()
    vectors = np.stack(arrow.column("vector").to_numpy(zero_copy_only=False)).astype(np.float32)
    return vectors, [str(d) for d in arrow.column("document_id").to_pylist()]


def answerable(qrels: dict[str, dict[str, int]], stored: set[str]) -> list[str]:
    """The queries with a judged-relevant document among `stored`, sorted."""
    return sorted(
        q for q, judged in qrels.items() if any(g > 0 and d in stored for d, g in judged.items())
    )


async def measure(scifact: Path, *, as_built: bool = False) -> dict[str, Any]:
    data = load_scifact(scifact)
    embedder = cached_embedder()
    if as_built:
        collection: dict[str, Any] = {"reused": True, "partial": True}
    else:
        collection = await build_collection(DATA_DIR, data, embedder)
    chunks, documents = await chunk_vectors()
    stored = set(documents)
    query_ids = answerable(data.qrels, stored) if as_built else sorted(data.queries)
    queries = await embedder.embed([data.queries[q] for q in query_ids])
    embedder.save()
    rounded = to_bfloat16(chunks)
    rounded_queries = to_bfloat16(queries)
    variants = {
        "float32-cosine": rankings(chunks, documents, queries, cosine=True),
        "bfloat16-cosine": rankings(rounded, documents, rounded_queries, cosine=True),
        "bfloat16-dot": rankings(rounded, documents, rounded_queries, cosine=False),
    }
    per_query = {
        name: [ndcg_at(r, data.qrels[q]) for q, r in zip(query_ids, ranked, strict=True)]
        for name, ranked in variants.items()
    }
    base = np.array(per_query["float32-cosine"])
    norms = np.linalg.norm(chunks, axis=1)
    result: dict[str, Any] = {
        "collection": collection,
        "partial": as_built,
        "abstracts_stored": len(stored),
        "abstracts_in_corpus": len(data.corpus),
        "chunks": int(chunks.shape[0]),
        "dimensions": int(chunks.shape[1]),
        "queries": len(query_ids),
        "vector_norms": {"min": float(norms.min()), "max": float(norms.max())},
        "max_abs_rounding_error": float(np.abs(rounded - chunks).max()),
        "ndcg@10": {name: round(float(np.mean(v)), 4) for name, v in per_query.items()},
        "paired_difference_to_float32": {},
        "machine": machine(),
    }
    for name, values in per_query.items():
        if name == "float32-cosine":
            continue
        diff = np.array(values) - base
        half = 1.96 * float(diff.std(ddof=1)) / np.sqrt(len(diff))
        result["paired_difference_to_float32"][name] = {
            "mean": round(float(diff.mean()), 5),
            "ci95": [round(float(diff.mean()) - half, 5), round(float(diff.mean()) + half, 5)],
            "queries_changed": int(np.count_nonzero(np.abs(diff) > 1e-12)),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--scifact", type=Path, default=SCIFACT_DIR)
    parser.add_argument(
        "--as-built",
        action="store_true",
        help="measure the collection as stored so far (partial), ingesting nothing",
    )
    args = parser.parse_args()
    name = "vespa-vector-precision-partial" if args.as_built else "vespa-vector-precision"
    out = args.out or REPO_ROOT / "bench" / "results" / f"{name}.json"
    started = time.monotonic()
    result = asyncio.run(measure(args.scifact, as_built=args.as_built))
    result["seconds"] = round(time.monotonic() - started, 1)
    emit(result, out)
    note(f"nDCG@10: {result['ndcg@10']}")


if __name__ == "__main__":
    main()
