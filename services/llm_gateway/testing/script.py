"""What a fake provider server answers: a queue of scripted replies (`scripted_reply.Reply`).

Replies are consumed in order, one per model request; when the queue is empty the `default` reply
(if any) is repeated, otherwise the server answers HTTP 500 `fake script exhausted`. A script file
is the one format of `services.llm_gateway.scripted_reply`, the same the scripted provider replays
and the recorder writes.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

from services.llm_gateway.scripted_reply import Reply, ScriptedReplies


class Script:
    """A thread-safe queue of replies, shared by every request a fake server receives."""

    def __init__(self, replies: list[Reply] | None = None, *, default: Reply | None = None) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque(replies or [])
        self.default = default
        """Repeated once the queue is empty."""

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._queue.extend(replies)

    def reset(self, replies: list[Reply] | None = None, *, default: Reply | None = None) -> None:
        with self._lock:
            self._queue = deque(replies or [])
            self.default = default

    def next(self) -> Reply | None:
        """The reply to the next request; None when the script is exhausted."""
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            return self.default

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)


def load_script(path: Path) -> Script:
    """A script file (`ScriptedReplies`) as a queue."""
    document = ScriptedReplies.load(path)
    return Script(document.replies, default=document.default)
