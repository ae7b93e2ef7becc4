"""`quarry`: ask the agent a question from the terminal, or run the whole suite locally.

quarry ask "How do I ...?" --collection python-docs --mode thinking
quarry run            # what `make run` calls: three services, demo collection, how to ask
quarry keygen         # a new API key and the SHA-256 digest the configuration stores
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence

from google.protobuf import json_format
from pydantic import ValidationError
from quarry.agent.v1 import agent_pb2
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from services.agent.client import AgentClient, AgentError, RunOptions, parse_filter
from services.common.tls import ChannelTls

DEFAULT_AGENT = "127.0.0.1:50053"
API_KEY_ENV = "QUARRY_API_KEY"
"""`quarry ask` sends this variable's value as its API key (never a flag: `ps` would show it)."""
STOP_REASONS = {
    agent_pb2.STOP_REASON_ANSWERED: "answered",
    agent_pb2.STOP_REASON_FORCED_ANSWER: "forced answer",
    agent_pb2.STOP_REASON_BUDGET_EXHAUSTED: "budget exhausted",
    agent_pb2.STOP_REASON_FALLBACK_ANSWER: "fallback answer",
}
STRATEGIES = {1: "semantic", 2: "keyword", 3: "hybrid"}


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "ask":
        sys.exit(asyncio.run(ask(args)))
    if args.command == "run":
        from quarry_cli.runner import run_suite

        sys.exit(run_suite(args))
    if args.command == "keygen":
        from quarry_cli.keys import keygen

        sys.exit(keygen())
    parser.print_help()
    sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="quarry", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")
    ask_parser = commands.add_parser("ask", help="ask the agent and watch it search")
    ask_parser.add_argument("question")
    ask_parser.add_argument("--collection", default="python-docs")
    ask_parser.add_argument("--mode", choices=["fast", "thinking"], default="fast")
    ask_parser.add_argument("--address", default=DEFAULT_AGENT, help="agent HOST:PORT")
    ask_parser.add_argument(
        "--filter",
        help='caller filter as JSON: [{"conditions": [{"field": "source", "operator": '
        '"equals", "value": "library"}]}]',
    )
    ask_parser.add_argument("--limit", type=int, default=0, help="results returned (1..200)")
    ask_parser.add_argument("--route", default="", help="LLM gateway route")
    ask_parser.add_argument("--max-iterations", type=int, default=0)
    ask_parser.add_argument("--max-tokens", type=int, default=0)
    ask_parser.add_argument(
        "--tools",
        default="",
        help="comma-separated tools the run may use (search,read,count,calculate); default all",
    )
    ask_parser.add_argument("--timeout", type=float, default=120.0, help="seconds")
    ask_parser.add_argument("--json", action="store_true", help="one JSON event per line")
    ask_parser.add_argument("--tls", action="store_true", help="speak TLS to the agent")
    ask_parser.add_argument("--ca-file", help="PEM CA of the agent's certificate (implies --tls)")
    ask_parser.add_argument("--cert-file", help="PEM client certificate for mTLS")
    ask_parser.add_argument("--key-file", help="PEM key of the client certificate")
    run_parser = commands.add_parser("run", help="run the three services locally (make run)")
    from quarry_cli.runner import add_arguments

    add_arguments(run_parser)
    commands.add_parser("keygen", help="make an API key and the digest to configure for it")
    return parser


async def ask(args: argparse.Namespace) -> int:
    """Stream one run and render it; 0 when it ended with an answer."""
    console = Console(highlight=False)
    try:
        caller_filter = parse_filter(args.filter) if args.filter else None
    except (ValueError, ValidationError) as error:
        console.print(f"[red]--filter is not a valid filter:[/] {escape(str(error))}")
        return 2
    render = _print_json if args.json else _Renderer(console)
    try:
        tls = ChannelTls(
            enabled=bool(args.tls or args.ca_file or args.cert_file),
            ca_file=args.ca_file,
            cert_file=args.cert_file,
            key_file=args.key_file,
        )
    except (ValueError, ValidationError) as error:
        console.print(f"[red]TLS options:[/] {escape(str(error))}")
        return 2
    api_key = os.environ.get(API_KEY_ENV, "")
    try:
        async with AgentClient(args.address, api_key=api_key, tls=tls) as agent:
            ended_well = False
            options = RunOptions(
                collection=args.collection,
                mode=args.mode,
                filter=caller_filter,
                limit=args.limit,
                max_iterations=args.max_iterations,
                max_tokens=args.max_tokens,
                route=args.route,
                timeout_s=args.timeout,
                tools=[t.strip() for t in args.tools.split(",") if t.strip()],
            )
            async for event in agent.stream_run(args.question, options):
                render(event)
                ended_well = event.WhichOneof("event") == "done"
            return 0 if ended_well else 1
    except AgentError as error:
        if args.json:
            print(json.dumps({"error": {"code": error.code, "message": error.message}}))
        else:
            console.print(f"[red bold]{error.code}[/] {escape(error.message)}")
            if error.code == "UNAVAILABLE":
                console.print(f"[dim]Is the agent running at {args.address}? Try `make run`.[/]")
            if error.code == "UNAUTHENTICATED":
                console.print(f"[dim]Set {API_KEY_ENV} to your API key.[/]")
        return 1


def _print_json(event: agent_pb2.StreamRunResponse) -> None:
    print(json.dumps(json_format.MessageToDict(event)), flush=True)


def source_lines(citations: Sequence[agent_pb2.Citation]) -> list[tuple[str, str, str]]:
    """(markers, title, url) per source: citations of one page (chunks of one document) share a
    line, `[1][3]`, instead of listing the same source twice."""
    grouped: dict[tuple[str, str], list[int]] = {}
    for n, citation in enumerate(citations, start=1):
        key = (citation.title or citation.result_id, citation.url)
        grouped.setdefault(key, []).append(n)
    return [("".join(f"[{n}]" for n in ns), title, url) for (title, url), ns in grouped.items()]


def self_evaluation_line(answer: agent_pb2.Answer) -> str:
    """`confidence 0.40 · unanswered: …`, from the model's own evaluation of its answer."""
    parts = []
    if answer.HasField("confidence"):
        parts.append(f"confidence {answer.confidence:.2f}")
    if answer.unanswered_parts:
        parts.append("unanswered: " + "; ".join(answer.unanswered_parts))
    return " · ".join(parts)


def answered_by_line(answered_by: agent_pb2.AnsweredBy) -> str:
    """`answered by <provider> (<model>)`, and the fallback with its reason when there was one."""
    model = f" ({answered_by.model})" if answered_by.model else ""
    line = f"answered by {answered_by.provider}{model}"
    if answered_by.fallback:
        line += f" · fallback after {answered_by.fallback_reason}"
    return line


class _Renderer:
    """Prints each event as it arrives: thinking, searches, then the answer with sources."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, event: agent_pb2.StreamRunResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "started":
            s = event.started
            mode = "thinking" if s.mode == agent_pb2.MODE_THINKING else "fast"
            self.console.print(
                f"[dim]run {s.run_id[:8]} · {escape(s.collection)} · {mode} · route {s.route}[/]"
            )
        elif kind == "thinking":
            self.console.print(f"[magenta]thinking[/] [italic]{escape(event.thinking.text)}[/]")
        elif kind == "searching":
            self._searching(event.searching)
        elif kind == "reading":
            self._reading(event.reading)
        elif kind == "counting":
            self._counting(event.counting)
        elif kind == "calculating":
            self._calculating(event.calculating)
        elif kind == "done":
            self._done(event.done.response)
        elif kind == "error":
            e = event.error
            hint = " (retryable)" if e.retryable else ""
            self.console.print(f"[red bold]error {e.code}[/]{hint}: {escape(e.message)}")

    def _searching(self, s: agent_pb2.SearchingEvent) -> None:
        strategy = STRATEGIES.get(s.strategy, "hybrid")
        filtered = " filtered" if s.filter.groups else ""
        self.console.print(
            f"[cyan]search {s.iteration}[/] [bold]{escape(s.query.primary)}[/] "
            f"[dim]({strategy}{filtered})[/] → {s.result_count} of {s.total_count} results "
            f"in {s.duration_ms} ms"
        )

    def _reading(self, r: agent_pb2.ReadingEvent) -> None:
        last = r.first_chunk + r.chunks_shown - 1
        self.console.print(
            f"[cyan]read[/] [bold]{escape(r.document_id)}[/] chunks {r.first_chunk}-{last} "
            f"of {r.chunk_count} [dim]in {r.duration_ms} ms[/]"
        )

    def _counting(self, c: agent_pb2.CountingEvent) -> None:
        by = f" by {', '.join(c.group_by)}" if c.group_by else ""
        bound = "" if c.exact else "at least "
        filtered = " (filtered)" if c.filter.groups else ""
        self.console.print(
            f"[cyan]count[/]{filtered}{escape(by)} → {bound}{c.document_count} documents "
            f"[dim]in {c.duration_ms} ms[/]"
        )

    def _calculating(self, c: agent_pb2.CalculatingEvent) -> None:
        outcome = f"= {escape(c.result)}" if not c.error else f"[red]refused:[/] {escape(c.error)}"
        self.console.print(f"[cyan]calculate[/] [bold]{escape(c.expression)}[/] {outcome}")

    def _done(self, response: agent_pb2.RunResponse) -> None:
        self.console.print(Panel(escape(response.answer.text), title="answer", expand=False))
        for markers, title, url in source_lines(response.answer.citations):
            link = f" [dim]{escape(url)}[/]" if url else ""
            self.console.print(f"  [bold]{escape(markers)}[/] {escape(title)}{link}")
        if response.answer.HasField("confidence") or response.answer.unanswered_parts:
            self.console.print(f"[dim]{escape(self_evaluation_line(response.answer))}[/]")
        if response.HasField("answered_by"):
            self.console.print(f"[dim]{escape(answered_by_line(response.answered_by))}[/]")
        usage = response.usage
        self.console.print(
            f"[dim]{STOP_REASONS.get(response.stop_reason, 'done')} · "
            f"{response.iterations} searches · {usage.model_calls} model calls · "
            f"{usage.input_tokens} in / {usage.output_tokens} out tokens[/]"
        )


if __name__ == "__main__":
    main()
