"""The machinery every fake provider server shares: scripted replies, request recording, a
background uvicorn thread, faults (delays, hangs, cut streams, mid-stream errors) and a CLI.

Each wire format (`fake_openai`, `fake_anthropic`) only says how a `Reply` is rendered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from services.llm_gateway.scripted_reply import Reply, ScriptedError, ScriptedReplies
from services.llm_gateway.testing.script import Script, load_script

REDACTED = "REDACTED"
_AUTH_HEADERS = ("authorization", "x-api-key", "api-key")


class InjectedConnectionAbort(ConnectionAbortedError):
    """Raised inside a streamed body on purpose: the server drops the connection mid-transfer."""


class _HideInjectedAborts(logging.Filter):
    """Keep uvicorn from logging the aborts the script asked for as application errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, InjectedConnectionAbort)


logging.getLogger("uvicorn.error").addFilter(_HideInjectedAborts())


@dataclass(frozen=True)
class SseEvent:
    """One server-sent event."""

    data: str
    event: str | None = None

    def encode(self) -> bytes:
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {self.data}\n\n".encode()


@dataclass
class RecordedRequest:
    """A request the fake received, as the tests may see it."""

    path: str
    headers: dict[str, str]
    """Lower-case names; API-key headers replaced by `REDACTED`."""
    body: dict[str, Any]
    _api_key: str = field(default="", repr=False)
    finished: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set when the whole reply was sent."""
    disconnected: threading.Event = field(default_factory=threading.Event, repr=False)
    """Set when the client went away before the whole reply was sent."""

    def sent_api_key(self, key: str) -> bool:
        """Whether the request authenticated with `key` (the key itself is never exposed)."""
        return self._api_key == key

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "headers": self.headers, "body": self.body}


class FakeServer:
    """A scripted fake of one provider's HTTP API on 127.0.0.1.

    Use as a (sync or async) context manager, or `start()`/`stop()`. It runs in its own thread with
    its own event loop, so it serves tests, benchmarks and subprocesses alike.
    """

    kind: ClassVar[str] = ""
    api_path: ClassVar[str] = ""
    """The model endpoint, e.g. `/v1/chat/completions`."""
    base_path: ClassVar[str] = ""
    """What the SDK's `base_url` must end with, e.g. `/v1`."""

    def __init__(
        self, script: Script | None = None, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.script = script or Script()
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._closing = threading.Event()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- wire format, per provider ------------------------------------------------------------

    def render_body(self, reply: Reply, model: str, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def render_events(self, reply: Reply, model: str) -> list[SseEvent]:
        raise NotImplementedError

    def render_error(self, error: ScriptedError) -> tuple[int, dict[str, Any], dict[str, str]]:
        raise NotImplementedError

    def render_stream_error(self, error: ScriptedError) -> SseEvent:
        raise NotImplementedError

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's `base_url`."""
        return f"http://{self.host}:{self.port}{self.base_path}"

    def start(self) -> str:
        """Serve in a background thread; returns `base_url`. Connections made before the loop
        runs wait in the listen backlog, so no readiness wait is needed."""
        self._socket.listen(512)
        self._server = uvicorn.Server(self._config())
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()

    def serve_forever(self) -> None:
        """Serve in the calling thread until SIGINT/SIGTERM (the CLI)."""
        self._socket.listen(512)
        uvicorn.Server(self._config()).run(sockets=[self._socket])

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self.app(),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        )

    # -- script and records ----------------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next requests."""
        self.script.push(*replies)

    def reset(self, replies: list[Reply] | None = None, *, default: Reply | None = None) -> None:
        """Forget recorded requests and replace the script."""
        self.script.reset(replies, default=default)
        with self._lock:
            self._requests.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Model requests received so far, in order."""
        with self._lock:
            return list(self._requests)

    def _record(self, request: Request, body: dict[str, Any]) -> RecordedRequest:
        headers = {k.lower(): v for k, v in request.headers.items()}
        api_key = ""
        for name in _AUTH_HEADERS:
            if name in headers:
                api_key = headers[name].removeprefix("Bearer ").strip()
                headers[name] = REDACTED
        record = RecordedRequest(request.url.path, headers, body, _api_key=api_key)
        with self._lock:
            self._requests.append(record)
        return record

    # -- HTTP ------------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(self.api_path, self._handle, methods=["POST"]),
                Route("/_fake/replies", self._admin_push, methods=["POST"]),
                Route("/_fake/reset", self._admin_reset, methods=["POST"]),
                Route("/_fake/requests", self._admin_requests, methods=["GET"]),
            ]
        )

    async def _handle(self, request: Request) -> Response:
        body = await request.json()
        record = self._record(request, body)
        reply = self.script.next()
        if reply is None:
            record.finished.set()
            return self._error_response(ScriptedError(500, "fake script exhausted"))
        waits_first = reply.delay_s and reply.stall_after_events is None
        if waits_first and not await self._wait(reply.delay_s, request):
            record.disconnected.set()
            return Response(status_code=499)
        if reply.error is not None:
            record.finished.set()
            return self._error_response(reply.error)
        model = reply.model or str(body.get("model", ""))
        if body.get("stream"):
            stream = self._stream(reply, model, record, request)
            return StreamingResponse(stream, media_type="text/event-stream")
        record.finished.set()
        return JSONResponse(self.render_body(reply, model, body))

    def _error_response(self, error: ScriptedError) -> Response:
        status, payload, headers = self.render_error(error)
        return JSONResponse(payload, status_code=status, headers={**headers, **error.headers})

    async def _stream(
        self, reply: Reply, model: str, record: RecordedRequest, request: Request
    ) -> AsyncIterator[bytes]:
        events = self.render_events(reply, model)
        if reply.stream_error is not None:
            events = events[: reply.stream_error_after_events]
            events.append(self.render_stream_error(reply.stream_error))
        elif reply.cut_after_events is not None:
            events = events[: reply.cut_after_events]
        try:
            for i, event in enumerate(events):
                if i == reply.stall_after_events and not await self._wait(reply.delay_s, request):
                    return
                if i == reply.abort_after_events:
                    raise InjectedConnectionAbort("abort_after_events")
                yield event.encode()
            record.finished.set()
        finally:
            if not record.finished.is_set():
                record.disconnected.set()

    async def _wait(self, seconds: float, request: Request) -> bool:
        """Sleep up to `seconds`; False as soon as the client left or the server is stopping."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self._closing.is_set() or await request.is_disconnected():
                return False
            await asyncio.sleep(0.01)
        return True

    async def _admin_push(self, request: Request) -> Response:
        document = ScriptedReplies.parse(await request.json())
        self.push(*document.replies)
        if document.default is not None:
            self.script.default = document.default
        return JSONResponse({"pending": self.script.pending()})

    async def _admin_reset(self, request: Request) -> Response:
        data = await request.json() if await request.body() else {}
        document = ScriptedReplies.parse(data)
        self.reset(document.replies, default=document.default)
        return JSONResponse({"pending": self.script.pending()})

    async def _admin_requests(self, request: Request) -> Response:
        return JSONResponse([r.to_json() for r in self.requests])


def run_cli(server_type: Callable[..., FakeServer], argv: list[str] | None = None) -> None:
    """`python -m ... --port N --script FILE`: serve until interrupted, printing the base URL."""
    parser = argparse.ArgumentParser(description=f"Fake {server_type.__name__} for tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--script", type=Path, help="JSON or YAML script of replies")
    args = parser.parse_args(argv)
    script = load_script(args.script) if args.script else Script()
    server = server_type(script, host=args.host, port=args.port)
    print(json.dumps({"base_url": server.base_url, "port": server.port}), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)
