"""The async Python client of `quarry.agent.v1.AgentService`.

    async with AgentClient("127.0.0.1:50053") as agent:
        async for event in agent.stream_run("How do I ...?", RunOptions(collection="python-docs")):
            print(event.WhichOneof("event"))
        options = RunOptions(collection="python-docs", mode="thinking", timeout_s=60)
        response = await agent.run("How do I ...?", options)

`stream_run` yields the service's `StreamRunResponse` events as they arrive; a run that fails after
it started ends with an `error` event (and no exception). A request the service refuses outright
raises, as does `run` for any failure, the `services.common.errors` error of its status code
(`InvalidArgument` with its field violations, `NotFound`, `Unauthenticated`, `Unavailable`, ...):
the one tree `SearchToolClient` raises too, so `except QuarryError` handles both. Each error has
`code` (the status code's name), `message` and `retryable`. `AgentError` is that base,
`QuarryError`, under its old name, kept for callers that catch it.

A stream with `tools=["ask_user"]` may send a `question` event: acknowledge it at once
(`acknowledge_question`) when someone will answer, then `answer_question`, on the same client (the
question lives on the agent replica that runs the stream).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import grpc
from pydantic import TypeAdapter
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.common.v1 import search_pb2

from services.agent.filter_wire import filter_message
from services.agent.filters import FilterGroup
from services.agent.run import MAX_LIMIT as MAX_LIMIT  # the most results a run returns
from services.common.auth import StaticKey
from services.common.channels import open_channel
from services.common.errors import QuarryError
from services.common.status import domain_error
from services.common.telemetry import Telemetry
from services.common.tls import ChannelTls

ModeName = Literal["fast", "thinking"]
_MODES = {"fast": agent_pb2.MODE_FAST, "thinking": agent_pb2.MODE_THINKING}
_GROUPS = TypeAdapter(list[FilterGroup])


AgentError = QuarryError
"""The old name of what the client raises: `QuarryError`, the base of the one error tree (kept
so `except AgentError` still catches every failure; new code catches `QuarryError` or one of its
classes). Field violations are on `InvalidArgument` only; `str(error)` is the message."""


def parse_filter(groups: str | Sequence[dict[str, Any]] | dict[str, Any]) -> search_pb2.Filter:
    """A filter from JSON: a list of groups `[{"conditions": [{field, operator, value}]}]` (or
    `{"groups": [...]}`), operators in lower case as in the tool contract."""
    data = json.loads(groups) if isinstance(groups, str) else groups
    if isinstance(data, dict):
        data = data.get("groups", [])
    return filter_message(_GROUPS.validate_python(data))


@dataclass(frozen=True)
class RunOptions:
    """Everything about a run except the question; every field has the service's default."""

    collection: str = ""
    """Collection to search; empty means the agent's configured default collection."""
    mode: ModeName = "fast"
    """`fast`: one search, then the answer. `thinking`: the model searches as often as it needs."""
    filter: search_pb2.Filter | None = None
    """The caller's filter (see `parse_filter`); the model can narrow it, never widen it."""
    limit: int = 0
    """Results returned, 1..`MAX_LIMIT` (200); 0 means the agent's default (10)."""
    history: Sequence[tuple[str, str]] = ()
    """Earlier (question, answer) turns of the same conversation."""
    max_iterations: int = 0
    """Searches allowed; 0 means the mode's cap."""
    max_tokens: int = 0
    """Input + output tokens across model calls; 0 means unlimited."""
    route: str = ""
    """LLM gateway route; empty means the agent's configured route."""
    timeout_s: float | None = None
    """The call's deadline in seconds; None waits as long as the run takes."""
    tools: Sequence[str] = ()
    """Tools the run may use (`search`, `read`, `count`, `calculate`); empty means all. Add
    `ask_user` to let the model ask questions (streams only)."""
    question_acknowledge_s: float = 0.0
    """Streams: a shorter acknowledge window for questions; 0 keeps the agent's."""
    question_answer_s: float = 0.0
    """Streams: a shorter answer window for questions; 0 keeps the agent's."""
    temperature: float | None = None
    """Sampling temperature (0-2) for providers that support it; None: the provider's default."""
    seed: int | None = None
    """Sampling seed for providers that support it; None: none."""

    def request_fields(self, query: str) -> dict[str, Any]:
        """The fields `RunRequest` and `StreamRunRequest` share, for `query`."""
        return {
            "query": query,
            "collection": self.collection,
            "mode": _MODES[self.mode],
            "filter": self.filter,
            "limit": self.limit,
            "history": [agent_pb2.ConversationTurn(question=q, answer=a) for q, a in self.history],
            "budget": agent_pb2.Budget(
                max_iterations=self.max_iterations, max_tokens=self.max_tokens
            ),
            "route": self.route,
            "tools": list(self.tools),
            **({"temperature": self.temperature} if self.temperature is not None else {}),
            **({"seed": self.seed} if self.seed is not None else {}),
        }


class AgentClient:
    """One channel to the agent service; use as an async context manager or call `close`."""

    def __init__(
        self,
        address: str,
        *,
        telemetry: Telemetry | None = None,
        api_key: str = "",
        tls: ChannelTls | None = None,
    ) -> None:
        """`api_key` is sent as `authorization: Bearer <key>`; `tls` secures the channel."""
        self._channel = open_channel(address, telemetry, interceptors=[StaticKey(api_key)], tls=tls)
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close(None)

    async def stream_run(
        self, query: str, options: RunOptions | None = None
    ) -> AsyncIterator[agent_pb2.StreamRunResponse]:
        """Every event of one run as it happens: started, thinking, searching, done or error."""
        options = options or RunOptions()
        request = agent_pb2.StreamRunRequest(**options.request_fields(query))
        request.question_windows.acknowledge_timeout_s = options.question_acknowledge_s
        request.question_windows.answer_timeout_s = options.question_answer_s
        call = self._stub.StreamRun(request, timeout=options.timeout_s)
        ended_with_error = False
        try:
            async for event in call:
                ended_with_error = event.WhichOneof("event") == "error"
                yield event
        except grpc.aio.AioRpcError as error:
            if not ended_with_error:
                raise _agent_error(error) from error
        finally:
            call.cancel()

    async def run(self, query: str, options: RunOptions | None = None) -> agent_pb2.RunResponse:
        """The final response of one run."""
        options = options or RunOptions()
        request = agent_pb2.RunRequest(**options.request_fields(query))
        try:
            response: agent_pb2.RunResponse = await self._stub.Run(
                request, timeout=options.timeout_s
            )
            return response
        except grpc.aio.AioRpcError as error:
            raise _agent_error(error) from error

    async def acknowledge_question(
        self, run_id: str, question_id: str, *, timeout_s: float | None = 10.0
    ) -> float | None:
        """Tell the run its question is shown to someone; returns the seconds it now waits for
        the answer (None: until the run's deadline)."""
        request = agent_pb2.AcknowledgeQuestionRequest(run_id=run_id, question_id=question_id)
        try:
            reply = await self._stub.AcknowledgeQuestion(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            raise _agent_error(error) from error
        return reply.answer_within_ms / 1000 if reply.answer_within_ms else None

    async def answer_question(
        self, run_id: str, question_id: str, text: str, *, timeout_s: float | None = 10.0
    ) -> None:
        """Answer the run's question (this acknowledges it too)."""
        request = agent_pb2.AnswerQuestionRequest(run_id=run_id, question_id=question_id, text=text)
        try:
            await self._stub.AnswerQuestion(request, timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            raise _agent_error(error) from error

    async def get_run(self, run_id: str, *, timeout_s: float | None = 30.0) -> agent_pb2.RunRecord:
        """A recorded run: request, step records, events, final response, status."""
        try:
            reply: agent_pb2.GetRunResponse = await self._stub.GetRun(
                agent_pb2.GetRunRequest(run_id=run_id), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as error:
            raise _agent_error(error) from error
        return reply.run

    async def list_runs(
        self, request: agent_pb2.ListRunsRequest | None = None, *, timeout_s: float | None = 30.0
    ) -> agent_pb2.ListRunsResponse:
        """One page of recorded runs, newest first."""
        try:
            reply: agent_pb2.ListRunsResponse = await self._stub.ListRuns(
                request or agent_pb2.ListRunsRequest(), timeout=timeout_s
            )
        except grpc.aio.AioRpcError as error:
            raise _agent_error(error) from error
        return reply


def _agent_error(error: grpc.aio.AioRpcError) -> QuarryError:
    """The agent's status as the error of its code (the agent's own message, unprefixed)."""
    return domain_error(error)
