"""A local HTTP server speaking the documented JSON of SearxNG, Brave Search and Tavily.

    GET  /search?q=…&format=json          SearxNG   results[].{url,title,content,engine,…}
    GET  /res/v1/web/search?q=…&count=n   Brave     web.results[].{title,url,description,…}
                                                     (key: X-Subscription-Token)
    POST /search {query, max_results}     Tavily    results[].{title,url,content,score,…}
                                                     (key: Authorization: Bearer …)

Replies are scripted (`push`): results, or a status with headers (429 + Retry-After, 500, 401),
a delay (a hung provider), or a raw body (malformed JSON). Without a script it answers the
`default` results. A wrong or missing key gets the provider's own 401; SearxNG without
`format=json` gets 403, as an instance that has not enabled JSON does. Requests are recorded with
the key replaced by `REDACTED` (`sent_key` says whether the right key came).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

Kind = Literal["searxng", "brave", "tavily"]
REDACTED = "REDACTED"


@dataclass(frozen=True)
class Page:
    url: str
    title: str
    snippet: str


@dataclass(frozen=True)
class WebReply:
    pages: tuple[Page, ...] = ()
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw_body: str | None = None


@dataclass
class SeenRequest:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: dict[str, Any]
    sent_key: bool


class FakeWebServer:
    """One provider kind on 127.0.0.1, port 0, in a background thread."""

    def __init__(self, kind: Kind, *, api_key: str = "", default: WebReply | None = None) -> None:
        self.kind = kind
        self.api_key = api_key
        self.default = default or WebReply()
        self.requests: list[SeenRequest] = []
        self.arrived = threading.Event()
        """Set when a request arrives."""
        self._script: list[WebReply] = []
        self._lock = threading.Lock()
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def push(self, *replies: WebReply) -> None:
        with self._lock:
            self._script.extend(replies)

    def start(self) -> FakeWebServer:
        self._socket.listen(128)
        config = uvicorn.Config(self._app(), log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()

    def _app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/search", self._handle, methods=["GET", "POST"]),
                Route("/res/v1/web/search", self._handle, methods=["GET"]),
            ]
        )

    def _next(self) -> WebReply:
        with self._lock:
            return self._script.pop(0) if self._script else self.default

    async def _handle(self, request: Request) -> Response:
        body: dict[str, Any] = {}
        if request.method == "POST":
            body = json.loads(await request.body() or b"{}")
        headers = {k.lower(): v for k, v in request.headers.items()}
        sent = self._sent_key(headers)
        for name in ("x-subscription-token", "authorization"):
            if name in headers:
                headers[name] = REDACTED
        params = dict(request.query_params)
        with self._lock:
            self.requests.append(
                SeenRequest(request.method, request.url.path, params, headers, body, sent)
            )
        self.arrived.set()
        refused = self._refusal(request, sent, params)
        if refused is not None:
            return refused
        reply = self._next()
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.raw_body is not None:
            return Response(reply.raw_body, status_code=reply.status, headers=reply.headers)
        if reply.status != 200:
            error = {"error": {"status": reply.status, "detail": "scripted failure"}}
            return JSONResponse(error, status_code=reply.status, headers=reply.headers)
        query = params.get("q") or str(body.get("query", ""))
        return JSONResponse(self._render(query, reply.pages), headers=reply.headers)

    def _sent_key(self, headers: dict[str, str]) -> bool:
        if self.kind == "brave":
            return headers.get("x-subscription-token", "") == self.api_key
        if self.kind == "tavily":
            return headers.get("authorization", "") == f"Bearer {self.api_key}"
        return True

    def _refusal(self, request: Request, sent: bool, params: dict[str, str]) -> Response | None:
        expected = {"searxng": "GET", "tavily": "POST", "brave": "GET"}[self.kind]
        if request.method != expected:
            return JSONResponse({"detail": "Method Not Allowed"}, status_code=405)
        if self.kind == "searxng" and params.get("format") != "json":
            return Response("Forbidden", status_code=403)
        if self.kind == "brave" and not sent:
            error = {"status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID", "detail": "invalid"}
            return JSONResponse({"type": "ErrorResponse", "error": error}, status_code=401)
        if self.kind == "tavily" and not sent:
            error = {"error": "Unauthorized: missing or invalid API key."}
            return JSONResponse({"detail": error}, status_code=401)
        return None

    def _render(self, query: str, pages: tuple[Page, ...]) -> dict[str, Any]:
        if self.kind == "searxng":
            return {
                "query": query,
                "number_of_results": len(pages),
                "results": [
                    {
                        "url": p.url,
                        "title": p.title,
                        "content": p.snippet,
                        "engine": "duckduckgo",
                        "engines": ["duckduckgo", "bing"],
                        "positions": [i + 1],
                        "score": 2.0 / (i + 1),
                        "category": "general",
                        "template": "default.html",
                        "parsed_url": p.url.split("/", 3),
                    }
                    for i, p in enumerate(pages)
                ],
                "answers": [],
                "corrections": [],
                "infoboxes": [],
                "suggestions": [],
                "unresponsive_engines": [],
            }
        if self.kind == "brave":
            results = [
                {
                    "type": "search_result",
                    "title": p.title,
                    "url": p.url,
                    "description": p.snippet,
                    "is_source_local": False,
                    "is_source_both": False,
                    "language": "en",
                    "family_friendly": True,
                }
                for p in pages
            ]
            return {
                "type": "search",
                "query": {"original": query, "more_results_available": False},
                "mixed": {"type": "mixed", "main": []},
                "web": {"type": "search", "results": results, "family_friendly": True},
            }
        return {
            "query": query,
            "follow_up_questions": None,
            "answer": None,
            "images": [],
            "results": [
                {
                    "title": p.title,
                    "url": p.url,
                    "content": p.snippet,
                    "score": 0.9 - i / 100,
                    "raw_content": None,
                }
                for i, p in enumerate(pages)
            ],
            "response_time": 0.42,
        }
