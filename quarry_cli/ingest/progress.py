"""How an ingest shows its progress: a bar on a terminal, plain lines on stderr otherwise.

`quarry ingest` and the demo build of `quarry run` both report through `ProgressDisplay`.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as Bar

from quarry_cli.ingest.sync import Progress


class ProgressDisplay:
    """A rich bar on a terminal (units, chunks, chunks/s, ETA); on stderr otherwise, a line at
    most every second: `<label>: 12/40 files, 30 chunks, 9.5 chunks/s`."""

    def __init__(self, *, interactive: bool, label: str = "ingest", unit: str = "files") -> None:
        self._interactive = interactive
        self._label = label
        self._unit = unit
        self._bar: Bar | None = None
        self._task = TaskID(0)
        self._last_chunks = -1
        self._last_line = 0.0

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __call__(self, progress: Progress) -> None:
        rate = progress.chunks / progress.elapsed_s if progress.elapsed_s > 0 else 0.0
        if self._interactive:
            self._update_bar(progress, rate)
            return
        now = time.monotonic()
        last = progress.files_done == progress.files_total
        moved = progress.chunks != self._last_chunks and progress.chunks > 0
        if moved and (now - self._last_line >= 1.0 or last):
            self._last_chunks, self._last_line = progress.chunks, now
            print(
                f"{self._label}: {progress.files_done}/{progress.files_total} {self._unit}, "
                f"{progress.chunks} chunks, {rate:.1f} chunks/s",
                file=sys.stderr,
                flush=True,
            )

    def _update_bar(self, progress: Progress, rate: float) -> None:
        if self._bar is None:
            self._bar = Bar(
                TextColumn(self._label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(
                    f"{self._unit} · {{task.fields[chunks]}} chunks · {{task.fields[rate]:.1f}}/s"
                ),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._bar.start()
            self._task = self._bar.add_task(
                self._label, total=progress.files_total, chunks=0, rate=0.0
            )
        self._bar.update(
            self._task, completed=progress.files_done, chunks=progress.chunks, rate=rate
        )
