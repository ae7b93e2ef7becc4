"""`quarry ingest PATH… --collection NAME`: the command line around `ingest`."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)

from quarry_cli.ingest.sync import IngestOptions, IngestSummary, ingest
from quarry_cli.ingest.sync import Progress as IngestProgress
from quarry_cli.output import describe_error, error_json, print_json
from services.common.errors import QuarryError
from services.search_tool.client import SearchToolClient

DEFAULT_SEARCH_TOOL = "127.0.0.1:50051"
EPILOG = """formats: text (.txt, no suffix), Markdown (front matter -> metadata, one document per
heading section, headings -> breadcrumbs), reStructuredText, HTML (main text, title), PDF (one
document per page, page in metadata), DOCX, JSON Lines records (id/_id, title, text; other keys ->
metadata: a BEIR corpus.jsonl loads as is), source code (language in metadata). Other and binary
files are skipped and counted.

A re-run sends only new and changed files (each document keeps metadata.content_sha256 in the
search tool) and --prune deletes documents whose files are gone.

examples:
  quarry ingest docs/ README.md --collection mine
  quarry ingest ~/notes --collection mine --source notes --prune
  quarry ingest corpus.jsonl --collection scifact --json
  quarry ingest docs/ --collection mine --dry-run"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files and folders")
    parser.add_argument("--collection", required=True, help="collection to fill (created if new)")
    parser.add_argument(
        "--address", default=DEFAULT_SEARCH_TOOL, help="search tool HOST:PORT (default %(default)s)"
    )
    parser.add_argument(
        "--source", default="", help="documents' source (default: each folder's name)"
    )
    parser.add_argument(
        "--base-url", default="", help="url prefix for documents (default: file:// paths)"
    )
    parser.add_argument("--prune", action="store_true", help="delete documents whose file is gone")
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would change, change nothing"
    )
    parser.add_argument(
        "--batch-size", type=int, default=64, help="documents per request (default %(default)s)"
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per request (default %(default)s)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    console = Console(stderr=True, highlight=False)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        console.print(f"[red]no such file or folder:[/] {', '.join(missing)}")
        return 2
    options = IngestOptions(
        collection=args.collection,
        paths=args.paths,
        source=args.source,
        base_url=args.base_url,
        prune=args.prune,
        dry_run=args.dry_run,
        batch_documents=args.batch_size,
    )
    try:
        with ProgressDisplay(interactive=sys.stderr.isatty() and not args.json) as display:
            async with SearchToolClient(args.address, timeout_s=args.timeout) as client:
                summary = await ingest(client, options, progress=display)
    except QuarryError as error:
        if args.json:
            print_json(error_json(error))
        else:
            console.print(describe_error(error), markup=False)
            console.print(
                "Documents stored so far are kept; run the same command again to finish.",
                style="dim",
            )
        return 1
    if args.json:
        print_json(summary.as_json())
    else:
        print_summary(summary)
    return 1 if summary.failed else 0


def print_summary(summary: IngestSummary) -> None:
    for path, reason in summary.failed:
        print(f"failed  {path}: {reason}")
    verb = "would be" if summary.dry_run else ""
    head = f"{summary.collection}{' (dry run)' if summary.dry_run else ''}:"
    print(
        f"{head} {summary.files} files · {summary.new} new · {summary.changed} changed · "
        f"{summary.unchanged} unchanged · {len(summary.skipped)} skipped · "
        f"{len(summary.failed)} failed · {summary.deleted} deleted{' ' + verb if verb else ''} · "
        f"{summary.chunks} chunks in {summary.seconds:.1f} s",
        flush=True,
    )


class ProgressDisplay:
    """A rich bar on a terminal (files, chunks, chunks/s, ETA); plain lines on stderr otherwise."""

    def __init__(self, *, interactive: bool) -> None:
        self._interactive = interactive
        self._bar: Progress | None = None
        self._task = TaskID(0)
        self._last_chunks = -1
        self._last_line = 0.0

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, progress: IngestProgress) -> None:
        rate = progress.chunks / progress.elapsed_s if progress.elapsed_s > 0 else 0.0
        if self._interactive:
            self._update_bar(progress, rate)
            return
        now = time.monotonic()
        last = progress.files_done == progress.files_total
        moved = progress.chunks != self._last_chunks and progress.chunks > 0
        if moved and (now - self._last_line >= 1.0 or last):
            self._last_chunks, self._last_line = progress.chunks, now
            print(
                f"ingest: {progress.files_done}/{progress.files_total} files, "
                f"{progress.chunks} chunks, {rate:.1f} chunks/s",
                file=sys.stderr,
                flush=True,
            )

    def _update_bar(self, progress: IngestProgress, rate: float) -> None:
        if self._bar is None:
            self._bar = Progress(
                TextColumn("ingest"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("files · {task.fields[chunks]} chunks · {task.fields[rate]:.1f}/s"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._bar.start()
            self._task = self._bar.add_task(
                "ingest", total=progress.files_total, chunks=0, rate=0.0
            )
        self._bar.update(
            self._task, completed=progress.files_done, chunks=progress.chunks, rate=rate
        )
