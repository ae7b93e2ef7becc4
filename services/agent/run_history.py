"""The run history as the agent uses it: the `RunHistory` protocol, and what every implementation
shares (the `ListRuns` query, the page token, the status values).

The servicer records every run through a `RunRecorder` and answers `GetRun` / `ListRuns` from a
`RunHistory`; it knows nothing of where runs are kept. `history.RunStore` (embedded SQLite, one
process) is the first implementation; a shared database for several replicas is the second. An
implementation stores the records as given and returns them as stored: the values are the
`quarry.agent.v1` records (`RunRecord`, `StepRecord`, `StreamRunResponse`, `RunSummary`), which are
what `GetRun` / `ListRuns` return, so the history is a persistence edge like `convert.py` is the
wire edge (it converts nothing).

The write contract, shared by every implementation:

* **Order.** The writes of one run (`begin`, `append`..., `finish` or `finish_soon`) take effect
  in the order they were made. Events are numbered by their `seq` (from `first_seq`), steps by
  `StepRecord.index`; writing the same number again replaces it.
* **Queued writes never fail a run.** `begin`, `append` and `finish_soon` return at once; a
  storage failure is logged (and counted by the implementation) and the run goes on: the
  history is a record of the run, never a reason to fail it.
* **`finish` is awaited** so that a caller told the run is done finds it complete in `get`.
  A storage failure there is logged too and does not fail the run either (the caller has its
  answer; the record stays `running` and becomes `interrupted` when the history is next opened).
* **Reads** (`get`, `list_runs`, `collections`) raise `services.common.errors.Unavailable`
  (retryable) when the storage cannot answer, and an implementation-independent
  `InvalidArgument` naming `page_token` for a token it did not issue (`decode_page_token`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from quarry.agent.v1 import agent_pb2

from services.common.errors import InvalidArgument

RUNNING = agent_pb2.RUN_STATUS_RUNNING
COMPLETED = agent_pb2.RUN_STATUS_COMPLETED
FAILED = agent_pb2.RUN_STATUS_FAILED
CANCELLED = agent_pb2.RUN_STATUS_CANCELLED
INTERRUPTED = agent_pb2.RUN_STATUS_INTERRUPTED
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
INTERRUPTED_MESSAGE = "the agent process stopped during the run"
"""`error_message` of a run marked `interrupted`."""


@dataclass(frozen=True)
class RunQuery:
    """A page of `ListRuns`."""

    collections: Sequence[str] | None = None
    """Runs on these collections only; None: every collection; empty: none at all."""
    started_after: float | None = None
    """Seconds since the epoch, inclusive."""
    started_before: float | None = None
    """Seconds since the epoch, exclusive."""
    status: int = 0
    """A `RunStatus` value; 0: any."""
    page_size: int = DEFAULT_PAGE_SIZE
    page_token: str = ""
    """`encode_page_token` of the last run of the previous page; empty: the first page."""


class RunHistory(Protocol):
    """Where the agent keeps its runs (see the module docstring for the write contract)."""

    failed_writes: int
    """Writes lost to a storage failure since the history opened (each a gap in one record)."""

    def open(self) -> int:
        """Prepare the storage (schema, migrations), mark `interrupted` the runs left `running`
        by an agent that stopped (`mark_interrupted`), and apply retention; returns how many
        runs were marked. Called once while the agent starts, before it serves; it may block.
        Raises `OSError` naming the storage when it cannot be opened (the agent does not
        start)."""
        ...

    async def close(self) -> None:
        """Finish every queued write, then release the storage. Nothing is written after."""
        ...

    def begin(self, run: agent_pb2.RunRecord) -> None:
        """A run started (`run.status` RUNNING, `run.request`, `started_at`, caller, route, loop
        settings): queued, not awaited. The implementation stores `run` as it is now (the
        caller goes on changing it)."""
        ...

    def append(
        self,
        run_id: str,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        """Events (numbered from `first_seq`) and finished steps of a running run: queued."""
        ...

    async def finish(
        self,
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        """The run's end (status, `ended_at`, `response` without its steps — they are written
        by `append` / here, each once —, error, context window) with its last events and steps,
        in one write; returns once it is stored (or, on a
        storage failure, logged). Also the moment to apply retention when it is due."""
        ...

    def finish_soon(
        self,
        run: agent_pb2.RunRecord,
        first_seq: int,
        events: Sequence[agent_pb2.StreamRunResponse],
        steps: Sequence[agent_pb2.StepRecord],
    ) -> None:
        """`finish` from a task being cancelled, which cannot wait: queued."""
        ...

    async def forget(self, run_id: str) -> None:
        """Delete a run that was refused before it started (begun, never stepped), so only runs
        that started are recorded; awaited, and like every write never raises for storage."""
        ...

    async def get(self, run_id: str) -> agent_pb2.RunRecord | None:
        """The run in full (request, steps, events in order, response with its steps), or None
        for an unknown id or one past retention."""
        ...

    async def list_runs(self, query: RunQuery) -> tuple[list[agent_pb2.RunSummary], str]:
        """A page of summaries, newest first (`started_at` then `run_id`, both descending), and
        the next page's token (`encode_page_token` of the page's last run; "" on the last
        page). Keyset paging: a page stays stable while runs are added."""
        ...

    async def collections(self) -> list[str]:
        """Every collection with a recorded run (the caller's key decides which it may see)."""
        ...

    async def mark_interrupted(self) -> int:
        """Mark `interrupted` (with `INTERRUPTED_MESSAGE` and `ended_at` now) the runs whose agent
        stopped while they were `running`, keeping the steps they finished; returns how many.
        One process: every `running` row when the history opens. Several replicas: only the
        rows of replicas that are gone."""
        ...

    async def sweep(self) -> int:
        """Retention now: delete runs (with their steps and events) older than `max_age_days`
        (never a `running` one), then the oldest beyond `max_runs`; returns how many."""
        ...


def encode_page_token(started_at: float, run_id: str) -> str:
    """The token of the page after the run started at `started_at` with id `run_id`."""
    return base64.urlsafe_b64encode(f"{started_at!r}|{run_id}".encode()).decode()


def decode_page_token(token: str) -> tuple[float, str]:
    """The position a page token names; INVALID_ARGUMENT naming `page_token` otherwise."""
    try:
        started_at, run_id = base64.urlsafe_b64decode(token.encode()).decode().split("|", 1)
        return float(started_at), run_id
    except (ValueError, UnicodeError, binascii.Error):
        raise InvalidArgument.for_field(
            "page_token", "is not a token this service issued (pass next_page_token as is)"
        ) from None


# --- shared by every implementation: a record as it is stored and read back ---------------------


def copy_record(run: agent_pb2.RunRecord) -> agent_pb2.RunRecord:
    """What a queued write stores: the record as it is now, not as the caller changes it."""
    copy = agent_pb2.RunRecord()
    copy.CopyFrom(run)
    return copy


def stamp_seconds(stamp: Any) -> float:
    """A protobuf Timestamp as seconds since the epoch."""
    return float(stamp.ToNanoseconds()) / 1e9


def response_without_steps(response: agent_pb2.RunResponse | None) -> bytes | None:
    """The final response without its steps (they are stored once, in `run_steps`)."""
    if response is None:
        return None
    copy = agent_pb2.RunResponse()
    copy.CopyFrom(response)
    del copy.steps[:]
    return copy.SerializeToString()


def run_summary(row: Sequence[Any]) -> agent_pb2.RunSummary:
    """A `ListRuns` row (run_id, collection, query, status, started_at, ended_at, stop_reason,
    steps, input_tokens, output_tokens, error_code, caller) as its summary."""
    summary = agent_pb2.RunSummary(
        run_id=row[0],
        collection=row[1],
        query=row[2],
        status=row[3],
        stop_reason=row[6],
        steps=row[7],
        input_tokens=row[8],
        output_tokens=row[9],
        error_code=row[10],
        caller=row[11],
    )
    summary.started_at.FromNanoseconds(int(row[4] * 1e9))
    if row[5] is not None:
        summary.ended_at.FromNanoseconds(int(row[5] * 1e9))
    return summary
