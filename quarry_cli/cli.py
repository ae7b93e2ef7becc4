"""`quarry`: ask the agent a question from the terminal, or run the whole suite locally.

quarry run            # what `make run` calls: three services, demo collection, how to ask
quarry ask "How do I ...?" --collection python-docs --mode thinking
quarry ingest docs/ README.md --collection mine
quarry collections list | show NAME | delete NAME --yes
quarry search "temporary directory" --collection python-docs
quarry status
quarry runs list | show ID | replay ID [--frozen]
quarry keygen         # a new API key and the SHA-256 digest the configuration stores

--json output is protobuf's JSON mapping with the proto field names (`run_id`, as grpcurl prints).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from quarry.agent.v1 import agent_pb2
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from quarry_cli.addresses import AGENT, SEARCH_TOOL
from quarry_cli.collections import (
    COLLECTIONS_EPILOG,
    SEARCH_EPILOG,
    add_collections_arguments,
    add_search_arguments,
    run_collections,
    run_search,
)
from quarry_cli.connection import (
    API_KEY_ENV,
    ConnectionOptionsError,
    add_tls_arguments,
    api_key,
    channel_tls,
    unreachable_hint,
)
from quarry_cli.filters import DEMO_FILTER, FILTER_HELP, FilterError, read_filter
from quarry_cli.output import exit_quietly_on_closed_pipe, message_json
from quarry_cli.probe import wrong_service_hint
from quarry_cli.questions import OUTCOMES, SKIPPED, TerminalQuestions
from quarry_cli.status import EPILOG as STATUS_EPILOG
from quarry_cli.status import add_arguments as add_status_arguments
from quarry_cli.status import run as run_status
from services.agent.client import MAX_LIMIT, AgentClient, RunOptions
from services.common.errors import QuarryError
from services.common.tls import ChannelTls
from services.search_tool.client import SearchToolClient

INTERRUPTED_EXIT = 130
BUILDING_CHECK_S = 2.0
"""How long `quarry ask` waits for the search tool to say whether the collection is building."""
STOP_REASONS = {
    agent_pb2.STOP_REASON_ANSWERED: "answered",
    agent_pb2.STOP_REASON_FORCED_ANSWER: "forced answer",
    agent_pb2.STOP_REASON_BUDGET_EXHAUSTED: "budget exhausted",
    agent_pb2.STOP_REASON_FALLBACK_ANSWER: "fallback answer",
}
STRATEGIES = {1: "semantic", 2: "keyword", 3: "hybrid"}
ASK_EPILOG = f"""examples (on the demo collection that `quarry run` builds):
  quarry ask "How do I create a temporary directory that is removed automatically?"
  quarry ask "How do I parse command-line options?" --mode thinking --limit 20
  quarry ask "What does functools.lru_cache do?" --filter {DEMO_FILTER}
  quarry ask "How do I read a CSV file?" --json | head -3

--filter: {FILTER_HELP}
The model may ask you a clarifying question: type the answer and press Enter (Ctrl-D skips).
Without a terminal on stdin nobody answers and the run goes on after a short wait;
--no-questions keeps the model from asking.
--json prints protobuf's JSON mapping with proto field names (run_id), as grpcurl does."""
RUN_EPILOG = """examples:
  quarry run
  quarry run --agent-port 6003 --search-tool-port 6001 --llm-gateway-port 6002
  quarry run --no-demo --data-dir /tmp/quarry"""


def main(argv: Sequence[str] | None = None) -> None:
    """Run one command; a reader that closes our output early (`| head`) ends it quietly, and
    Ctrl-C ends it with one line and exit status 130 (the shell's for SIGINT), no traceback."""
    try:
        _main(argv)
    except BrokenPipeError:
        exit_quietly_on_closed_pipe()
    except KeyboardInterrupt:
        print("quarry: interrupted", file=sys.stderr, flush=True)
        sys.exit(INTERRUPTED_EXIT)


def _main(argv: Sequence[str] | None) -> None:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command in _COMMANDS:
        sys.exit(_COMMANDS[args.command](args))
    if args.command == "ask":
        sys.exit(asyncio.run(ask(args)))
    if args.command == "run":
        from quarry_cli.runner import run_suite

        sys.exit(run_suite(args))
    if args.command == "keygen":
        from quarry_cli.keys import keygen

        sys.exit(keygen(args))
    parser.print_help()
    sys.exit(2)


def command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` ran, e.g. `quarry runs list`'s: a mistyped flag is
    reported with that command's usage, not the top-level one."""
    for dest in ("command", "action"):
        subparsers = next(
            (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        chosen = getattr(args, dest, None)
        if subparsers is None or chosen not in subparsers.choices:
            break
        parser = subparsers.choices[chosen]
    return parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quarry",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command")
    ask_parser = _command(
        commands,
        "ask",
        "ask the agent and watch it search, then read the answer with its sources",
        ASK_EPILOG,
    )
    ask_parser.add_argument("question")
    ask_parser.add_argument("--collection", default="python-docs", help="default %(default)s")
    ask_parser.add_argument(
        "--mode", choices=["fast", "thinking"], default="fast", help="default %(default)s"
    )
    ask_parser.add_argument(
        "--address", default=AGENT.address(), help=f"agent HOST:PORT (default {AGENT.help()})"
    )
    ask_parser.add_argument(
        "--search-tool",
        default=SEARCH_TOOL.address(),
        help="search tool HOST:PORT, asked whether the collection is still being built "
        f"(default {SEARCH_TOOL.help()}; skipped when it does not answer)",
    )
    ask_parser.add_argument("--filter", help="caller filter, see below")
    ask_parser.add_argument(
        "--limit",
        type=_limit,
        default=0,
        help=f"results returned with the answer, 1..{MAX_LIMIT} (default: the agent's, 10); "
        "each search fetches at least this many",
    )
    ask_parser.add_argument("--route", default="", help="LLM gateway route (default: the agent's)")
    ask_parser.add_argument(
        "--max-iterations", type=int, default=0, help="searches allowed (default: the mode's cap)"
    )
    ask_parser.add_argument(
        "--max-tokens", type=int, default=0, help="token budget of the run (default: unlimited)"
    )
    ask_parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds (default %(default)s)"
    )
    ask_parser.add_argument(
        "--tools",
        default="",
        help="comma-separated tools the run may use (search,read,count,calculate; default all) "
        "and the opt-in ones (web_search: the web, outside your filter; summarize)",
    )
    ask_parser.add_argument(
        "--no-questions",
        action="store_true",
        help="do not let the model ask you a clarifying question (asked in the terminal)",
    )
    ask_parser.add_argument("--json", action="store_true", help="one JSON event per line")
    add_tls_arguments(ask_parser, "the agent")
    run_parser = _command(
        commands,
        "run",
        "run the three services locally and build the demo collection (make run)",
        RUN_EPILOG,
    )
    from quarry_cli.runner import add_arguments

    add_arguments(run_parser)
    from quarry_cli.ingest import command as ingest_command

    ingest_command.add_arguments(
        _command(
            commands, "ingest", "load files and folders into a collection", ingest_command.EPILOG
        )
    )
    add_collections_arguments(
        _command(commands, "collections", "list, show or delete collections", COLLECTIONS_EPILOG)
    )
    add_search_arguments(
        _command(commands, "search", "search a collection directly (no agent)", SEARCH_EPILOG)
    )
    from quarry_cli.keys import EPILOG as KEYGEN_EPILOG
    from quarry_cli.keys import add_arguments as add_keygen_arguments

    add_keygen_arguments(
        _command(
            commands, "keygen", "make an API key and the digest to configure for it", KEYGEN_EPILOG
        )
    )
    add_status_arguments(
        _command(
            commands,
            "status",
            "health of the services, the gateway's routes and breakers, collections",
            STATUS_EPILOG,
        )
    )
    from quarry_cli import runs

    runs.add_arguments(
        _command(
            commands, "runs", "the agent's recorded runs: list, show, replay", runs.RUNS_EPILOG
        )
    )
    return parser


def _limit(text: str) -> int:
    """`--limit`: a whole number of results within what the agent returns at most."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_LIMIT} (the most a run returns)")
    return value


def _command(commands: Any, name: str, summary: str, epilog: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _run_ingest(args: argparse.Namespace) -> int:
    from quarry_cli.ingest.command import run

    return run(args)


def _run_runs(args: argparse.Namespace) -> int:
    from quarry_cli.runs import run

    return run(args)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "runs": _run_runs,
    "ingest": _run_ingest,
    "collections": run_collections,
    "search": run_search,
    "status": run_status,
}


async def ask(args: argparse.Namespace) -> int:
    """Stream one run and render it; 0 when it ended with an answer."""
    console = Console(highlight=False)
    try:
        caller_filter = read_filter(args.filter) if args.filter else None
    except FilterError as error:
        console.print(f"[red]--filter:[/] {escape(str(error))}")
        return 2
    render = _print_json if args.json else _Renderer(console)
    try:
        tls = channel_tls(args)
    except ConnectionOptionsError as error:
        console.print(f"[red]TLS options:[/] {escape(str(error))}")
        return 2
    try:
        async with AgentClient(args.address, api_key=api_key(), tls=tls) as agent:
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
                tools=_tools(args),
            )
            questions = TerminalQuestions(agent, Console(highlight=False, stderr=args.json))
            building = asyncio.ensure_future(building_note(args, tls))
            try:
                async for event in agent.stream_run(args.question, options):
                    render(event)
                    if event.WhichOneof("event") == "started":
                        _print_note(await building, console, as_json=args.json)
                    await questions.on_event(event)
                    ended_well = event.WhichOneof("event") == "done"
            finally:
                building.cancel()
                await asyncio.gather(building, return_exceptions=True)
                await questions.close()
            return 0 if ended_well else 1
    except QuarryError as error:
        if args.json:
            print(json.dumps({"error": {"code": error.code, "message": error.message}}))
        else:
            console.print(f"[red bold]{error.code}[/] {escape(error.message)}", soft_wrap=True)
            if error.code == "UNAVAILABLE":
                hint = unreachable_hint(error.message, tls, "agent", args.address)
                console.print(f"[dim]{escape(hint)}[/]", soft_wrap=True)
            if error.code == "UNAUTHENTICATED":
                console.print(f"[dim]Set {API_KEY_ENV} to your API key.[/]")
            if error.code == "UNIMPLEMENTED":
                hint = await wrong_service_hint(args.address, "quarry.agent.v1.AgentService")
                console.print(escape(hint))
        return 1


def _tools(args: argparse.Namespace) -> list[str]:
    """The run's tools: those of --tools (empty: all), and `ask_user` unless --no-questions."""
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    return tools if args.no_questions else [*tools, "ask_user"]


async def building_note(args: argparse.Namespace, tls: ChannelTls) -> str:
    """A warning when the search tool reports the collection still being built; empty when it
    does not, or cannot be asked (the check is a courtesy, never a reason to fail)."""
    try:
        async with SearchToolClient(
            args.search_tool, timeout_s=BUILDING_CHECK_S, api_key=api_key(), tls=tls
        ) as client:
            info = await client.get_collection(args.collection)
    except QuarryError:
        return ""
    if not info.building:
        return ""
    return (
        f"{info.name} is still being built ({info.document_count} documents so far): "
        "the answer may miss documents that are not in yet"
    )


def _print_note(note: str, console: Console, *, as_json: bool) -> None:
    if note and as_json:
        print(f"quarry: {note}", file=sys.stderr, flush=True)
    elif note:
        console.print(f"[yellow]note:[/] {escape(note)}")


def _print_json(event: agent_pb2.StreamRunResponse) -> None:
    print(json.dumps(message_json(event), ensure_ascii=False), flush=True)


def source_lines(citations: Sequence[agent_pb2.Citation]) -> list[tuple[str, str, str]]:
    """(markers, title, url) per source: citations of one page (chunks of one document) share a
    line, `[1][3]`, instead of listing the same source twice; a web page's title ends `(web)`."""
    grouped: dict[tuple[str, str], list[int]] = {}
    for n, citation in enumerate(citations, start=1):
        title = citation.title or citation.result_id
        key = (f"{title} (web)" if citation.web else title, citation.url)
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
        if kind is None:
            return
        message = getattr(event, kind)
        error = _tool_error(event, kind)
        if error:
            name = TOOL_OF_EVENT.get(kind or "", kind)
            self.console.print(f"[cyan]{name}[/] [red]refused:[/] {escape(error)}")
            return
        line = LINES.get(kind)
        if line is None:
            self._other(kind, message)
        else:
            line(self, message)

    def _started(self, s: agent_pb2.StartedEvent) -> None:
        mode = "thinking" if s.mode == agent_pb2.MODE_THINKING else "fast"
        self.console.print(
            f"[dim]run {s.run_id} · {escape(s.collection)} · {mode} · route {s.route}[/]"
        )

    def _thinking(self, t: agent_pb2.ThinkingEvent) -> None:
        self.console.print(f"[magenta]thinking[/] [italic]{escape(t.text)}[/]")

    def _question(self, q: agent_pb2.QuestionEvent) -> None:
        self.console.print(f"[yellow bold]question[/] {escape(q.text)}")

    def _question_closed(self, c: agent_pb2.QuestionClosedEvent) -> None:
        answer = f" [italic]{escape(c.answer)}[/]" if c.answer and c.answer != SKIPPED else ""
        outcome = "skipped" if c.answer == SKIPPED else OUTCOMES.get(c.outcome, "closed")
        self.console.print(f"[yellow]question {outcome}[/]{answer}")

    def _error(self, e: agent_pb2.ErrorEvent) -> None:
        hint = " (retryable)" if e.retryable else ""
        self.console.print(
            f"[red bold]error {e.code}[/]{hint}: {escape(e.message)}", soft_wrap=True
        )

    def _other(self, kind: str, message: Message) -> None:
        """An event this CLI has no line of its own for (a tool added after it was written): its
        fields as JSON values, and its `error` in red when the call failed."""
        fields = MessageToDict(message, preserving_proto_field_name=True)
        fields.pop("step", None)
        error = fields.pop("error", "")
        detail = " ".join(f"{key}={json.dumps(value)}" for key, value in fields.items())
        outcome = f" [red]refused:[/] {escape(str(error))}" if error else ""
        self.console.print(f"[cyan]{escape(kind)}[/] {escape(detail)}{outcome}")

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

    def _web_searching(self, w: agent_pb2.WebSearchingEvent) -> None:
        if w.error:
            outcome = f"[red]failed:[/] {escape(w.error)}"
        else:
            cached = ", cached" if w.cached else ""
            outcome = f"→ {w.result_count} web results [dim]({escape(w.provider)}{cached})[/]"
        self.console.print(
            f"[cyan]web search {w.iteration}[/] [bold]{escape(w.query)}[/] {outcome} "
            f"[dim]in {w.duration_ms} ms[/]"
        )

    def _summarizing(self, s: agent_pb2.SummarizingEvent) -> None:
        if s.error:
            outcome = f"[red]refused:[/] {escape(s.error)}"
        else:
            outcome = f"→ {s.point_count} points citing {len(s.cited_ids)}"
        self.console.print(
            f"[cyan]summarize[/] {len(s.result_ids)} results [bold]{escape(s.focus)}[/] "
            f"{outcome} [dim]in {s.duration_ms} ms[/]"
        )

    def _done(self, done: agent_pb2.DoneEvent) -> None:
        response = done.response
        self.console.print(Panel(escape(response.answer.text), title="answer", expand=False))
        for markers, title, url in source_lines(response.answer.citations):
            link = f" [dim]{escape(url)}[/]" if url else ""
            self.console.print(f"  [bold]{escape(markers)}[/] {escape(title)}{link}")
        if response.answer.HasField("confidence") or response.answer.unanswered_parts:
            self.console.print(f"[dim]{escape(self_evaluation_line(response.answer))}[/]")
        if response.HasField("answered_by"):
            self.console.print(f"[dim]{escape(answered_by_line(response.answered_by))}[/]")
        usage = response.usage
        cost = f" · ${usage.cost_usd:.4f}" if usage.HasField("cost_usd") else ""
        self.console.print(
            f"[dim]{STOP_REASONS.get(response.stop_reason, 'done')} · "
            f"{response.iterations} searches · {usage.model_calls} model calls · "
            f"{usage.input_tokens} in / {usage.output_tokens} out tokens{cost}[/]"
        )


LINES: dict[str, Callable[[_Renderer, Any], None]] = {
    "started": _Renderer._started,
    "thinking": _Renderer._thinking,
    "searching": _Renderer._searching,
    "reading": _Renderer._reading,
    "counting": _Renderer._counting,
    "calculating": _Renderer._calculating,
    "web_searching": _Renderer._web_searching,
    "summarizing": _Renderer._summarizing,
    "question": _Renderer._question,
    "question_closed": _Renderer._question_closed,
    "done": _Renderer._done,
    "error": _Renderer._error,
}
"""The line of each event kind; any other kind (a newer tool's event) prints its fields."""

TOOL_OF_EVENT = {"searching": "search", "reading": "read", "counting": "count"}
"""Tool events that carry an `error` when the call failed (calculating prints its own)."""


def _tool_error(event: agent_pb2.StreamRunResponse, kind: str | None) -> str:
    """The error of a failed tool call's event, or ""."""
    if kind not in TOOL_OF_EVENT:
        return ""
    return str(getattr(event, kind).error)


if __name__ == "__main__":
    main()
