"""`quarry runs replay ID`: re-run a recorded run with the `scripted` provider fed from its step
records, and say where the new run diverges (seed 001 NFR-4).

The record's steps become a script (`scripted_reply.ScriptedReplies`, one reply per step: the
model's text, its tool calls as written, its token usage), served by an LLM gateway started in
this process with one `scripted` provider. The agent loop runs here too, with the recorded run's
loop settings and context window, against the live search tool (what changed in the collection
or in the agent shows up) or, with `--frozen`, against the results the record holds (what changed
in the agent alone shows up). Both runs are then compared step by step: the model's text, each
call's name and arguments, the results it showed, its error; then the stop reason and the answer.

The scripted provider picks its reply by the number of assistant messages in a request, so a
model turn with neither text nor tool calls, or a conversation compacted (Layer 3), cannot be
replayed position for position: the replay then diverges there, and says so.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quarry.agent.v1 import agent_pb2

from services.agent import convert
from services.agent.config import LoopSettings
from services.agent.events import Done
from services.agent.gateway_client import GatewayModelClient
from services.agent.loop import AgentLoop
from services.agent.ports import SearchClient
from services.agent.records import StepRecord
from services.agent.run import RunResult
from services.agent.search import (
    CollectionInfo,
    CountRequest,
    DocumentChunks,
    DocumentCount,
    ReadRequest,
    SearchPage,
    SearchRequest,
)
from services.agent.tools import COUNT, READ, SEARCH, SearchPlan
from services.common.channels import open_channel
from services.common.errors import NotFound, QuarryError
from services.common.settings import ServerSettings
from services.common.status import code_of
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.scripted_reply import (
    Reply,
    ScriptedReplies,
    ScriptedToolCall,
    ScriptedUsage,
)
from services.llm_gateway.server import build_gateway_server

REPLAY_ROUTE = "replay"
MAX_DIFFERENCES = 20


@dataclass(frozen=True)
class Difference:
    """One thing the replay did differently."""

    step: int
    """The step (from 1) where it differs; 0 for the run as a whole."""
    what: str
    """E.g. `tool_calls[0].result_ids`, `stop_reason`."""
    recorded: str
    replayed: str


@dataclass
class Replay:
    """A replayed run and how it compares with the record."""

    run_id: str
    frozen: bool
    recorded_steps: int
    replayed_steps: int = 0
    result: RunResult | None = None
    steps: list[StepRecord] = field(default_factory=list)
    """The replayed run's step records (also those of a replay that failed)."""
    error: str = ""
    """The replayed run's failure (`CODE message`), when it failed."""
    differences: list[Difference] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return bool(self.differences)

    def to_json(self) -> dict[str, Any]:
        first = self.differences[0] if self.differences else None
        return {
            "run_id": self.run_id,
            "frozen": self.frozen,
            "recorded_steps": self.recorded_steps,
            "replayed_steps": self.replayed_steps,
            "diverged": self.diverged,
            "first_divergence": vars(first) if first else None,
            "differences": [vars(d) for d in self.differences],
            "error": self.error,
        }


def script_of(record: agent_pb2.RunRecord) -> ScriptedReplies:
    """One reply per recorded step, after a placeholder for each earlier conversation turn (the
    scripted provider counts assistant messages, and each turn of `history` is one)."""
    placeholders = [Reply(text=turn.answer) for turn in record.request.history]
    return ScriptedReplies([*placeholders, *(_reply(s) for s in _steps(record))])


def _reply(step: agent_pb2.StepRecord) -> Reply:
    cached = step.cache_read_tokens + step.cache_write_tokens
    return Reply(
        text=step.text,
        tool_calls=[ScriptedToolCall(c.call_id, c.name, c.arguments_json) for c in step.tool_calls],
        usage=ScriptedUsage(
            input_tokens=max(step.input_tokens - cached, 0),
            output_tokens=step.output_tokens,
            cache_read_tokens=step.cache_read_tokens,
            cache_write_tokens=step.cache_write_tokens,
        ),
        model=step.answered_by.model,
    )


def _steps(record: agent_pb2.RunRecord) -> Sequence[agent_pb2.StepRecord]:
    return record.response.steps if record.HasField("response") else record.steps


async def replay_run(record: agent_pb2.RunRecord, *, search: SearchClient | None = None) -> Replay:
    """Replay `record` against `search` (None: frozen, from the record's results)."""
    frozen = search is None
    outcome = Replay(record.run_id, frozen=frozen, recorded_steps=len(_steps(record)))
    with tempfile.TemporaryDirectory(prefix="quarry-replay-") as folder:
        script = Path(folder) / "script.json"
        script_of(record).write(script)
        gateway = build_gateway_server(_gateway_settings(script, record.context_window_tokens))
        await gateway.start()
        channel = open_channel(gateway.address)
        try:
            loop = AgentLoop(
                GatewayModelClient(channel),
                search or FrozenSearch(record),
                settings=LoopSettings.model_validate_json(record.loop_settings_json or "{}"),
                default_route=REPLAY_ROUTE,
                context_window_tokens=record.context_window_tokens or None,
            )
            await _run(loop, record, outcome)
        finally:
            await channel.close(None)
            await gateway.stop(0)
    outcome.differences = compare(record, outcome)
    return outcome


async def _run(loop: AgentLoop, record: agent_pb2.RunRecord, outcome: Replay) -> None:
    request = agent_pb2.RunRequest()
    request.CopyFrom(record.request)
    request.route = ""
    steps: list[StepRecord] = []
    try:
        run = convert.run_request(request, default_collection=record.collection)
        async for event in loop.stream(run, on_step=steps.append):
            if isinstance(event, Done):
                outcome.result = event.result
    except QuarryError as error:
        outcome.error = f"{code_of(error).name} {error.message}"
    outcome.replayed_steps = len(steps)
    outcome.steps = steps


def _gateway_settings(script: Path, window: int) -> GatewaySettings:
    provider: dict[str, Any] = {
        "name": REPLAY_ROUTE,
        "kind": "scripted",
        "script": str(script),
        "retry": {"max_attempts": 1},
    }
    if window:
        provider["context_window_tokens"] = window
    return GatewaySettings.model_validate(
        {
            "server": ServerSettings(host="127.0.0.1", port=0, grace_s=0).model_dump(),
            "providers": [provider, {"kind": "extractive"}],
            "routes": {REPLAY_ROUTE: [REPLAY_ROUTE]},
            "default_route": REPLAY_ROUTE,
            "log_format": "text",
        }
    )


def compare(record: agent_pb2.RunRecord, replay: Replay) -> list[Difference]:
    """Every difference, the first divergence first (at most `MAX_DIFFERENCES`)."""
    recorded = list(_steps(record))
    replayed = [convert.step_message(s) for s in replay.steps]
    differences: list[Difference] = []
    for index in range(max(len(recorded), len(replayed))):
        if index >= len(recorded) or index >= len(replayed):
            differences.append(
                Difference(
                    index + 1,
                    "step",
                    "present" if index < len(recorded) else "absent",
                    "present" if index < len(replayed) else "absent",
                )
            )
            break
        differences += _step_differences(recorded[index], replayed[index])
    differences += _end_differences(record, replay)
    return differences[:MAX_DIFFERENCES]


def _step_differences(
    recorded: agent_pb2.StepRecord, replayed: agent_pb2.StepRecord
) -> list[Difference]:
    step = recorded.index
    out: list[Difference] = []
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


def _end_differences(record: agent_pb2.RunRecord, replay: Replay) -> list[Difference]:
    recorded_error = f"{record.error_code} {record.error_message}".strip()
    if replay.result is None or not record.HasField("response"):
        replayed = "completed" if replay.result is not None else replay.error
        recorded = "completed" if record.HasField("response") else recorded_error or "no response"
        return [] if recorded == replayed else [Difference(0, "outcome", recorded, replayed)]
    was, now = record.response, convert.run_response(replay.result)
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


class FrozenSearch:
    """The search tool as the record saw it: each search, read and count answered with what
    the recorded call showed (matched by its arguments, in order); anything else NOT_FOUND,
    which the model reads as a failed call and the comparison reports."""

    def __init__(self, record: agent_pb2.RunRecord) -> None:
        self.collection = record.collection
        calls = [c for s in _steps(record) for c in s.tool_calls if not c.error]
        self._searches = [(_plan_key(c), c) for c in calls if c.name == SEARCH]
        self._reads = [c for c in calls if c.name == READ]
        self._counts = [c for c in calls if c.name == COUNT]

    async def get_collection(self, name: str, *, remaining_s: float | None) -> CollectionInfo:
        return CollectionInfo(name=name)

    async def validate(self, request: SearchRequest, *, remaining_s: float | None) -> None:
        return None

    async def search(self, request: SearchRequest, *, remaining_s: float | None) -> SearchPage:
        key = _request_key(request)
        for n, (recorded_key, call) in enumerate(self._searches):
            if recorded_key == key:
                del self._searches[n]
                hits = [convert.search_hit(r) for r in call.results]
                return SearchPage(hits=hits, total_count=call.total_count)
        raise NotFound("frozen replay: the run recorded no such search")

    async def read_document(
        self, request: ReadRequest, *, remaining_s: float | None
    ) -> DocumentChunks:
        for n, call in enumerate(self._reads):
            if call.results and call.results[0].chunk.document_id == request.document_id:
                del self._reads[n]
                hits = [convert.search_hit(r) for r in call.results]
                return DocumentChunks(chunks=hits, chunk_count=int(call.total_count))
        raise NotFound("frozen replay: the run recorded no such read")

    async def count_documents(
        self, request: CountRequest, *, remaining_s: float | None
    ) -> DocumentCount:
        if not self._counts:
            raise NotFound("frozen replay: the run recorded no such count")
        call = self._counts.pop(0)
        return DocumentCount(document_count=int(call.total_count), chunk_count=0)


def _plan_key(call: agent_pb2.ToolCallRecord) -> str:
    plan = SearchPlan.model_validate_json(call.validated_arguments_json)
    return _key(
        plan.query.primary,
        list(plan.query.variations),
        plan.retrieval_strategy,
        [g.model_dump(mode="json") for g in plan.filter_groups],
        plan.limit,
        plan.offset,
    )


def _request_key(request: SearchRequest) -> str:
    return _key(
        request.primary,
        list(request.variations),
        request.strategy,
        [g.model_dump(mode="json") for g in request.filter_groups],
        request.limit,
        request.offset,
    )


def _key(*parts: object) -> str:
    return json.dumps(parts, sort_keys=True)
