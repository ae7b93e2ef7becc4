"""What every benchmark shares: paths, an in-process search tool, SciFact loading, JSON output."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.keyword_form import ENGLISH
from services.common.settings import ServerSettings
from services.search_tool.config import FusionSettings, KeywordSettings, SearchToolSettings
from services.search_tool.embedding.config import EmbeddingSettings
from services.search_tool.limits import RequestLimits
from services.search_tool.server import build_search_tool_server

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "bench" / "results"
VAR_DIR = REPO_ROOT / "var"
SCIFACT_DIR = Path(
    os.environ.get("QUARRY_SCIFACT_DIR", REPO_ROOT.parent / "shared" / "datasets" / "scifact")
)
"""SciFact beside the repository (`../shared/datasets/scifact`), or where `QUARRY_SCIFACT_DIR`
says (a worktree checked out elsewhere)."""


def settings_for(
    data_dir: Path,
    *,
    fusion: FusionSettings | None = None,
    calibrate: bool = False,
    keyword_language: str = ENGLISH,
) -> SearchToolSettings:
    """Search tool settings on `data_dir`, port 0, quiet logs, defaults otherwise.

    Fusion calibration (`services/search_tool/calibration.py`) is off unless `calibrate`: a
    benchmark measures one fusion it chose (a background calibration would change the fusion
    mid-run and load the machine while latency is measured); `bench/eval_beir.py` calibrates
    first and then serves with it on.

    Query vectors are not kept (`embedding.query_cache_entries` 0): a bench sends the same
    queries again (warm-up, rounds, one query per strategy), and each search is to embed its
    query as one never seen before does (`bench/search_latency.py` measures a kept one).

    `keyword_language`: the language every collection's words are stemmed in
    (`search_tool.keyword.language`)."""
    fusion = (fusion or FusionSettings()).model_copy(update={"calibrate": calibrate})
    return SearchToolSettings(
        server=ServerSettings(host="127.0.0.1", port=0),
        data_dir=data_dir,
        log_level="WARNING",
        fusion=fusion,
        limits=BENCH_LIMITS,
        max_document_bytes=BENCH_DOCUMENT_BYTES,
        embedding=EmbeddingSettings(query_cache_entries=0),
        keyword=KeywordSettings(language=keyword_language),
    )


BENCH_LIMITS = RequestLimits(
    upsert_total_word_pieces=1_000_000,
    upsert_total_bytes=16_000_000,
    query_chars=100_000,
    title_chars=100_000,
)
"""The benches build corpora (SciFact, BEIR) in requests of 64 documents, about 30,000 word pieces
of model work: over the default `upsert_total_word_pieces` (16,384), which bounds one call of an
untrusted caller to seconds. A bench is a trusted bulk load, so it lifts that bound (and the
total bytes). It also takes any BEIR collection's queries and titles whole: ArguAna's queries are
whole arguments, which may run past the 4,000 characters a Search accepts by default. Every other
limit stays the default."""
BENCH_DOCUMENT_BYTES = 2_000_000
"""The largest document a bench ingests (the product's default `max_document_bytes` is 256 KiB):
a news or web collection may hold longer pages, and one alone stays within
`upsert_total_word_pieces` (about 600,000 word pieces at most)."""


@asynccontextmanager
async def running_search_tool(settings: SearchToolSettings) -> AsyncIterator[str]:
    """An in-process search tool (built exactly as `python -m services.search_tool` builds it)."""
    server = build_search_tool_server(settings)
    await server.start()
    try:
        yield server.address
    finally:
        await server.stop(0)


@asynccontextmanager
async def search_tool_process(
    data_dir: Path,
    *,
    started: Callable[[int], None] | None = None,
    log: list[str] | None = None,
) -> AsyncIterator[str]:
    """`python -m services.search_tool` on `data_dir` in its own process (spawned by exec, never
    forked from a process that opened LanceDB); yields its address once it serves. `started` is
    given its process id (for a bench that reads the process's CPU time, as an operator would);
    `log`, when given, gets the process's log lines (JSON) once it serves."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.search_tool",
        "--port",
        "0",
        "--data-dir",
        str(data_dir),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "QUARRY_SEARCH_TOOL_LOG_FORMAT": "json"},
    )
    assert process.stderr is not None
    if started is not None:
        started(process.pid)
    try:
        address = await asyncio.wait_for(_serving_address(process.stderr), timeout=120)
        drain = asyncio.create_task(_drain(process.stderr, log))
        try:
            yield address
        finally:
            process.send_signal(signal.SIGTERM)
            await process.wait()
            await drain
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _serving_address(stderr: asyncio.StreamReader) -> str:
    while line := await stderr.readline():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            entry.get("message") == "serving"
            and entry.get("logger") == "services.search_tool.server"
        ):
            return str(entry["address"])
    raise RuntimeError("the search tool exited before serving")


async def _drain(stderr: asyncio.StreamReader, kept: list[str] | None = None) -> None:
    while line := await stderr.readline():
        if kept is not None:
            kept.append(line.decode(errors="replace").rstrip("\n"))


def machine() -> dict[str, Any]:
    """The conditions a figure was taken under (the machine is shared: note the load)."""
    return {
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def emit(result: dict[str, Any], out: Path) -> None:
    """Print the result as one JSON object and write it to `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=2, sort_keys=False)
    out.write_text(text + "\n", encoding="utf-8")
    print(text)


def note(message: str) -> None:
    """Progress for the person watching (stderr, so stdout stays one JSON object)."""
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class SciFact:
    """BEIR SciFact: the corpus, one split's queries and their relevance judgements."""

    corpus: list[dict[str, str]]
    """`{_id, title, text}` per abstract."""
    queries: dict[str, str]
    """Query id → text, for the split's queries (only those that have judgements)."""
    qrels: dict[str, dict[str, int]]
    """Query id → {document id → relevance}."""
    split: str = "test"
    """`test` (300 queries: report on these) or `train` (809: choose parameters on these)."""
    queries_that_are_documents: frozenset[str] = frozenset()
    """The queries that are also a corpus document, under the same id (the query is the
    document's text, alone or after its title: a copy may join the two): that document scoring
    ignores for the query (`bench/eval_scifact.scores`). In ArguAna (an argument retrieves its
    counter-argument) and Quora (a question retrieves its duplicates) every query is also a
    document; BEIR's evaluation drops a hit whose id is the query's (`ignore_identical_ids`).
    Here only a document with the query's text is dropped: in the classic collections query and
    document ids are numbered apart and coincide by chance (Cranfield's query 5 is not its
    document 5)."""


def load_scifact(root: Path = SCIFACT_DIR, *, split: str = "test") -> SciFact:
    """Read the dataset and one split's judgements from `root` (evaluation only: never bundled
    with the product)."""
    if not (root / "corpus.jsonl").exists():
        raise SystemExit(f"SciFact not found under {root}")
    return load_beir(root, split=split)


def load_beir(root: Path, *, split: str = "test") -> SciFact:
    """Any BEIR-format collection under `root`: `corpus.jsonl`, `queries.jsonl`,
    `qrels/<split>.tsv` (evaluation only: kept outside the repository, never bundled).

    Read as BEIR's own loader reads it: a document id given twice is the last one given; only
    positive judgements count; a judged query that `queries.jsonl` lacks (or gives no text) is
    not scored. A judged document missing from the corpus stays judged (BEIR keeps it: ArguAna
    judges one), so no run can reach a perfect score for that query."""
    qrels_file = root / "qrels" / f"{split}.tsv"
    if not (root / "corpus.jsonl").exists() or not qrels_file.exists():
        splits = sorted(p.stem for p in (root / "qrels").glob("*.tsv"))
        raise SystemExit(
            f"no BEIR collection (corpus.jsonl, qrels/{split}.tsv) under {root}"
            + (f"; its qrels splits: {', '.join(splits)} (--split)" if splits else "")
        )
    corpus = list(
        {str(d["_id"]): {**d, "_id": str(d["_id"])} for d in _jsonl(root / "corpus.jsonl")}.values()
    )
    judged: dict[str, dict[str, int]] = {}
    with qrels_file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.rstrip("\n").split("\t") if "\t" in line else line.split()
            if not fields or (number == 1 and not _integer(fields[-1])):
                continue  # a blank line, or the header (`query-id corpus-id score`)
            if len(fields) != 3 or not _integer(fields[2]):
                raise SystemExit(f"{qrels_file}:{number}: not `query-id corpus-id score`: {line!r}")
            query_id, doc_id, score = fields
            if int(score) > 0:
                judged.setdefault(query_id, {})[doc_id] = int(score)
    queries = {
        str(q["_id"]): q["text"]
        for q in _jsonl(root / "queries.jsonl")
        if str(q["_id"]) in judged and (q.get("text") or "").strip()
    }
    qrels = {q: relevant for q, relevant in judged.items() if q in queries}
    written = {d["_id"]: d for d in corpus}
    own = frozenset(
        q for q, text in queries.items() if q in written and _is_text_of(text, written[q])
    )
    return SciFact(
        corpus=corpus, queries=queries, qrels=qrels, split=split, queries_that_are_documents=own
    )


def _is_text_of(query: str, document: dict[str, Any]) -> bool:
    """Whether `query` is the document's text, alone or after its title (spacing aside)."""
    title, text = _spaced(document.get("title") or ""), _spaced(document.get("text") or "")
    return _spaced(query) in (text, f"{title} {text}")


def _integer(text: str) -> bool:
    return text.lstrip("+-").isdigit()


def _spaced(text: str) -> str:
    return " ".join(text.split())


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def warm_up(
    search: Callable[[str], Awaitable[Any]], texts: Sequence[str], *, seconds: float, least: int
) -> int:
    """Send `texts` round robin for at least `seconds` and at least `least` searches; returns how
    many were sent. A collection's first searches at a table version have it read into memory in
    the background (`engine/lancedb/held.py`: seconds of tokenizing at SciFact's size, tens at
    100,000 chunks), which a client sees once per version, not in steady state."""
    started = time.monotonic()
    sent = 0
    while sent < least or time.monotonic() - started < seconds:
        await search(texts[sent % len(texts)])
        sent += 1
    return sent
