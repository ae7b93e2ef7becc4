"""`quarry ingest PATH… --collection NAME`: the command line around `ingest`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import grpc
from rich.console import Console

from quarry_cli.addresses import SEARCH_TOOL
from quarry_cli.connection import (
    API_KEY_ENV,
    ConnectionOptionsError,
    add_tls_arguments,
    api_key,
    channel_tls,
    unreachable_hint,
)
from quarry_cli.ingest.files import IngestOptions, ingest
from quarry_cli.ingest.progress import ProgressDisplay
from quarry_cli.ingest.sync import IngestSummary
from quarry_cli.output import describe_error, error_json, print_json
from services.common.errors import QuarryError
from services.common.status import code_of
from services.common.tls import ChannelTls
from services.search_tool.client import SearchToolClient

EPILOG = """formats: text (.txt, no suffix), Markdown (front matter -> metadata, one document per
heading section, headings -> breadcrumbs), reStructuredText, HTML (main text, title), PDF (one
document per page, page in metadata), DOCX, JSON Lines records (id/_id, title, text; other keys ->
metadata: a BEIR corpus.jsonl loads as is), source code (language in metadata), manual pages
(ls.1, titled ls(1)); any of these gzipped (ls.1.gz, notes.md.gz). Sphinx reStructuredText with
roles or directives docutils does not know is read as its text. Other and binary files are
skipped and counted.

A re-run sends only new and changed files (each document keeps metadata.content_sha256 in the
search tool) and --prune deletes documents whose files are gone.

The search tool is reached like every other command reaches its service: --tls / --ca-file (and
--cert-file / --key-file for mTLS), and the API key from $QUARRY_API_KEY (it needs write access
to the collection).

examples:
  quarry ingest docs/ README.md --collection mine
  quarry ingest ~/notes --collection mine --source notes --prune
  quarry ingest corpus.jsonl --collection scifact --json
  quarry ingest docs/ --collection mine --dry-run"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="files and folders")
    parser.add_argument("--collection", required=True, help="collection to fill (created if new)")
    parser.add_argument(
        "--address",
        default=SEARCH_TOOL.address(),
        help=f"search tool HOST:PORT (default {SEARCH_TOOL.help()})",
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
    add_tls_arguments(parser, "the search tool")


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        console.print(f"[red]no such file or folder:[/] {', '.join(missing)}")
        return 2
    try:
        tls = channel_tls(args)
    except ConnectionOptionsError as error:
        console.print(f"TLS options: {error}", markup=False)
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
            async with SearchToolClient(
                args.address, timeout_s=args.timeout, api_key=api_key(), tls=tls
            ) as client:
                summary = await ingest(client, options, progress=display)
    except QuarryError as error:
        if args.json:
            print_json(error_json(error))
        else:
            console.print(describe_error(error), markup=False)
            console.print(_what_to_do(error, args, tls), style="dim")
        return 1
    if args.json:
        print_json(summary.as_json())
    else:
        print_summary(summary)
    return 1 if summary.failed else 0


def _what_to_do(error: QuarryError, args: argparse.Namespace, tls: ChannelTls) -> str:
    """The next step after an ingest the search tool stopped: fix the key, the connection or
    the input first; run the command again only when that can help."""
    code = code_of(error)
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return f"Set {API_KEY_ENV} to an API key with write access to {args.collection!r}."
    if code is grpc.StatusCode.PERMISSION_DENIED:
        return (
            f"The API key in {API_KEY_ENV} may not write to {args.collection!r}: use a key whose "
            "`write` list names it (`quarry keygen --name ...`, then the search tool's keys)."
        )
    if code is grpc.StatusCode.UNAVAILABLE:
        hint = unreachable_hint(error.message, tls, "search tool", args.address)
        return f"{hint} Documents stored so far are kept; the same command then finishes the job."
    if code in _RETRYABLE:
        return "Documents stored so far are kept; run the same command again to finish."
    return "Documents stored so far are kept; fix the cause above, then run the command again."


_RETRYABLE = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}


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
