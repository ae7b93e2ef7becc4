"""Records one run in the run history (a `run_history.RunHistory`) while it happens.

The servicer hands every event to `event` and every finished step to `step` (the loop's
`on_step`); a step's end writes it with the events since the last write (one queued write per
step). The run's end is written by `completed` / `failed` (awaited, so a caller told the run is
done finds it in `GetRun`) or `cancelled` (queued: a cancelled task cannot wait). A run refused
INVALID_ARGUMENT before its first step (a caller filter the search tool refuses, a route the
gateway does not know) never started: its row is deleted rather than finished.
"""

from __future__ import annotations

import time
import uuid

from google.protobuf import timestamp_pb2
from quarry.agent.v1 import agent_pb2

from services.agent import convert
from services.agent.records import StepRecord
from services.agent.run import RunResult
from services.agent.run_history import CANCELLED, COMPLETED, FAILED, RUNNING, RunHistory


class RunRecorder:
    """See the module docstring; a recorder without a store records nothing."""

    def __init__(
        self,
        store: RunHistory | None,
        request: agent_pb2.RunRequest,
        *,
        collection: str,
        route: str,
        caller: str,
        loop_settings_json: str,
    ) -> None:
        self.run_id = uuid.uuid4().hex
        self._store = store
        self._record = agent_pb2.RunRecord(
            run_id=self.run_id,
            collection=collection,
            status=RUNNING,
            request=request,
            caller=caller,
            loop_settings_json=loop_settings_json,
            route=route,
            started_at=_now(),
        )
        self._events: list[agent_pb2.StreamRunResponse] = []
        self._steps: list[agent_pb2.StepRecord] = []
        self._written_events = 0
        self._stepped = False
        self.finished = False

    def start(self) -> None:
        if self._store is not None:
            self._store.begin(self._record)

    def event(self, message: agent_pb2.StreamRunResponse) -> None:
        self._events.append(message)

    def step(self, step: StepRecord) -> None:
        self._stepped = True
        self._steps.append(convert.step_message(step))
        if self._store is not None:
            self._store.append(self.run_id, self._written_events, self._events, self._steps)
        self._written_events += len(self._events)
        self._events, self._steps = [], []

    async def completed(self, result: RunResult) -> None:
        self._record.status = COMPLETED
        # Each step was converted once, as it ended (`step`); the history keeps the response
        # without them and adds the stored steps when it is read.
        self._record.response.CopyFrom(convert.run_response(result, with_steps=False))
        self._record.context_window_tokens = result.context_window_tokens
        await self._finish()

    async def failed(self, code: str, message: str) -> None:
        if code == "INVALID_ARGUMENT" and not self._stepped:
            self.finished = True
            if self._store is not None:
                await self._store.forget(self.run_id)
            return
        self._record.status = CANCELLED if code in ("CANCELLED", "DEADLINE_EXCEEDED") else FAILED
        self._record.error_code, self._record.error_message = code, message
        await self._finish()

    def cancelled(self) -> None:
        """The caller went away (the task is being cancelled): queued, not awaited."""
        if self.finished:
            return
        self.finished = True
        self._record.status = CANCELLED
        self._record.error_code = "CANCELLED"
        self._record.error_message = "the caller cancelled the run"
        self._record.ended_at.CopyFrom(_now())
        if self._store is not None:
            self._store.finish_soon(self._record, self._written_events, self._events, self._steps)

    async def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        self._record.ended_at.CopyFrom(_now())
        if self._store is not None:
            await self._store.finish(self._record, self._written_events, self._events, self._steps)


def _now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(time.time_ns())
    return stamp
