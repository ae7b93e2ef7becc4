"""`quarry collections list | show NAME | delete NAME --yes` and `quarry search`: the search tool,
from the terminal, through its public client."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

import grpc
from quarry.common.v1 import search_pb2
from quarry.searchtool.v1 import search_tool_pb2
from rich.console import Console
from rich.table import Table

from quarry_cli.addresses import SEARCH_TOOL
from quarry_cli.connection import (
    API_KEY_ENV,
    ConnectionOptionsError,
    add_tls_arguments,
    api_key,
    channel_tls,
    unreachable_hint,
)
from quarry_cli.filters import DEMO_FILTER, FILTER_HELP, FilterError, read_filter
from quarry_cli.output import describe_error, error_json, print_json
from quarry_cli.probe import wrong_service_hint
from services.common.errors import QuarryError
from services.common.status import code_of
from services.search_tool.client import SearchToolClient

SEARCH_TOOL_SERVICE = "quarry.searchtool.v1.SearchToolService"
SNIPPET_CHARS = 160
"""How much of a hit's text `quarry search` shows."""
STRATEGIES = {
    "hybrid": search_pb2.RETRIEVAL_STRATEGY_HYBRID,
    "semantic": search_pb2.RETRIEVAL_STRATEGY_SEMANTIC,
    "keyword": search_pb2.RETRIEVAL_STRATEGY_KEYWORD,
}
COLLECTIONS_EPILOG = """examples:
  quarry collections list
  quarry collections show python-docs
  quarry collections delete mine --yes"""
SEARCH_EPILOG = f"""examples:
  quarry search "temporary directory" --collection python-docs
  quarry search "temporary directory" --strategy keyword --limit 3 --json
  quarry search "temporary directory" --filter {DEMO_FILTER}

--filter: {FILTER_HELP}"""


def add_collections_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every collection with its document and chunk counts")
    show = actions.add_parser("show", help="one collection's facts: counts, fields, dates")
    show.add_argument("name")
    delete = actions.add_parser("delete", help="remove a collection and everything in it")
    delete.add_argument("name")
    delete.add_argument("--yes", action="store_true", help="really delete (required)")
    for sub in (parser, *actions.choices.values()):
        _connection_arguments(sub)


def add_search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("query")
    parser.add_argument("--collection", default="python-docs", help="default %(default)s")
    parser.add_argument("--strategy", choices=list(STRATEGIES), default="hybrid")
    parser.add_argument("--filter", help="see below")
    parser.add_argument("--limit", type=int, default=10, help="1..200 (default %(default)s)")
    parser.add_argument("--offset", type=int, default=0)
    _connection_arguments(parser)


def _connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--address",
        default=argparse.SUPPRESS,
        help=f"search tool HOST:PORT (default {SEARCH_TOOL.help()})",
    )
    parser.add_argument("--timeout", type=float, default=argparse.SUPPRESS, help="seconds (30)")
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    add_tls_arguments(parser, "the search tool", default=argparse.SUPPRESS)


def run_collections(args: argparse.Namespace) -> int:
    actions: dict[str, Callable[[SearchToolClient, argparse.Namespace], Awaitable[int]]] = {
        "list": _list,
        "show": _show,
        "delete": _delete,
    }
    if args.action == "delete" and not args.yes:
        Console(stderr=True).print(f"refusing to delete {args.name!r} without --yes")
        return 2
    return asyncio.run(_with_client(args, actions[args.action]))


def run_search(args: argparse.Namespace) -> int:
    return asyncio.run(_with_client(args, _search))


async def _with_client(
    args: argparse.Namespace,
    action: Callable[[SearchToolClient, argparse.Namespace], Awaitable[int]],
) -> int:
    address = getattr(args, "address", None) or SEARCH_TOOL.address()
    as_json = getattr(args, "json", False)
    try:
        tls = channel_tls(args)
    except ConnectionOptionsError as error:
        Console(stderr=True, soft_wrap=True).print(f"TLS options: {error}", markup=False)
        return 2
    try:
        async with SearchToolClient(
            address, timeout_s=getattr(args, "timeout", 30.0), api_key=api_key(), tls=tls
        ) as client:
            return await action(client, args)
    except FilterError as error:
        Console(stderr=True).print(f"--filter: {error}", markup=False)
        return 2
    except QuarryError as error:
        if as_json:
            print_json(error_json(error))
            return 1
        errors = Console(stderr=True, highlight=False, soft_wrap=True)
        errors.print(describe_error(error), markup=False)
        if code_of(error) is grpc.StatusCode.UNIMPLEMENTED:
            errors.print(await wrong_service_hint(address, SEARCH_TOOL_SERVICE), markup=False)
        elif code_of(error) is grpc.StatusCode.UNAUTHENTICATED:
            errors.print(f"Set {API_KEY_ENV} to an API key.", markup=False)
        elif code_of(error) is grpc.StatusCode.UNAVAILABLE:
            hint = unreachable_hint(error.message, tls, "search tool", address)
            errors.print(hint, markup=False)
        return 1


async def _list(client: SearchToolClient, args: argparse.Namespace) -> int:
    collections = await client.list_collections()
    if getattr(args, "json", False):
        print_json(search_tool_pb2.ListCollectionsResponse(collections=collections))
        return 0
    table = Table("collection", "documents", "chunks", "state")
    for c in collections:
        state = "building" if c.building else "ready"
        table.add_row(c.name, str(c.document_count), str(c.chunk_count), state)
    Console().print(table)
    return 0


async def _show(client: SearchToolClient, args: argparse.Namespace) -> int:
    c = await client.get_collection(args.name)
    if getattr(args, "json", False):
        print_json(c)
        return 0
    console = Console(highlight=False)
    state = " (still building: answers may miss documents)" if c.building else ""
    console.print(f"[bold]{c.name}[/]{state}")
    console.print(f"  {c.document_count} documents, {c.chunk_count} chunks")
    console.print(f"  embedding {c.embedding_model} ({c.embedding_dimensions} dimensions)")
    if c.keyword_language:
        console.print(f"  keyword search in {c.keyword_language} (words stemmed in it)")
    if c.HasField("earliest_created_at"):
        first = c.earliest_created_at.ToDatetime().date()
        last = c.latest_created_at.ToDatetime().date()
        console.print(f"  created {first} … {last}")
    for title, facets in (("sources", c.sources), ("entity types", c.entity_types)):
        top = ", ".join(f"{f.value} ({f.count})" for f in facets[:10])
        console.print(f"  {title}: {top}{' …' if len(facets) > 10 else ''}", markup=False)
    fields = ", ".join(
        f"{f.name}:{search_tool_pb2.FieldType.Name(f.type).removeprefix('FIELD_TYPE_').lower()}"
        for f in c.fields
    )
    console.print(f"  filterable fields: {fields}", markup=False)
    return 0


async def _delete(client: SearchToolClient, args: argparse.Namespace) -> int:
    await client.delete_collection(args.name)
    if getattr(args, "json", False):
        print_json({"deleted": args.name})
    else:
        print(f"deleted collection {args.name}")
    return 0


def hit_lines(n: int, result: search_pb2.SearchResult) -> str:
    """One hit: `n. score (dense, bm25) title · chunk id · source`, then its text's start."""
    chunk = result.chunk
    scores = [f"{result.score:.3f}"]
    if result.HasField("dense_score"):
        scores.append(f"dense {result.dense_score:.3f}")
    if result.HasField("keyword_score"):
        scores.append(f"bm25 {result.keyword_score:.2f}")
    head = f"{n:>3}. {' · '.join(scores)}  {chunk.title or chunk.id}  [{chunk.id}] {chunk.source}"
    return f"{head.rstrip()}\n     {snippet(chunk.text)}"


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """`text` on one line, cut at a word before `limit` characters with `…`."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[:limit].rsplit(" ", 1)[0] + " …"


async def _search(client: SearchToolClient, args: argparse.Namespace) -> int:
    request = search_tool_pb2.SearchRequest(
        collection=args.collection,
        query=search_pb2.SearchQuery(primary=args.query),
        strategy=STRATEGIES[args.strategy],
        filter=read_filter(args.filter) if args.filter else None,
        limit=args.limit,
        offset=args.offset,
    )
    reply = await client.search(request)
    if getattr(args, "json", False):
        print_json(reply, all_fields=True)
        return 0
    console = Console(highlight=False, soft_wrap=True)
    for n, result in enumerate(reply.results, start=args.offset + 1):
        console.print(hit_lines(n, result), markup=False)
    console.print(
        f"{len(reply.results)} of {reply.total_count} matching chunks in {reply.took_ms:.1f} ms",
        markup=False,
    )
    return 0
