"""`quarry.agent.v1.AgentService`: protobuf in, the loop's events out.

`StreamRun` and `Run` share one code path (the loop's event stream). Once a run has started, a
failure is sent as an `error` event (with the dependency's RetryInfo delay as `retry_after`) and
the stream then ends with the same status; `Run` fails with that status. A request that cannot
start (bad fields) fails with INVALID_ARGUMENT at once; one over the agent's concurrency limit is
refused before it starts (RESOURCE_EXHAUSTED, by the shared admission interceptor).

When the server's grace period ends with runs still going, `cut_runs` ends each of them with an
UNAVAILABLE `error` event (retryable, retry after `CUT_RETRY_AFTER_S`) instead of a bare
cancellation.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
from quarry.agent.v1 import agent_pb2, agent_pb2_grpc

from services.agent import convert
from services.agent.config import AgentSettings
from services.agent.events import AgentEvent, Done, Failed
from services.agent.loop import AgentLoop
from services.agent.run import Deadline, RunRequest
from services.common.errors import QuarryError, Retryable, Unavailable
from services.common.status import code_of, is_retryable

log = logging.getLogger(__name__)

CUT_RETRY_AFTER_S = 1.0
"""The retry delay of a run cut by shutdown (another replica can usually take it at once)."""


class AgentServicer(agent_pb2_grpc.AgentServiceServicer):  # type: ignore[misc]
    def __init__(self, loop: AgentLoop, settings: AgentSettings) -> None:
        self._loop = loop
        self._settings = settings
        self._cut = asyncio.Event()

    async def cut_runs(self) -> None:
        """End every run still going with an UNAVAILABLE `error` event (grace period over)."""
        self._cut.set()

    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> agent_pb2.RunResponse:
        run = self._request(request)
        async for event in self._events(run, context):
            if isinstance(event, Done):
                return convert.run_response(event.result)
        raise QuarryError("the run ended without a result")

    async def StreamRun(
        self, request: agent_pb2.StreamRunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[agent_pb2.StreamRunResponse]:
        run = self._request(request)
        try:
            async for event in self._events(run, context):
                yield convert.event_message(event)
        except QuarryError as error:
            yield convert.event_message(failed_event(error))
            raise
        except Exception:
            log.exception("run failed unexpectedly", extra={"collection": run.collection})
            yield convert.event_message(Failed("INTERNAL", "internal error", retryable=False))
            raise

    async def _events(
        self, run: RunRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[AgentEvent]:
        """The loop's events until the run ends or `cut_runs` cuts it (then `Unavailable`).

        Each step of the loop runs as its own task, raced against the cut, all in one context
        (the loop's spans and context variables span its steps)."""
        events = self._loop.stream(run, deadline=_deadline(context))
        steps = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        cut = asyncio.ensure_future(self._cut.wait())
        step: asyncio.Future[AgentEvent] | None = None
        try:
            while True:
                step = loop.create_task(anext(events), context=steps)  # type: ignore[arg-type]
                await asyncio.wait({step, cut}, return_when=asyncio.FIRST_COMPLETED)
                if not step.done():
                    raise Unavailable(
                        "the agent is shutting down and its grace period is over; "
                        "run the question again",
                        retry_after_s=CUT_RETRY_AFTER_S,
                    )
                try:
                    event = step.result()
                except StopAsyncIteration:
                    return
                yield event
        finally:
            cut.cancel()
            if step is not None and not step.done():
                step.cancel()  # ends the loop where it waits (its model or search call)
                await asyncio.gather(step, return_exceptions=True)
            elif isinstance(events, AsyncGenerator):
                await loop.create_task(events.aclose(), context=steps)

    def _request(self, request: agent_pb2.RunRequest | agent_pb2.StreamRunRequest) -> RunRequest:
        return convert.run_request(
            request,
            default_collection=self._settings.default_collection,
            default_limit=self._settings.loop.default_limit,
            max_query_chars=self._settings.loop.max_query_chars,
            max_history_turns=self._settings.loop.max_history_turns,
        )


def failed_event(error: QuarryError) -> Failed:
    code = code_of(error)
    retry_after_s = error.retry_after_s if isinstance(error, Retryable) else None
    return Failed(
        code=code.name,
        message=error.message,
        retryable=is_retryable(code),
        retry_after_s=retry_after_s,
    )


def _deadline(context: grpc.aio.ServicerContext[Any, Any]) -> Deadline:
    return Deadline(context.time_remaining())
