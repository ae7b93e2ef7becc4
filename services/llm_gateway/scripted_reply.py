"""A scripted reply — what a model answers in a test, a demo or a recorded run — and its file form.

One format serves three users: the `scripted` provider replays it (one reply per conversation
position, see `providers/scripted.py`), the recorder writes it (`providers/recording.py`), and the
fake OpenAI/Anthropic servers render it on the wire (`testing/`). A reply is provider-neutral:

    Reply                 text, tool calls (raw argument text), stop reason, usage, model, and
                          optionally a fault: `error` (an HTTP error instead of the reply),
                          `delay_s`, and stream faults the fake servers act out
    ScriptedError         an HTTP error by status, message, code and headers; the scripted provider
                          turns it into the domain error the real providers' classifier
                          (`classify.classify_status`) gives for that status and body
    ScriptedReplies       the file: `{replies: [...], default: {...}}`, JSON or YAML

File form (JSON, or YAML for any other suffix), every `Reply` field by name:

    replies:
      - tool_calls: [{id: call_1, name: search, arguments: '{"query": "x"}'}]
        usage: {input_tokens: 12, output_tokens: 3, cache_read_tokens: 4}
      - fault: rate_limited        # rate_limited(retry_after, header) | server_error(status)
        retry_after: "2"           # | overloaded | context_overflow(message, status, code)
      - {fault: hang, seconds: 30} # | unauthorized(message) | hang(seconds)
      - error: {status: 400, message: "bad", code: "x", headers: {x-y: z}}
      - text: "Chloroplasts [1]"
        stop_reason: end_turn
        chunk_size: 3              # characters per streamed delta (fake servers)
    default: {text: "fallback"}    # answers everything past the list (optional)

Tool-call `arguments` are the raw JSON text sent as written (possibly malformed on purpose); a
mapping is accepted as shorthand and written as `json.dumps` text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from services.llm_gateway.classify import OVERFLOW_CODES, classify_status
from services.llm_gateway.errors import FatalProviderError, ProviderError

STOP_REASONS = ("end_turn", "tool_use", "max_tokens", "content_filter")
"""The neutral stop reasons (`model.StopReason` values); fake servers send each in their own
wording. The scripted provider replays these and `CONTEXT_OVERFLOW_STOP`; any other value is sent
verbatim by the fake servers (to test a translator) and rejected by the scripted provider."""
CONTEXT_OVERFLOW_STOP = "model_context_window_exceeded"
"""`max_tokens` because the context window filled (Anthropic's own stop reason)."""
OVERFLOW_CODE = "context_length_exceeded"


@dataclass
class ScriptedToolCall:
    """A tool call the model makes."""

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
    """An HTTP error: as the response, or as a mid-stream error event."""

    status: int = 500
    message: str = ""
    """The vendor's message; empty: the provider's usual wording for `status` (or for `kind`)."""
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
    """One of `STOP_REASONS` or `CONTEXT_OVERFLOW_STOP` (or, for a fake server only, a
    provider-native reason sent verbatim); empty: `tool_use` with tool calls, else `end_turn`."""
    usage: ScriptedUsage | None = None
    """None: fake servers report 10 input and 5 output tokens; the scripted provider counts the
    request and the reply (four characters a token)."""
    model: str = ""
    """Model name reported back; empty: the requested (or configured) model."""
    error: ScriptedError | None = None
    """A fault: answer with this HTTP error instead of a reply."""
    delay_s: float = 0.0
    """Wait this long before answering (or, with `stall_after_events`, mid-stream): a hang when it
    exceeds the client's timeout. Ends early when the client goes away."""
    chunk_size: int = 4
    """Fake servers: characters per streamed text or argument delta."""
    stall_after_events: int | None = None
    """Fake servers, streaming: send this many events, then wait `delay_s` before the rest."""
    cut_after_events: int | None = None
    """Streaming: send this many events, then end the body without the terminal event."""
    abort_after_events: int | None = None
    """Streaming: send this many events, then drop the connection mid-body (a broken transfer)."""
    stream_error: ScriptedError | None = None
    """Streaming: send this error inside the 200 stream (Anthropic `error` event, OpenAI
    `data: {"error": ...}`) after `stream_error_after_events` events, then end."""
    stream_error_after_events: int = 1
    whole_tool_call_chunks: bool = False
    """Fake OpenAI streaming quirk: each tool call (id, name, all arguments) in one chunk."""
    anonymous_continuations: bool = False
    """Fake OpenAI streaming quirk: argument continuation chunks carry neither id nor index."""
    refusal: str = ""
    """Fake OpenAI: the model's refusal message (`message.refusal`, streamed as `delta.refusal`)."""
    first_token_logprobs: dict[str, float] = field(default_factory=dict)
    """Fake OpenAI, non-streamed: the first position's top tokens and log-probabilities, sent
    when the request asks for `logprobs` (at most its `top_logprobs` of them)."""
    llama_cpp_logprobs: bool = False
    """Fake OpenAI: send them as llama-cpp-python's server does for chat (completion-style
    `{tokens, token_logprobs, top_logprobs: [{token: logprob}]}`), not OpenAI's `content`."""

    @property
    def is_fault(self) -> bool:
        """An HTTP error in place of a reply."""
        return self.error is not None

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


_FAULTS: dict[str, Callable[..., Reply]] = {
    "rate_limited": Reply.rate_limited,
    "server_error": Reply.server_error,
    "overloaded": Reply.overloaded,
    "context_overflow": Reply.context_overflow,
    "unauthorized": Reply.unauthorized,
    "hang": Reply.hang,
}


@dataclass
class ScriptedReplies:
    """A script file: replies in order, and the reply for everything past them."""

    replies: list[Reply] = field(default_factory=list)
    default: Reply | None = None

    @classmethod
    def load(cls, path: str | Path) -> ScriptedReplies:
        """JSON for `.json`, YAML otherwise."""
        source = Path(path)
        text = source.read_text(encoding="utf-8")
        data = json.loads(text) if source.suffix == ".json" else yaml.safe_load(text)
        try:
            return cls.parse(data)
        except (TypeError, ValueError, KeyError) as error:
            raise ValueError(f"{source}: {error}") from error

    @classmethod
    def parse(cls, data: Any) -> ScriptedReplies:
        """`{replies: [...], default: {...}}`."""
        if not isinstance(data, dict) or not isinstance(data.get("replies", []), list):
            raise ValueError("a script is a mapping with a `replies` list and optional `default`")
        unknown = set(data) - {"replies", "default"}
        if unknown:
            raise ValueError(f"unknown script fields: {sorted(unknown)}")
        replies = [reply_from_dict(r) for r in data.get("replies", [])]
        default = data.get("default")
        return cls(replies, reply_from_dict(default) if default is not None else None)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"replies": [reply_to_dict(r) for r in self.replies]}
        if self.default is not None:
            document["default"] = reply_to_dict(self.default)
        return document

    def write(self, path: str | Path) -> None:
        """JSON for `.json`, YAML otherwise (the suffixes `load` reads them by)."""
        target = Path(path)
        document = self.to_dict()
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.suffix == ".json":
            target.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        else:
            target.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))


def reply_from_dict(data: Any) -> Reply:
    """A `Reply` from its file form: `Reply` field names, or `{fault: name, **arguments}`."""
    if not isinstance(data, dict):
        raise ValueError(f"a reply is a mapping, not {data!r}")
    if "fault" in data:
        name = data["fault"]
        if name not in _FAULTS:
            raise ValueError(f"fault must be one of {', '.join(_FAULTS)}, not {name!r}")
        return _FAULTS[name](**{k: v for k, v in data.items() if k != "fault"})
    unknown = set(data) - {f.name for f in fields(Reply)}
    if unknown:
        raise ValueError(f"unknown reply fields: {sorted(unknown)}")
    values = dict(data)
    values["tool_calls"] = [_tool_call(c) for c in data.get("tool_calls") or []]
    if data.get("usage") is not None:
        values["usage"] = ScriptedUsage(**data["usage"])
    for name in ("error", "stream_error"):
        if data.get(name) is not None:
            values[name] = ScriptedError(**data[name])
    return Reply(**values)


def reply_to_dict(reply: Reply) -> dict[str, Any]:
    """The file form of `reply`: every field that differs from its default."""
    return _non_default(reply)


def provider_error(error: ScriptedError, *, provider: str) -> ProviderError:
    """The domain error a real provider reports for this HTTP error (the gateway's classifier)."""
    code = error.code or error.type
    if not code and error.kind == "context_overflow":
        code = OVERFLOW_CODE
    return classify_status(
        error.status,
        provider=provider,
        message=error.message,
        code=code or None,
        headers=error.headers,
    )


def scripted_error(error: ProviderError, *, provider: str) -> ScriptedError:
    """An HTTP error that `provider_error` turns back into an error of the same class (and the same
    Retry-After): the recorded status when it classifies the same, else a canonical one."""
    prefix = f"{provider}: HTTP {error.status}: " if error.status else f"{provider}: "
    message = error.message.removeprefix(prefix)
    if message == "no detail":
        message = ""
    headers: dict[str, str] = {}
    if error.retry_after_s is not None:
        headers["retry-after"] = repr(error.retry_after_s)
    candidates = [(error.status, "")] if error.status else []
    candidates += [
        (error.status or 400, OVERFLOW_CODE),
        (400, OVERFLOW_CODE),
        (429, ""),
        (429, "insufficient_quota"),
        (503, ""),
        (400, ""),
        (401, ""),
    ]
    for status, code in candidates:
        kind = "context_overflow" if code in OVERFLOW_CODES else ""
        candidate = ScriptedError(status, message, code=code, kind=kind, headers=headers)
        if _same_class(provider_error(candidate, provider=provider), error):
            return candidate
    raise AssertionError(f"no HTTP error classifies as {type(error).__name__}")  # pragma: no cover


def _same_class(replayed: ProviderError, original: ProviderError) -> bool:
    return type(replayed) is type(original) and (
        not isinstance(original, FatalProviderError)
        or getattr(replayed, "caller_error", None) == original.caller_error
    )


def _tool_call(data: Any) -> ScriptedToolCall:
    if not isinstance(data, dict):
        raise ValueError(f"a tool call is a mapping, not {data!r}")
    values = dict(data)
    if not isinstance(values.get("arguments", ""), str):
        values["arguments"] = json.dumps(values["arguments"], ensure_ascii=False)
    return ScriptedToolCall(**values)


def _non_default(instance: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in fields(instance):
        value = getattr(instance, spec.name)
        if value == _default(spec):
            continue
        if is_dataclass(value):
            value = _non_default(value)
        elif isinstance(value, list):
            value = [_non_default(v) if is_dataclass(v) else v for v in value]
        out[spec.name] = value
    return out


def _default(spec: Field[Any]) -> Any:
    if spec.default is not MISSING:
        return spec.default
    if spec.default_factory is not MISSING:
        return spec.default_factory()
    return MISSING
