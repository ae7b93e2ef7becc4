"""A service's CPU priority: `server.cpu_nice` applied to the whole process at start.

Linux keeps a niceness per thread (`setpriority(PRIO_PROCESS, pid)` changes only the thread whose
id is `pid`), and a new thread inherits its creator's. So the niceness is applied to every thread
the process has when the service starts, before gRPC, the engine or the embedder start theirs;
those inherit it. Elsewhere the process-wide call does the job. Niceness is only ever raised
(a lower priority needs no privilege): a service started under `nice -n 15` stays at 15.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

_TASKS = Path("/proc/self/task")


def lower_cpu_priority(nice: int) -> None:
    """Run every thread of this process, present and future, at niceness `nice` or above."""
    if nice <= 0:
        return
    if _TASKS.is_dir():
        for task in _TASKS.iterdir():
            tid = int(task.name)
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
            except ProcessLookupError:
                continue  # the thread ended meanwhile
    elif os.getpriority(os.PRIO_PROCESS, 0) < nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    log.info("running at a lower CPU priority", extra={"cpu_nice": nice})
