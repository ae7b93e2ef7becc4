"""`quarry runs replay ID`: re-run a recorded run with the `scripted` provider fed from its step
records, and say where the new run diverges (seed 001 NFR-4).

The record's steps become a script (the `scripted` provider's file format: one reply per step,
the model's text, its tool calls as written, its token usage). A replay LLM gateway and a replay
agent are started as processes (`python -m services.llm_gateway` / `services.agent`, on free
loopback ports, with a generated config): the gateway's one route is that `scripted` provider,
the agent has the recorded run's loop settings and context window, its own run history in a
temporary folder, and talks to the live search tool (what changed in the collection or the agent
shows up) or, with `--frozen`, to a search tool served here from the results the record holds
(what changed in the agent alone shows up). The recorded request is sent again through the
public client, and both runs are compared step by step: the model's text, each call's name and
arguments, the results it showed, its error; then the outcome, stop reason and answer.

The scripted provider picks its reply by the number of assistant messages in a request, so a
model turn with neither text nor tool calls, or a conversation compacted (Layer 3), cannot be
replayed position for position: the replay then diverges there, and says so. A `summarize`
call asks the replay gateway's extractive summary (`SUMMARY_ROUTE`): a run summarised offline
replays as it was, one summarised by a model shows where the extractive summary cites otherwise.
"""

from __future__ import annotations

import contextlib
import json
import socket
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from quarry.agent.v1 import agent_pb2
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from quarry_cli import service_environment
from quarry_cli.runner import Child, start, stop_all, wait_serving
from services.agent.client import AgentClient, RunOptions
from services.common.server import ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.tls import ChannelTls

REPLAY_ROUTE = "replay"
SUMMARY_ROUTE = "replay-summary"
"""The replay gateway's route for `summarize` (the offline extractive summary): a record keeps
the summary as the model read it, not the gateway's JSON, so summaries are written again."""
MAX_DIFFERENCES = 20
STARTUP_TIMEOUT_S = 120.0
_STRATEGIES = {1: "semantic", 2: "keyword", 3: "hybrid"}
_OWN_SETTINGS = ("QUARRY_AGENT_", "QUARRY_LLM_GATEWAY_", "QUARRY_CONFIG")
"""Environment the replay processes must not inherit: their config is the generated one."""


class ReplayError(Exception):
    """The replay could not run (a replay process did not start)."""


@dataclass(frozen=True)
class Difference:
    """One thing the replay did differently."""

    step: int
    """The step (from 1) where it differs; 0 for the run as a whole."""
    what: str
    """E.g. `tool_calls[0] (search).result_ids`, `stop_reason`."""
    recorded: str
    replayed: str


@dataclass
class Replay:
    """A replayed run and how it compares with the record."""

    run_id: str
    frozen: bool
    recorded_steps: int
    replayed: agent_pb2.RunRecord | None = None
    """The replay agent's record of the new run."""
    differences: list[Difference] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return bool(self.differences)

    def to_json(self) -> dict[str, Any]:
        first = self.differences[0] if self.differences else None
        replayed = self.replayed
        return {
            "run_id": self.run_id,
            "replay_run_id": replayed.run_id if replayed else "",
            "frozen": self.frozen,
            "recorded_steps": self.recorded_steps,
            "replayed_steps": len(replayed.steps) if replayed else 0,
            "diverged": self.diverged,
            "first_divergence": vars(first) if first else None,
            "differences": [vars(d) for d in self.differences],
            "error": f"{replayed.error_code} {replayed.error_message}".strip() if replayed else "",
        }


def script_of(record: agent_pb2.RunRecord) -> dict[str, Any]:
    """The `scripted` provider's file: one reply per recorded step, after a placeholder for
    each earlier conversation turn (the provider counts assistant messages; each turn of the
    request's `history` is one)."""
    placeholders = [{"text": turn.answer} for turn in record.request.history]
    return {"replies": [*placeholders, *(_reply(s) for s in steps_of(record))]}


def _reply(step: agent_pb2.StepRecord) -> dict[str, Any]:
    cached = step.cache_read_tokens + step.cache_write_tokens
    reply: dict[str, Any] = {
        "text": step.text,
        "tool_calls": [
            {"id": c.call_id, "name": c.name, "arguments": c.arguments_json}
            for c in step.tool_calls
        ],
        "usage": {
            "input_tokens": max(step.input_tokens - cached, 0),
            "output_tokens": step.output_tokens,
            "cache_read_tokens": step.cache_read_tokens,
            "cache_write_tokens": step.cache_write_tokens,
        },
    }
    if step.answered_by.model:
        reply["model"] = step.answered_by.model
    return reply


def steps_of(record: agent_pb2.RunRecord) -> Sequence[agent_pb2.StepRecord]:
    return record.response.steps if record.HasField("response") else record.steps


async def replay_run(
    record: agent_pb2.RunRecord,
    *,
    search_tool: str = "",
    api_key: str = "",
    search_tool_tls: ChannelTls | None = None,
) -> Replay:
    """Replay `record` against the search tool at `search_tool` ("" : frozen, from the
    record's results); `api_key` goes to the replay agent, which forwards it to the search
    tool, reached with `search_tool_tls` (plaintext when None)."""
    outcome = Replay(record.run_id, frozen=not search_tool, recorded_steps=len(steps_of(record)))
    with tempfile.TemporaryDirectory(prefix="quarry-replay-") as folder:
        async with contextlib.AsyncExitStack() as stack:
            frozen = await stack.enter_async_context(
                _frozen_search_tool(record, enabled=not search_tool)
            )
            agent = await stack.enter_async_context(
                _replay_services(
                    record,
                    Path(folder),
                    search_tool or frozen,
                    search_tool_tls if search_tool else None,
                )
            )
            outcome.replayed = await _run_again(agent, record, api_key)
    outcome.differences = compare(record, outcome.replayed)
    return outcome


async def _run_again(
    address: str, record: agent_pb2.RunRecord, api_key: str
) -> agent_pb2.RunRecord:
    """The recorded request again (the replay agent's own route); the replay agent's record."""
    async with AgentClient(address, api_key=api_key) as agent:
        run_id = ""
        async for event in agent.stream_run(record.request.query, _options(record)):
            run_id = run_id or event.started.run_id
        return await agent.get_run(run_id)


def _options(record: agent_pb2.RunRecord) -> RunOptions:
    request = record.request
    return RunOptions(
        collection=request.collection or record.collection,
        mode="thinking" if request.mode == agent_pb2.MODE_THINKING else "fast",
        filter=request.filter,
        limit=request.limit,
        history=[(t.question, t.answer) for t in request.history],
        max_iterations=request.budget.max_iterations,
        max_tokens=request.budget.max_tokens,
        tools=list(request.tools),
        temperature=request.temperature if request.HasField("temperature") else None,
        seed=request.seed if request.HasField("seed") else None,
    )


@asynccontextmanager
async def _replay_services(
    record: agent_pb2.RunRecord, folder: Path, search_tool: str, search_tool_tls: ChannelTls | None
) -> AsyncIterator[str]:
    """A gateway replaying the record's script and an agent using it; yields the agent."""
    script = folder / "script.json"
    script.write_text(json.dumps(script_of(record), ensure_ascii=False))
    gateway_port, agent_port = _free_port(), _free_port()
    provider: dict[str, Any] = {
        "name": REPLAY_ROUTE,
        "kind": "scripted",
        "script": str(script),
        "retry": {"max_attempts": 1},
    }
    window = record.context_window_tokens or None
    if window:
        provider["context_window_tokens"] = window
    config = {
        "llm_gateway": {
            "server": {"host": "127.0.0.1", "port": gateway_port, "grace_s": 0},
            "providers": [provider, {"kind": "extractive"}],
            "routes": {REPLAY_ROUTE: [REPLAY_ROUTE], SUMMARY_ROUTE: ["extractive"]},
            "default_route": REPLAY_ROUTE,
        },
        "agent": {
            "server": {"host": "127.0.0.1", "port": agent_port, "grace_s": 0},
            "search_tool_address": search_tool,
            "search_tool_tls": (search_tool_tls or ChannelTls()).model_dump(mode="json"),
            "llm_gateway_address": f"127.0.0.1:{gateway_port}",
            "route": REPLAY_ROUTE,
            "context_window_tokens": window,
            "loop": {
                **json.loads(record.loop_settings_json or "{}"),
                "summarize_route": SUMMARY_ROUTE,
            },
            "history": {"path": str(folder / "runs.sqlite3")},
        },
    }
    path = folder / "replay.yaml"
    path.write_text(yaml.safe_dump(config))
    children = [
        Child(
            "llm_gateway",
            "quarry.llmgateway.v1.LlmGatewayService",
            f"127.0.0.1:{gateway_port}",
            ["-m", "services.llm_gateway", "--config", str(path)],
        ),
        Child(
            "agent",
            "quarry.agent.v1.AgentService",
            f"127.0.0.1:{agent_port}",
            ["-m", "services.agent", "--config", str(path)],
        ),
    ]
    env = {k: v for k, v in service_environment().items() if not k.startswith(_OWN_SETTINGS)}
    try:
        for child in children:
            await start(child, folder, env=env)
            if not await wait_serving(child, STARTUP_TIMEOUT_S):
                log = child.log_path.read_text(errors="replace")[-2000:] if child.log_path else ""
                raise ReplayError(f"the replay {child.name} did not start:\n{log}")
        yield children[1].address
    finally:
        await stop_all(children)


@asynccontextmanager
async def _frozen_search_tool(record: agent_pb2.RunRecord, *, enabled: bool) -> AsyncIterator[str]:
    """A search tool answering from the record (see `FrozenSearchTool`); "" when not enabled."""
    if not enabled:
        yield ""
        return
    servicer = FrozenSearchTool(record)

    def register(server: grpc.aio.Server) -> None:
        search_tool_pb2_grpc.add_SearchToolServiceServicer_to_server(servicer, server)

    name = search_tool_pb2.DESCRIPTOR.services_by_name["SearchToolService"].full_name
    server = build_server(
        [ServiceRegistration(name, register)], ServerSettings(host="127.0.0.1", port=0, grace_s=0)
    )
    await server.start()
    try:
        yield server.address
    finally:
        await server.stop(0)


class FrozenSearchTool(search_tool_pb2_grpc.SearchToolServiceServicer):  # type: ignore[misc]
    """The search tool as the record saw it: each search, read, count and web search answered
    with what the recorded call showed (searches matched by query, strategy, limit and offset;
    reads by document; counts in order; web searches by query and limit, with the pages the
    model was shown); anything else NOT_FOUND, which the model reads as a failed call and the
    comparison reports. The collection's facts are not recorded: it reports its name.

    The agent fetches at least the run's `limit` for every search (the caller's results) while
    the model's call names its own: a recorded search is keyed by the limit the agent sent,
    `max(model limit, run limit)`, as the replayed agent sends it again."""

    def __init__(self, record: agent_pb2.RunRecord) -> None:
        calls = [c for s in steps_of(record) for c in s.tool_calls if not c.error]
        run_limit = run_limit_of(record)
        self._searches = [(_plan_key(c, run_limit), c) for c in calls if c.name == "search"]
        self._reads = [c for c in calls if c.name == "read"]
        self._counts = [c for c in calls if c.name == "count"]
        self._web = [c for c in calls if c.web]

    async def GetCollection(
        self, request: search_tool_pb2.GetCollectionRequest, context: Any
    ) -> search_tool_pb2.GetCollectionResponse:
        collection = search_tool_pb2.Collection(name=request.collection)
        return search_tool_pb2.GetCollectionResponse(collection=collection)

    async def Search(
        self, request: search_tool_pb2.SearchRequest, context: Any
    ) -> search_tool_pb2.SearchResponse:
        if request.validate_only:
            return search_tool_pb2.SearchResponse()
        key = _request_key(request)
        for n, (recorded, call) in enumerate(self._searches):
            if recorded == key:
                del self._searches[n]
                return search_tool_pb2.SearchResponse(
                    results=call.results, total_count=call.total_count
                )
        await context.abort(grpc.StatusCode.NOT_FOUND, "frozen replay: no such search recorded")
        raise AssertionError("unreachable")

    async def ReadDocument(
        self, request: search_tool_pb2.ReadDocumentRequest, context: Any
    ) -> search_tool_pb2.ReadDocumentResponse:
        for n, call in enumerate(self._reads):
            if call.results and call.results[0].chunk.document_id == request.document_id:
                del self._reads[n]
                return search_tool_pb2.ReadDocumentResponse(
                    chunks=[r.chunk for r in call.results], chunk_count=call.total_count
                )
        await context.abort(grpc.StatusCode.NOT_FOUND, "frozen replay: no such read recorded")
        raise AssertionError("unreachable")

    async def CountDocuments(
        self, request: search_tool_pb2.CountDocumentsRequest, context: Any
    ) -> search_tool_pb2.CountDocumentsResponse:
        if not self._counts:
            await context.abort(grpc.StatusCode.NOT_FOUND, "frozen replay: no count recorded")
        call = self._counts.pop(0)
        return search_tool_pb2.CountDocumentsResponse(document_count=call.total_count, exact=True)

    async def WebSearch(
        self, request: search_tool_pb2.WebSearchRequest, context: Any
    ) -> search_tool_pb2.WebSearchResponse:
        for n, call in enumerate(self._web):
            plan = json.loads(call.validated_arguments_json or "{}")
            if (plan.get("query"), plan.get("limit")) == (request.query, request.limit):
                del self._web[n]
                return web_response(call)
        await context.abort(grpc.StatusCode.NOT_FOUND, "frozen replay: no such web search recorded")
        raise AssertionError("unreachable")


def web_response(call: agent_pb2.ToolCallRecord) -> search_tool_pb2.WebSearchResponse:
    """A recorded `web_search` call's pages as the search tool's WebSearch returned them."""
    reply = search_tool_pb2.WebSearchResponse()
    for result in call.results:
        page = reply.results.add(
            id=result.chunk.id,
            title=result.chunk.title,
            url=result.chunk.url,
            snippet=result.chunk.text,
            provider=result.web.provider,
        )
        page.fetched_at.CopyFrom(result.web.fetched_at)
        reply.provider = result.web.provider
    return reply


def run_limit_of(record: agent_pb2.RunRecord) -> int:
    """The run's `limit`: the request's, else the agent's `loop.default_limit` (10)."""
    settings = json.loads(record.loop_settings_json or "{}")
    return record.request.limit or int(settings.get("default_limit", 10))


def _plan_key(call: agent_pb2.ToolCallRecord, run_limit: int) -> str:
    """A recorded search as the agent sent it to the search tool."""
    plan = json.loads(call.validated_arguments_json or "{}")
    query = plan.get("query", {})
    return json.dumps(
        [
            query.get("primary", ""),
            list(query.get("variations", [])),
            plan.get("retrieval_strategy", "hybrid"),
            max(plan.get("limit", 10), run_limit),
            plan.get("offset", 0),
        ]
    )


def _request_key(request: search_tool_pb2.SearchRequest) -> str:
    return json.dumps(
        [
            request.query.primary,
            list(request.query.variations),
            _STRATEGIES.get(request.strategy, "hybrid"),
            request.limit,
            request.offset,
        ]
    )


def compare(record: agent_pb2.RunRecord, replayed: agent_pb2.RunRecord | None) -> list[Difference]:
    """Every difference, the first divergence first (at most `MAX_DIFFERENCES`)."""
    if replayed is None:
        return [Difference(0, "outcome", "recorded", "the replay did not run")]
    was, now = list(steps_of(record)), list(steps_of(replayed))
    differences: list[Difference] = []
    for index in range(max(len(was), len(now))):
        if index >= len(was) or index >= len(now):
            present = ("present", "absent") if index < len(was) else ("absent", "present")
            differences.append(Difference(index + 1, "step", *present))
            break
        differences += _step_differences(was[index], now[index])
    differences += _end_differences(record, replayed)
    return differences[:MAX_DIFFERENCES]


def _step_differences(
    recorded: agent_pb2.StepRecord, replayed: agent_pb2.StepRecord
) -> list[Difference]:
    step = recorded.index
    out: list[Difference] = []
    if recorded.compacted != replayed.compacted:
        flags = str(recorded.compacted).lower(), str(replayed.compacted).lower()
        out.append(Difference(step, "compacted", *flags))
    if recorded.text != replayed.text:
        out.append(Difference(step, "text", recorded.text, replayed.text))
    names = [c.name for c in recorded.tool_calls], [c.name for c in replayed.tool_calls]
    if names[0] != names[1]:
        out.append(Difference(step, "tool_calls", ", ".join(names[0]), ", ".join(names[1])))
        return out
    for n, (was, now) in enumerate(zip(recorded.tool_calls, replayed.tool_calls, strict=True)):
        where = f"tool_calls[{n}] ({was.name})"
        pairs = (
            ("arguments", was.arguments_json, now.arguments_json),
            ("error", was.error, now.error),
            ("result_ids", ", ".join(was.result_ids), ", ".join(now.result_ids)),
        )
        out += [Difference(step, f"{where}.{what}", a, b) for what, a, b in pairs if a != b]
    return out


def _end_differences(
    record: agent_pb2.RunRecord, replayed: agent_pb2.RunRecord
) -> list[Difference]:
    def outcome(run: agent_pb2.RunRecord) -> str:
        status = agent_pb2.RunStatus.Name(run.status).removeprefix("RUN_STATUS_").lower()
        return f"{status} {run.error_code}".strip()

    if outcome(record) != outcome(replayed):
        return [Difference(0, "outcome", outcome(record), outcome(replayed))]
    if not (record.HasField("response") and replayed.HasField("response")):
        return []
    was, now = record.response, replayed.response
    pairs = (
        (
            "stop_reason",
            agent_pb2.StopReason.Name(was.stop_reason),
            agent_pb2.StopReason.Name(now.stop_reason),
        ),
        ("answer.text", was.answer.text, now.answer.text),
        (
            "answer.citations",
            ", ".join(c.result_id for c in was.answer.citations),
            ", ".join(c.result_id for c in now.answer.citations),
        ),
    )
    return [Difference(0, what, a, b) for what, a, b in pairs if a != b]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
