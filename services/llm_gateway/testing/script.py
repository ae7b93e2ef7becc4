"""What a fake provider server answers: a queue of scripted replies and faults.

A `Script` is provider-neutral; each fake server renders a `Reply` in its own wire format. Replies
are consumed in order, one per model request; when the queue is empty the `default` reply (if any)
is repeated, otherwise the server answers HTTP 500 `fake script exhausted`.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml


@dataclass
class ScriptedToolCall:
    """A tool call the fake model makes."""

    id: str
    name: str
    arguments: str = "{}"
    """Raw JSON text sent exactly as written: may be empty or malformed on purpose."""


@dataclass
class ScriptedUsage:
    """Token counts of a reply, in the generic sense."""

    input_tokens: int = 10
    """Uncached input tokens."""
    output_tokens: int = 5
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass
class ScriptedError:
    """An error the server sends: as the HTTP response, or as a mid-stream error event."""

    status: int = 500
    message: str = ""
    """Empty: the provider's usual wording for `status` (or for `kind`)."""
    type: str = ""
    """Provider error type (`overloaded_error`, `server_error` ...); empty: from `status`."""
    code: str = ""
    """OpenAI-style structured code, e.g. `context_length_exceeded`."""
    kind: str = ""
    """`context_overflow`: the provider's own context-overflow wording and code."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. `retry-after`."""


@dataclass
class Reply:
    """One scripted answer to one model request."""

    text: str = ""
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    stop_reason: str = ""
    """Provider-native stop/finish reason; empty: derived from the content."""
    usage: ScriptedUsage = field(default_factory=ScriptedUsage)
    model: str = ""
    """Model name reported back; empty: the requested model."""
    chunk_size: int = 4
    """Characters per streamed text or argument delta."""
    error: ScriptedError | None = None
    """Answer with this HTTP error instead of a reply."""
    delay_s: float = 0.0
    """Wait this long before answering (or, with `stall_after_events`, mid-stream): a hang when it
    exceeds the client's timeout. Ends early when the client goes away."""
    stall_after_events: int | None = None
    """Streaming: send this many events, then wait `delay_s` before the rest."""
    cut_after_events: int | None = None
    """Streaming: send this many events, then end the body without the terminal event."""
    abort_after_events: int | None = None
    """Streaming: send this many events, then drop the connection mid-body (a broken transfer)."""
    stream_error: ScriptedError | None = None
    """Streaming: send this error inside the 200 stream (Anthropic `error` event, OpenAI
    `data: {"error": ...}`) after `stream_error_after_events` events, then end."""
    stream_error_after_events: int = 1
    whole_tool_call_chunks: bool = False
    """OpenAI streaming quirk: each tool call (id, name, all arguments) in one chunk."""
    anonymous_continuations: bool = False
    """OpenAI streaming quirk: argument continuation chunks carry neither id nor index."""
    refusal: str = ""
    """OpenAI: the model's refusal message (`message.refusal`, streamed as `delta.refusal`)."""

    @classmethod
    def rate_limited(cls, retry_after: str = "1", *, header: str = "retry-after") -> Reply:
        """HTTP 429 with a Retry-After header (seconds or an HTTP date; or `retry-after-ms`)."""
        return cls(error=ScriptedError(status=429, headers={header: retry_after}))

    @classmethod
    def server_error(cls, status: int = 500) -> Reply:
        return cls(error=ScriptedError(status=status))

    @classmethod
    def overloaded(cls) -> Reply:
        """Anthropic-style HTTP 529."""
        return cls(error=ScriptedError(status=529, type="overloaded_error", message="Overloaded"))

    @classmethod
    def context_overflow(cls, message: str = "", *, status: int = 400, code: str = "") -> Reply:
        """The provider's context-overflow error; empty `message`: its usual wording."""
        return cls(
            error=ScriptedError(status=status, message=message, code=code, kind="context_overflow")
        )

    @classmethod
    def unauthorized(cls, message: str = "") -> Reply:
        return cls(error=ScriptedError(status=401, message=message))

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Reply:
        """Answer nothing for `seconds` (past any sensible client timeout)."""
        return cls(delay_s=seconds)


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


_FAULTS: dict[str, Callable[..., Reply]] = {
    "rate_limited": Reply.rate_limited,
    "server_error": Reply.server_error,
    "overloaded": Reply.overloaded,
    "context_overflow": Reply.context_overflow,
    "unauthorized": Reply.unauthorized,
    "hang": Reply.hang,
}


def reply_from_dict(data: dict[str, Any]) -> Reply:
    """A `Reply` from its JSON/YAML form: `Reply` field names, or `{"fault": name, **args}`."""
    if "fault" in data:
        args = {k: v for k, v in data.items() if k != "fault"}
        return _FAULTS[data["fault"]](**args)
    known = {f.name for f in fields(Reply)}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"unknown reply fields: {sorted(unknown)}")
    values = dict(data)
    values["tool_calls"] = [ScriptedToolCall(**c) for c in data.get("tool_calls", [])]
    values["usage"] = ScriptedUsage(**data.get("usage", {}))
    for name in ("error", "stream_error"):
        if data.get(name) is not None:
            values[name] = ScriptedError(**data[name])
    return Reply(**values)


def replies_from_dict(data: dict[str, Any]) -> tuple[list[Reply], Reply | None]:
    """The replies and default of `{"replies": [...], "default": {...}}`."""
    replies = [reply_from_dict(r) for r in data.get("replies", [])]
    default = data.get("default")
    return replies, reply_from_dict(default) if default is not None else None


def script_from_dict(data: dict[str, Any]) -> Script:
    """`{"replies": [...], "default": {...}}` as a `Script`."""
    replies, default = replies_from_dict(data)
    return Script(replies, default=default)


def load_script(path: Path) -> Script:
    """A script file: JSON, or YAML when the suffix is `.yaml`/`.yml`."""
    text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a script is a mapping with `replies` and optional `default`")
    return script_from_dict(data)
