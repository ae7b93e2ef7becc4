"""Ingest throughput through gRPC UpsertDocuments with the real embedder, by request size.

    python bench/ingest_throughput.py [--out bench/results/ingest_throughput.json]

A search tool subprocess on a fresh data directory (`var/bench/ingest_throughput/`, wiped first).
Each document is one ~70-word chunk (SciFact sentences, cut to 70 words, every text distinct so
nothing is skipped as unchanged). For each request size, `CHUNKS_PER_SIZE` chunks are upserted
sequentially and chunks per second are measured end to end (chunking, embedding, writing).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    emit,
    load_scifact,
    machine,
    note,
    search_tool_process,
)
from services.search_tool.embedding.minilm import MiniLmEmbedder

COLLECTION = "ingest-bench"
WORDS_PER_CHUNK = 70
REQUEST_SIZES = (1, 8, 32, 128)
CHUNKS_PER_SIZE = 128


def seventy_word_texts(abstracts: list[str], needed: int) -> list[str]:
    """Distinct ~70-word passages cut from the abstracts."""
    words = itertools.chain.from_iterable(a.split() for a in abstracts)
    texts: list[str] = []
    while len(texts) < needed:
        texts.append(" ".join(itertools.islice(words, WORDS_PER_CHUNK)))
    return texts


async def measure(address: str, texts: list[str]) -> list[dict[str, Any]]:
    rows = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = search_tool_pb2_grpc.SearchToolServiceStub(channel)
        await _upsert(stub, "warmup", texts[:8])
        offset = 8
        for size in REQUEST_SIZES:
            batch_texts = texts[offset : offset + CHUNKS_PER_SIZE]
            offset += CHUNKS_PER_SIZE
            started = time.perf_counter()
            chunks = 0
            for start in range(0, len(batch_texts), size):
                chunks += await _upsert(stub, f"s{size}-{start}", batch_texts[start : start + size])
            seconds = time.perf_counter() - started
            rows.append(
                {
                    "documents_per_request": size,
                    "chunks": chunks,
                    "seconds": round(seconds, 2),
                    "chunks_per_s": round(chunks / seconds, 1),
                }
            )
            note(f"request size {size}: {rows[-1]['chunks_per_s']} chunks/s")
    return rows


async def _upsert(stub: Any, prefix: str, texts: list[str]) -> int:
    response = await stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection=COLLECTION,
            documents=[
                search_tool_pb2.Document(id=f"{prefix}-{i}", text=t, source="bench")
                for i, t in enumerate(texts)
            ],
        ),
        timeout=600,
    )
    return int(response.chunks_upserted)


async def embedder_only(texts: list[str]) -> float:
    """Chunks per second of the bare embedder on the same texts: the ceiling under this load."""
    embedder = MiniLmEmbedder()
    try:
        await embedder.embed(texts[:8])
        started = time.perf_counter()
        await embedder.embed(texts)
        return round(len(texts) / (time.perf_counter() - started), 1)
    finally:
        embedder.close()


async def run(data_dir: Path) -> dict[str, Any]:
    shutil.rmtree(data_dir, ignore_errors=True)
    needed = 8 + CHUNKS_PER_SIZE * len(REQUEST_SIZES)
    texts = seventy_word_texts([d["text"] for d in load_scifact().corpus], needed)
    ceiling = await embedder_only(texts[-CHUNKS_PER_SIZE:])
    async with search_tool_process(data_dir) as address:
        rows = await measure(address, texts)
    return {
        "benchmark": "ingest_throughput",
        "words_per_chunk": WORDS_PER_CHUNK,
        "by_request_size": rows,
        "best_chunks_per_s": max(r["chunks_per_s"] for r in rows),
        "embedder_only_chunks_per_s": ceiling,
        "target_chunks_per_s": 60,
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "ingest_throughput.json")
    parser.add_argument("--data-dir", type=Path, default=VAR_DIR / "bench" / "ingest_throughput")
    args = parser.parse_args()
    emit(asyncio.run(run(args.data_dir)), args.out)


if __name__ == "__main__":
    main()
