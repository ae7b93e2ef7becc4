"""A local HTTP/2 (cleartext, prior knowledge) server that records requests and answers with
scripted responses: what pyvespa's real async client (httpr, HTTP/2 only) talks to in the HTTP
contract tests. Bound to 127.0.0.1 on port 0; built on the `h2` protocol library.

Responses are written by the tests from Vespa's documented JSON formats (each test names its
source); nothing here is Vespa."""

from __future__ import annotations

import asyncio
import gzip
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, RequestReceived, StreamEnded, WindowUpdated


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON; pyvespa gzips large bodies (`compress="auto"`, `content-encoding:
        gzip`), which a Vespa container accepts."""
        if self.headers.get("content-encoding") == "gzip":
            return json.loads(gzip.decompress(self.body))
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None
    delay: asyncio.Event | None = None
    """When set, the reply waits for this event (a test can hold a request open)."""
    then: Callable[[], Reply] | None = None
    """When set, called once `delay` is set: the reply actually sent (a held write decides its
    outcome when it is applied, as Vespa does)."""


Responder = Callable[[Recorded], Reply]


@dataclass
class RecordingServer:
    respond: Responder
    requests: list[Recorded] = field(default_factory=list)
    received: asyncio.Event = field(default_factory=asyncio.Event)
    tls: ssl.SSLContext | None = None
    """When set, the server speaks TLS (ALPN h2) with this context."""
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{'localhost' if self.tls else host}:{port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = H2Connection(H2Configuration(client_side=False, header_encoding="utf-8"))
        connection.initiate_connection()
        writer.write(connection.data_to_send())
        streams: dict[int, tuple[dict[str, str], bytearray]] = {}
        tasks: set[asyncio.Task[None]] = set()
        window = asyncio.Event()  # set when the client opens its flow-control window
        try:
            while data := await reader.read(65536):
                for event in connection.receive_data(data):
                    if isinstance(event, RequestReceived):
                        streams[event.stream_id] = (dict(event.headers), bytearray())  # type: ignore[arg-type]
                    elif isinstance(event, DataReceived):
                        streams[event.stream_id][1].extend(event.data)
                        connection.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, WindowUpdated):
                        window.set()
                    elif isinstance(event, StreamEnded):
                        headers, body = streams.pop(event.stream_id)
                        task = asyncio.create_task(
                            self._answer(
                                connection, writer, event.stream_id, headers, bytes(body), window
                            )
                        )
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                writer.write(connection.data_to_send())
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            writer.close()

    async def _answer(
        self,
        connection: H2Connection,
        writer: asyncio.StreamWriter,
        stream_id: int,
        headers: dict[str, str],
        body: bytes,
        window: asyncio.Event,
    ) -> None:
        url = urlsplit(headers[":path"])
        request = Recorded(
            method=headers[":method"],
            path=url.path,
            query=dict(parse_qsl(url.query, keep_blank_values=True)),
            headers={k: v for k, v in headers.items() if not k.startswith(":")},
            body=body,
        )
        self.requests.append(request)
        self.received.set()
        reply = self.respond(request)
        if reply.delay is not None:
            await reply.delay.wait()
        if reply.then is not None:
            reply = reply.then()
        payload = json.dumps(reply.body).encode() if reply.body is not None else b""
        connection.send_headers(
            stream_id,
            [
                (":status", str(reply.status)),
                ("content-type", "application/json;charset=utf-8"),
                ("content-length", str(len(payload))),
            ],
        )
        # in frames of at most the negotiated size, within the client's flow-control window
        sent = 0
        while True:
            room = min(
                connection.max_outbound_frame_size,
                connection.local_flow_control_window(stream_id),
                len(payload) - sent,
            )
            if room <= 0 and sent < len(payload):
                window.clear()
                await window.wait()
                continue
            last = sent + room >= len(payload)
            connection.send_data(stream_id, payload[sent : sent + room], end_stream=last)
            writer.write(connection.data_to_send())
            await writer.drain()
            sent += room
            if last:
                return
