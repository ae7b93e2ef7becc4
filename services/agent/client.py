"""The async Python client of `quarry.agent.v1.AgentService`.

    async with AgentClient("127.0.0.1:50053") as agent:
        async for event in agent.stream_run("How do I ...?", collection="python-docs"):
            print(event.WhichOneof("event"))
        response = await agent.run("How do I ...?", collection="python-docs", mode="thinking")

`stream_run` yields the service's `StreamRunResponse` events as they arrive; a run that fails after
it started ends with an `error` event (and no exception). A request the service refuses outright
raises `AgentError`, as does `run` for any failure.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import grpc
from pydantic import TypeAdapter
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc
from quarry.common.v1 import search_pb2

from services.agent.filters import FilterGroup
from services.agent.wire import filter_message
from services.common.channels import open_channel
from services.common.errors import FieldViolation
from services.common.status import details_of_rpc_error
from services.common.telemetry import Telemetry

ModeName = Literal["fast", "thinking"]
_MODES = {"fast": agent_pb2.MODE_FAST, "thinking": agent_pb2.MODE_THINKING}
_GROUPS = TypeAdapter(list[FilterGroup])


@dataclass
class AgentError(Exception):
    """A run the agent refused or could not finish."""

    code: str
    """gRPC status code name, e.g. `INVALID_ARGUMENT`."""
    message: str
    retryable: bool = False
    violations: list[FieldViolation] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def parse_filter(groups: str | Sequence[dict[str, Any]] | dict[str, Any]) -> search_pb2.Filter:
    """A filter from JSON: a list of groups `[{"conditions": [{field, operator, value}]}]` (or
    `{"groups": [...]}`), operators in lower case as in the tool contract."""
    data = json.loads(groups) if isinstance(groups, str) else groups
    if isinstance(data, dict):
        data = data.get("groups", [])
    return filter_message(_GROUPS.validate_python(data))


class AgentClient:
    """One channel to the agent service; use as an async context manager or call `close`."""

    def __init__(self, address: str, *, telemetry: Telemetry | None = None) -> None:
        self._channel = open_channel(address, telemetry)
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close(None)

    async def stream_run(
        self,
        query: str,
        *,
        collection: str = "",
        mode: ModeName = "fast",
        filter: search_pb2.Filter | None = None,
        limit: int = 0,
        history: Sequence[tuple[str, str]] = (),
        max_iterations: int = 0,
        max_tokens: int = 0,
        route: str = "",
        timeout_s: float | None = None,
    ) -> AsyncIterator[agent_pb2.StreamRunResponse]:
        """Every event of one run as it happens: started, thinking, searching, done or error."""
        request = agent_pb2.StreamRunRequest(
            **_fields(query, collection, mode, filter, limit, history, max_iterations, max_tokens),
            route=route,
        )
        call = self._stub.StreamRun(request, timeout=timeout_s)
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

    async def run(
        self,
        query: str,
        *,
        collection: str = "",
        mode: ModeName = "fast",
        filter: search_pb2.Filter | None = None,
        limit: int = 0,
        history: Sequence[tuple[str, str]] = (),
        max_iterations: int = 0,
        max_tokens: int = 0,
        route: str = "",
        timeout_s: float | None = None,
    ) -> agent_pb2.RunResponse:
        """The final response of one run; `timeout_s` is the call's deadline."""
        request = agent_pb2.RunRequest(
            **_fields(query, collection, mode, filter, limit, history, max_iterations, max_tokens),
            route=route,
        )
        try:
            response: agent_pb2.RunResponse = await self._stub.Run(request, timeout=timeout_s)
            return response
        except grpc.aio.AioRpcError as error:
            raise _agent_error(error) from error


def _fields(
    query: str,
    collection: str,
    mode: ModeName,
    filter: search_pb2.Filter | None,
    limit: int,
    history: Sequence[tuple[str, str]],
    max_iterations: int,
    max_tokens: int,
) -> dict[str, Any]:
    return {
        "query": query,
        "collection": collection,
        "mode": _MODES[mode],
        "filter": filter,
        "limit": limit,
        "history": [agent_pb2.ConversationTurn(question=q, answer=a) for q, a in history],
        "budget": agent_pb2.Budget(max_iterations=max_iterations, max_tokens=max_tokens),
    }


def _agent_error(error: grpc.aio.AioRpcError) -> AgentError:
    details = details_of_rpc_error(error)
    return AgentError(details.code.name, details.message, details.retryable, details.violations)
