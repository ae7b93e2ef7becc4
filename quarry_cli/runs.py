"""`quarry runs list | show ID | replay ID`: the agent's run history from the terminal.

`list` and `show` read `ListRuns` / `GetRun`; `--json` prints protobuf's JSON mapping (proto field
names, as grpcurl does). `replay` re-runs a recorded run with the scripted provider fed from its
step records (`quarry_cli.replay`) and exits 0 when it matches the record, 1 when it diverges.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

from google.protobuf import timestamp_pb2
from quarry.agent.v1 import agent_pb2
from rich.console import Console

from quarry_cli.addresses import AGENT, SEARCH_TOOL
from quarry_cli.connection import (
    API_KEY_ENV,
    ConnectionOptionsError,
    add_tls_arguments,
    api_key,
    channel_tls,
    unreachable_hint,
)
from quarry_cli.output import describe_error, error_json, print_json
from quarry_cli.replay import Replay, ReplayError, replay_run
from services.agent.client import AgentClient
from services.common.errors import FieldViolation, InvalidArgument, QuarryError

STATUSES = {
    "running": agent_pb2.RUN_STATUS_RUNNING,
    "completed": agent_pb2.RUN_STATUS_COMPLETED,
    "failed": agent_pb2.RUN_STATUS_FAILED,
    "cancelled": agent_pb2.RUN_STATUS_CANCELLED,
    "interrupted": agent_pb2.RUN_STATUS_INTERRUPTED,
}
RUNS_EPILOG = """examples:
  quarry runs list
  quarry runs list --collection python-docs --status failed --since 2026-01-01 --limit 20
  quarry runs show 3f2a9c... --json
  quarry runs replay 3f2a9c...            # live search tool: what changed in the collection
  quarry runs replay 3f2a9c... --frozen   # the recorded results: what changed in the agent

`replay` exits 0 when the new run matches the record, 1 when it diverges (it names the step and
what differed), 2 when it cannot run. The API key comes from $QUARRY_API_KEY."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="recorded runs, newest first")
    listing.add_argument("--collection", default="", help="only runs on this collection")
    listing.add_argument("--status", choices=list(STATUSES), help="only runs in this status")
    listing.add_argument("--since", help="only runs started at or after (ISO-8601)")
    listing.add_argument("--until", help="only runs started before (ISO-8601)")
    listing.add_argument("--limit", type=int, default=20, help="runs per page (default 20)")
    listing.add_argument("--page-token", default="", help="next_page_token of a previous page")
    show = actions.add_parser("show", help="one run: request, steps, answer, status")
    show.add_argument("run_id")
    replay = actions.add_parser("replay", help="re-run a recorded run and report divergence")
    replay.add_argument("run_id")
    replay.add_argument(
        "--frozen", action="store_true", help="use the recorded search results, not the live tool"
    )
    replay.add_argument(
        "--search-tool",
        default=SEARCH_TOOL.address(),
        help=f"search tool HOST:PORT for a live replay (default {SEARCH_TOOL.help()})",
    )
    for sub in actions.choices.values():
        add_tls_arguments(sub, "the agent (and a live replay's search tool)")
        sub.add_argument(
            "--address", default=AGENT.address(), help=f"agent HOST:PORT (default {AGENT.help()})"
        )
        sub.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
        sub.add_argument("--json", action="store_true", help="protobuf JSON mapping")


def run(args: argparse.Namespace) -> int:
    actions: dict[str, Callable[[AgentClient, argparse.Namespace], Awaitable[int]]] = {
        "list": _list,
        "show": _show,
        "replay": _replay,
    }
    return asyncio.run(_with_client(args, actions[args.action]))


async def _with_client(
    args: argparse.Namespace, action: Callable[[AgentClient, argparse.Namespace], Awaitable[int]]
) -> int:
    try:
        tls = channel_tls(args)
    except ConnectionOptionsError as error:
        Console(stderr=True, soft_wrap=True).print(f"TLS options: {error}", markup=False)
        return 2
    try:
        async with AgentClient(args.address, api_key=api_key(), tls=tls) as client:
            return await action(client, args)
    except QuarryError as error:
        if args.json:
            print_json(error_json(error))
        else:
            lines = [describe_error(error)]
            if error.code == "UNAUTHENTICATED":
                lines.append(f"Set {API_KEY_ENV} to your API key.")
            if error.code == "UNAVAILABLE":
                lines.append(unreachable_hint(error.message, tls, "agent", args.address))
            _errors().print("\n".join(lines), markup=False)
        return 2 if args.action == "replay" else 1


async def _list(client: AgentClient, args: argparse.Namespace) -> int:
    request = agent_pb2.ListRunsRequest(
        collection=args.collection,
        status=STATUSES[args.status] if args.status else agent_pb2.RUN_STATUS_UNSPECIFIED,
        page_size=args.limit,
        page_token=args.page_token,
    )
    if args.since:
        request.started_after.CopyFrom(_timestamp(args.since, "--since"))
    if args.until:
        request.started_before.CopyFrom(_timestamp(args.until, "--until"))
    reply = await client.list_runs(request, timeout_s=args.timeout)
    if args.json:
        print_json(reply)
        return 0
    rows = [
        (
            r.run_id,
            _when(r.started_at),
            r.collection,
            _status(r.status) + (f" ({r.error_code})" if r.error_code else ""),
            str(r.steps),
            str(r.input_tokens + r.output_tokens),
            r.query[:60],
        )
        for r in reply.runs
    ]
    console = Console(highlight=False, soft_wrap=True)
    for line in aligned(
        ("run id", "started", "collection", "status", "steps", "tokens", "query"), rows
    ):
        console.print(line, markup=False)
    if reply.next_page_token:
        console.print(f"more: --page-token {reply.next_page_token}", markup=False)
    return 0


async def _show(client: AgentClient, args: argparse.Namespace) -> int:
    run = await client.get_run(args.run_id, timeout_s=args.timeout)
    if args.json:
        print_json(run)
        return 0
    console = Console(highlight=False)

    def say(text: str) -> None:
        console.print(text, markup=False)

    say(f"run {run.run_id} · {_status(run.status)} · collection {run.collection}")
    say(f"  started {_when(run.started_at)}, ended {_when(run.ended_at)}")
    say(f"  question: {run.request.query}")
    if run.caller:
        say(f"  caller: {run.caller}")
    if run.error_code:
        say(f"  error: {run.error_code} {run.error_message}")
    for step in run.steps:
        tokens = f"{step.input_tokens}+{step.output_tokens} tokens"
        by = f"{step.answered_by.provider} ({step.answered_by.model})"
        say(f"step {step.index} · {by} · {tokens} · {step.duration_ms} ms")
        if step.text.strip():
            say(f"  {step.text.strip()[:300]}")
        for call in step.tool_calls:
            outcome = (
                f"error: {call.error[:200]}" if call.error else f"{len(call.result_ids)} results"
            )
            arguments = call.validated_arguments_json or call.arguments_json
            say(f"  → {call.name} {arguments[:200]} · {outcome} · {call.duration_ms} ms")
    if run.HasField("response"):
        answer = run.response.answer
        say(f"answer ({agent_pb2.StopReason.Name(run.response.stop_reason).lower()}):")
        say(f"  {answer.text}")
        for n, citation in enumerate(answer.citations, start=1):
            say(f"  [{n}] {citation.result_id} {citation.title}")
    return 0


async def _replay(client: AgentClient, args: argparse.Namespace) -> int:
    record = await client.get_run(args.run_id, timeout_s=args.timeout)
    if record.status != agent_pb2.RUN_STATUS_COMPLETED and not record.steps:
        raise InvalidArgument.for_field("run_id", f"run {args.run_id} recorded no step to replay")
    search_tool = "" if args.frozen else args.search_tool
    try:
        outcome = await replay_run(
            record, search_tool=search_tool, api_key=api_key(), search_tool_tls=channel_tls(args)
        )
    except ReplayError as error:
        _errors().print(f"replay failed: {error}", markup=False)
        return 2
    _print_replay(outcome, as_json=args.json)
    return 1 if outcome.diverged else 0


def _print_replay(outcome: Replay, *, as_json: bool) -> None:
    if as_json:
        print_json(outcome.to_json())
        return
    console = Console(highlight=False)
    mode = "recorded results" if outcome.frozen else "live search tool"
    report = outcome.to_json()
    console.print(
        f"replayed run {outcome.run_id} ({mode}) as {report['replay_run_id']}: "
        f"{report['replayed_steps']} steps (recorded {outcome.recorded_steps})",
        markup=False,
    )
    if not outcome.diverged:
        console.print("identical to the record", markup=False)
        return
    for d in outcome.differences:
        where = f"step {d.step}" if d.step else "run"
        console.print(f"diverges at {where}: {d.what}", markup=False)
        console.print(f"  recorded: {d.recorded[:300]}", markup=False)
        console.print(f"  replayed: {d.replayed[:300]}", markup=False)


def aligned(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """`head` and `rows` as columns padded to their widest cell, never cut: a run id printed here
    is the one `runs show` takes, whatever the terminal's width (`docker ps` style)."""
    widths = [max(len(cell) for cell in column) for column in zip(head, *rows, strict=True)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in (head, *rows)
    ]


def _timestamp(text: str, flag: str) -> timestamp_pb2.Timestamp:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument.for_violations(
            [FieldViolation(flag, f"{text!r} is not an ISO-8601 date or time")]
        ) from None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(when if when.tzinfo else when.replace(tzinfo=UTC))
    return stamp


def _status(status: int) -> str:
    return agent_pb2.RunStatus.Name(status).removeprefix("RUN_STATUS_").lower()


def _when(stamp: timestamp_pb2.Timestamp) -> str:
    if not stamp.seconds and not stamp.nanos:
        return "-"
    return stamp.ToDatetime(tzinfo=UTC).isoformat(timespec="seconds")


def _errors() -> Console:
    """stderr, lines unwrapped (a long status message is copied whole)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)
