"""`quarry ingest` of 1,000 small Markdown files against bare UpsertDocuments of the same texts.

    python bench/ingest_files.py [--files 1000] [--out bench/results/ingest_files.json]

One search tool subprocess on a fresh data directory. Each file is one ~70-word SciFact passage
under a heading (one chunk). First the same texts go through UpsertDocuments directly, 64 per
request (the floor: chunking, embedding, writing); then `quarry ingest` reads the files, parses
them and sends them, as a user would. The ratio is what the CLI's reading and batching cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from quarry.searchtool.v1 import search_tool_pb2

from bench.harness import (
    RESULTS_DIR,
    VAR_DIR,
    emit,
    load_scifact,
    machine,
    note,
    search_tool_process,
)
from services.search_tool.client import SearchToolClient

WORDS = 70


async def main(files: int, out: Path) -> None:
    root = VAR_DIR / "ingest_files"
    shutil.rmtree(root, ignore_errors=True)
    folder = root / "notes"
    folder.mkdir(parents=True)
    texts = []
    for n, doc in enumerate(load_scifact().corpus[:files]):
        text = " ".join(str(doc["text"]).split()[:WORDS])
        texts.append((f"Note {n}", text))
        (folder / f"note{n:04}.md").write_text(f"# Note {n}\n{text}\n", encoding="utf-8")
    async with search_tool_process(root / "data") as address:
        async with SearchToolClient(address, timeout_s=600) as client:
            note("bare UpsertDocuments, 64 per request ...")
            started = time.perf_counter()
            chunks = 0
            for i in range(0, len(texts), 64):
                batch = [
                    search_tool_pb2.Document(id=f"d{i + j}", title=t, text=f"# {t}\n{x}")
                    for j, (t, x) in enumerate(texts[i : i + 64])
                ]
                chunks += (await client.upsert_documents("bare", batch)).chunks_upserted
            bare = chunks / (time.perf_counter() - started)
        note("quarry ingest ...")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "quarry_cli.cli", "ingest", str(folder),
            "--collection", "files", "--address", address, "--json",
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        output, _ = await process.communicate()
    summary = json.loads(output.decode().strip().splitlines()[-1])
    cli = summary["chunks"] / summary["seconds"]
    emit(
        {
            "benchmark": "ingest_files",
            "files": files,
            "bare_upsert_chunks_per_s": round(bare, 1),
            "quarry_ingest_chunks_per_s": round(cli, 1),
            "quarry_ingest_chunks": summary["chunks"],
            "ratio": round(cli / bare, 3),
            "machine": machine(),
        },
        out,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "ingest_files.json")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.files, arguments.out))
