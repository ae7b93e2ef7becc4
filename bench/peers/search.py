"""Quarry's search against its peers on the same data, interleaved, in one run.

    pip install -e '.[dev,peers]'
    python bench/peers/search.py [--out bench/results/peers_search.json]

* HYBRID: Quarry through gRPC (an in-process search tool over the SciFact collection `make eval`
  builds) against LanceDB's own hybrid query (`nearest_to(v).nearest_to_text(q)`, its default RRF
  reranker) in process on the *same table* with the *same query vectors* — the ratio is Quarry's
  overhead (gRPC, validation, both-side scoring, fusion, taking the page).
* KEYWORD: Quarry through gRPC against `bm25s` (Snowball English stemmer, English stop words)
  in process over the same chunk texts (`search_text`), plus both sides' nDCG@10 on SciFact test.

Query vectors come from the on-disk cache (`bench/embedding_cache.py`) on both sides, so neither
pays for MiniLM. Each query runs on both sides back to back, the order alternating per query.
Prints one JSON object with both sides' p50/p95 and the ratio (Quarry / peer; below 1: Quarry is
faster). Exits 2 when a peer is not installed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

try:
    import bm25s
    import Stemmer
except ImportError as missing:  # the peer is an optional extra
    print(f'{{"error": "peer not installed: {missing.name}; pip install -e .[peers]"}}')
    raise SystemExit(2) from None

import lancedb

from bench.eval_scifact import index_everything, ndcg_at
from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    emit,
    load_scifact,
    machine,
    note,
    percentile,
    warm_up,
)
from bench.harness import settings_for as search_settings
from bench.scifact_collection import (
    COLLECTION,
    HASHED_DATA_DIR,
    build_collection,
    cached_embedder,
    hashed_embedder,
)
from services.search_tool.engine.lancedb.rows import SEARCH_TEXT_COLUMN
from services.search_tool.server import build_search_tool_server

LIMIT = 10
WARMUP_S = 10.0
WARMUP_LEAST = 20
"""Quarry's searches before the timed ones (`harness.warm_up`): the collection is read into
memory by then, as for any caller after its first searches."""


def summary(times: list[float]) -> dict[str, float]:
    return {"p50_ms": round(percentile(times, 50), 2), "p95_ms": round(percentile(times, 95), 2)}


async def interleaved(
    queries: list[tuple[str, Any]],
    quarry: Callable[[str, Any], Awaitable[Any]],
    peer: Callable[[str, Any], Awaitable[Any]],
) -> tuple[list[float], list[float]]:
    by_text = dict(queries)
    await warm_up(
        lambda text: quarry(text, by_text[text]),
        list(by_text),
        seconds=WARMUP_S,
        least=WARMUP_LEAST,
    )
    for text, vector in queries[:WARMUP_LEAST]:
        await peer(text, vector)
    ours: list[float] = []
    theirs: list[float] = []
    for n, (text, vector) in enumerate(queries):
        order = [(quarry, ours), (peer, theirs)]
        for call, times in order if n % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            await call(text, vector)
            times.append((time.perf_counter() - started) * 1000)
    return ours, theirs


def pair(name: str, ours: list[float], theirs: list[float], peer: str) -> dict[str, Any]:
    q, p = summary(ours), summary(theirs)
    return {
        "quarry": q,
        peer: p,
        "ratio_p50": round(q["p50_ms"] / p["p50_ms"], 2),
        "what": name,
    }


async def run(data_dir: Path, *, hashed: bool = False) -> dict[str, Any]:
    data = load_scifact()
    embedder = hashed_embedder() if hashed else cached_embedder()
    await build_collection(data_dir, data, embedder)
    # the state the eval measures and a running search tool reaches once writes pause
    # (`engine.settle_after_s`): every row in BM25, fragments compacted
    await index_everything(data_dir)
    ids = sorted(data.queries)
    texts = [data.queries[q] for q in ids]
    vectors = await embedder.embed(texts)
    queries = list(zip(texts, vectors, strict=True))

    db = await lancedb.connect_async(str(data_dir))
    table = await db.open_table(COLLECTION)
    rows = await table.query().select(["id", "document_id", SEARCH_TEXT_COLUMN]).to_arrow()
    corpus_ids = rows.column("document_id").to_pylist()
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(
            rows.column(SEARCH_TEXT_COLUMN).to_pylist(), stemmer=stemmer, show_progress=False
        ),
        show_progress=False,
    )

    async def lancedb_hybrid(text: str, vector: Any) -> Any:
        query = table.query().nearest_to(np.asarray(vector)).distance_type("cosine")
        return await query.nearest_to_text(text).select(["id"]).limit(LIMIT).to_arrow()

    async def bm25s_keyword(text: str, _: Any) -> Any:
        tokens = bm25s.tokenize([text], stemmer=stemmer, show_progress=False)
        return retriever.retrieve(tokens, k=LIMIT, show_progress=False, n_threads=1)

    settings = search_settings(data_dir)
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)

            def quarry(strategy: search_pb2.RetrievalStrategy) -> Callable[[str, Any], Any]:
                async def call(text: str, _: Any) -> Any:
                    return await stub.Search(
                        search_tool_pb2.SearchRequest(
                            collection=COLLECTION,
                            query=search_pb2.SearchQuery(primary=text),
                            strategy=strategy,
                            limit=LIMIT,
                        ),
                        timeout=30,
                    )

                return call

            note("HYBRID: Quarry vs LanceDB hybrid")
            hybrid = await interleaved(
                queries, quarry(search_pb2.RETRIEVAL_STRATEGY_HYBRID), lancedb_hybrid
            )
            note("KEYWORD: Quarry vs bm25s")
            keyword_search = quarry(search_pb2.RETRIEVAL_STRATEGY_KEYWORD)
            keyword = await interleaved(queries, keyword_search, bm25s_keyword)
            quality = await keyword_quality(ids, texts, keyword_search, bm25s_keyword, corpus_ids)
    finally:
        await server.stop(0)
    return {
        "benchmark": "peers_search",
        "data": f"SciFact, {rows.num_rows} chunks; {len(queries)} test queries, limit {LIMIT}, "
        "one client, interleaved" + ("; hashed vectors (latency only)" if hashed else ""),
        "hybrid_vs_lancedb": pair(
            "Quarry HYBRID via gRPC vs LanceDB hybrid in process", *hybrid, "lancedb"
        ),
        "keyword_vs_bm25s": {
            **pair("Quarry KEYWORD via gRPC vs bm25s in process", *keyword, "bm25s"),
            "ndcg@10": quality,
        },
        "versions": {"bm25s": bm25s.__version__, "lancedb": lancedb.__version__},
        "machine": machine(),
    }


async def keyword_quality(
    ids: list[str],
    texts: list[str],
    quarry: Callable[[str, Any], Awaitable[Any]],
    peer: Callable[[str, Any], Awaitable[Any]],
    corpus_ids: list[str],
) -> dict[str, float]:
    """nDCG@10 over documents (best chunk first) of both keyword searches, SciFact test."""
    qrels = load_scifact().qrels
    ours, theirs = [], []
    for query_id, text in zip(ids, texts, strict=True):
        reply = await quarry(text, None)
        ours.append(ndcg_at(_unique([r.chunk.document_id for r in reply.results]), qrels[query_id]))
        found, _ = await peer(text, None)
        ranked = _unique([corpus_ids[int(i)] for i in found[0]])
        theirs.append(ndcg_at(ranked, qrels[query_id]))
    return {"quarry": round(sum(ours) / len(ours), 4), "bm25s": round(sum(theirs) / len(theirs), 4)}


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "peers_search.json")
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "eval" / "scifact")
    parser.add_argument(
        "--hashed-vectors",
        action="store_true",
        help="latency only: pseudo-random vectors instead of MiniLM's (no hour-long embedding "
        f"of the corpus on a busy machine); the collection lives in {HASHED_DATA_DIR}",
    )
    args = parser.parse_args()
    if args.hashed_vectors and args.data_dir == parser.get_default("data_dir"):
        args.data_dir = HASHED_DATA_DIR
    emit(asyncio.run(run(args.data_dir, hashed=args.hashed_vectors)), args.out)


if __name__ == "__main__":
    main()
