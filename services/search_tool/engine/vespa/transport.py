"""The HTTP edge to Vespa: pyvespa's async client (`VespaAsync`, HTTP/2 over httpr) inside the
running event loop, with our own time limits, concurrency bound and retries, and Vespa's answers
mapped to `services.common.errors`.

pyvespa's defaults do not fit an RPC with a deadline: queries retry up to five times over about a
minute, document/v1 calls retry 429 forever (`THROTTLE_RETRY`, `stop_never`) inside three tries
on 503 (`DOCV1_RETRY`), and `feed_async_iterable` starts its own event loop. So the client is built
with `docv1_retry_policy=NO_RETRY` (pyvespa then sends each document/v1 call exactly once), every
query is sent with `NO_RETRY` under `asyncio.timeout`, and document writes go through a semaphore
(`feed_concurrency`) with our own retry on 429/503: at most `feed_retries` attempts in all, then
Unavailable naming the status Vespa last answered.

Mapping (`en/querying/query-api.html`, `en/reference/api/document-v1.html`): unreachable, 429,
503 and other 5xx → Unavailable with a retry hint; 504 or our own timer → DeadlineExceeded; 400 →
`QueryRejected`, which the search names as a filter field when Vespa's message names one; 412 on a
conditional write (test-and-set `condition`) → `ConditionFailed`, which the caller re-reads on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vespa.application import Vespa, VespaAsync
from vespa.retries import NO_RETRY

from services.common.errors import DeadlineExceeded, FailedPrecondition, Unavailable
from services.search_tool.engine.vespa.package import CONTENT_CLUSTER, NAMESPACE

log = logging.getLogger(__name__)

RETRY_AFTER_S = 1.0
VISIT_PAGE = 1000
"""`wantedDocumentCount` of each visit request."""
VISIT_ROUND_TIMEOUT = "30s"
"""`timeout` of one visit or selection-delete request: Vespa answers with a `continuation` by
then (the default is 180 s), well inside the HTTP client's own limit."""
_HTTP_MARGIN_S = 0.5
"""The HTTP call may take this much longer than the `timeout` Vespa itself enforces."""


class ConditionFailed(Exception):
    """Vespa answered 412: the write's test-and-set `condition` did not hold (or, without
    `create`, the document does not exist): `en/reference/api/document-v1.html`."""


class QueryRejected(Exception):
    """Vespa answered 400: the query is not acceptable to the deployed application."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ContinuationRefused(Exception):
    """Vespa answered a visit that carried a `continuation` with 400: the token (a caller's,
    through a page token) is not one Vespa can resume from."""


@dataclass(frozen=True)
class Endpoint:
    """Where Vespa is and how to reach it."""

    url: str
    """Container endpoint queries go to, e.g. `http://vespa:8080` or a Vespa Cloud URL."""
    feed_url: str | None = None
    """Container endpoint of document/v1 (writes, gets, visits) when feed and query run in
    separate container clusters (`topology.py`); None: `url`."""
    cert_path: Path | None = None
    """Client certificate (mTLS, Vespa Cloud data plane)."""
    key_path: Path | None = None
    """Its private key."""
    ca_path: Path | None = None
    """CA bundle (PEM) that signed Vespa's server certificate, when it is not a public CA (a
    self-managed Vespa with TLS); None trusts the system's CAs."""
    feed_concurrency: int = 16
    """Document writes in flight at once."""
    feed_retries: int = 3
    """Attempts of one document write in all (the first included) while Vespa answers 429 or
    503; then Unavailable."""
    retry_pause_s: float = 0.25
    """Pause before the second attempt of a write; the n-th retry waits n times as long."""
    query_timeout_s: float = 5.0
    """Longest a query may run when the caller allows more (Vespa's own `timeout`)."""


class VespaTransport:
    """One open HTTP/2 client for the life of the engine (two when feed and query are apart)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._app = self._application(endpoint.url)
        self._feed_app = (
            self._application(endpoint.feed_url)
            if endpoint.feed_url not in (None, endpoint.url)
            else self._app
        )
        self._client: VespaAsync | None = None
        self._feed_client: VespaAsync | None = None
        self._writes = asyncio.Semaphore(endpoint.feed_concurrency)
        self._in_flight = 0

    def _application(self, url: str | None) -> Vespa:
        return Vespa(
            url=url or self.endpoint.url,
            cert=str(self.endpoint.cert_path) if self.endpoint.cert_path else None,
            key=str(self.endpoint.key_path) if self.endpoint.key_path else None,
        )

    async def open(self) -> None:
        self._client = await self._open(self._app)
        self._feed_client = (
            self._client if self._feed_app is self._app else await self._open(self._feed_app)
        )

    async def _open(self, app: Vespa) -> VespaAsync:
        tls: dict[str, Any] = {}
        if self.endpoint.ca_path is not None:  # handed to pyvespa's httpr.AsyncClient as is
            tls["ca_cert_file"] = str(self.endpoint.ca_path)
        client = VespaAsync(
            app,
            timeout=self.endpoint.query_timeout_s + 60,
            docv1_retry_policy=NO_RETRY,  # one HTTP request per call: `_write` retries, bounded
            **tls,
        )
        await client.__aenter__()  # type: ignore[no-untyped-call]
        return client

    async def close(self) -> None:
        for client in {id(c): c for c in (self._client, self._feed_client) if c}.values():
            await client.__aexit__(None, None, None)  # type: ignore[no-untyped-call]
        self._client = self._feed_client = None

    def budget(self, timeout_s: float | None) -> float:
        """The time one query may take: the caller's budget, capped by the configured limit."""
        cap = self.endpoint.query_timeout_s
        return cap if timeout_s is None else max(min(timeout_s, cap), 0.001)

    async def query(self, body: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
        """POST /search/; returns `root`. Vespa gets `timeout`, the HTTP call a little more."""
        budget = self.budget(timeout_s)
        body = {**body, "timeout": f"{max(int(budget * 1000), 1)}ms"}
        try:
            async with asyncio.timeout(budget + _HTTP_MARGIN_S):
                response = await self._connected().query(body=body, retry_policy=NO_RETRY)
        except TimeoutError:
            raise DeadlineExceeded(f"Vespa did not answer within {budget:.3f} s") from None
        except Exception as error:  # httpr raises its own connection errors
            raise _unreachable(self.endpoint.url, error) from None
        status = response.status_code
        payload = response.json if isinstance(response.json, dict) else {}
        root = payload.get("root", {})
        if status == 200:
            return dict(root)
        message = _error_message(root) or str(payload)[:500]
        if status == 400:
            raise QueryRejected(message)
        raise _status_error(status, message)

    async def put(
        self,
        schema: str,
        document_id: str,
        fields: dict[str, Any],
        *,
        condition: str | None = None,
        create: bool = False,
    ) -> None:
        """Create or replace one document (idempotent by id). With `condition` (a document
        selection over this document), only if it holds (else `ConditionFailed`); with `create`
        as well, a missing document is written whatever the condition
        (`en/writing/document-v1-api-guide.html`, "Conditional updates and puts with create")."""
        params: dict[str, Any] = {}  # document/v1 query parameters, as pyvespa sends kwargs
        if condition is not None:
            params["condition"] = condition
            if create:
                params["create"] = "true"
        await self._write("put", schema, document_id, fields, params)

    async def get(self, schema: str, document_id: str) -> dict[str, Any] | None:
        """The fields of one document, or None when it does not exist: `GET
        /document/v1/<ns>/<schema>/docid/<id>` (200 with `fields`, 404 when absent). A get reads
        the newest acknowledged version, unlike a query (`en/reference/api/document-v1.html`)."""
        client = self._feeding()
        try:
            async with asyncio.timeout(self.endpoint.query_timeout_s + _HTTP_MARGIN_S):
                response = await client.get_data(schema, document_id, NAMESPACE)
        except TimeoutError:
            raise DeadlineExceeded(f"Vespa did not return {schema} {document_id!r}") from None
        except Exception as error:
            raise _unreachable(self.endpoint.url, error) from None
        status = response.status_code
        body = response.json if isinstance(response.json, dict) else {}
        if status == 404:
            return None
        if status == 200:
            fields = body.get("fields")
            return dict(fields) if isinstance(fields, dict) else {}
        message = str(body.get("message", ""))[:500]
        if status == 400:
            raise FailedPrecondition(
                f"Vespa refused the get of {schema} {document_id!r}: {message}",
                reason="VESPA_REJECTED",
            )
        raise _status_error(status, message)

    async def delete(self, schema: str, document_id: str, *, condition: str | None = None) -> None:
        """Remove one document (200 also when it did not exist). With `condition`, only if it
        holds for the stored document, else `ConditionFailed` (a missing document may answer
        either: callers take both as "not removed by me")."""
        params = {} if condition is None else {"condition": condition}
        await self._write("delete", schema, document_id, None, params)

    @property
    def feeds_apart(self) -> bool:
        """Document/v1 goes to another container cluster than queries (`feed_url`)."""
        return self._feed_app is not self._app

    @property
    def writes_in_flight(self) -> int:
        """Document writes holding a slot of `feed_concurrency` now (0 when none is running)."""
        return self._in_flight

    async def delete_where(self, schema: str, selection: str) -> int:
        """Remove every `schema` document `selection` selects (a document selection, see
        `selection.py`): `DELETE /document/v1/<ns>/<schema>/docid?selection=…&cluster=…`, then
        again with each `continuation` Vespa returns until it returns none. Returns the
        documents Vespa reports removed (`documentCount` of every round).

        `en/reference/api/document-v1.html` ("Delete where": mandatory `cluster` and `selection`,
        optional `continuation`, `timeChunk`, `timeout`; the response carries `documentCount` and,
        while the visit is unfinished, `continuation`). A visit is a linear scan of the cluster."""
        params = {
            "selection": selection,
            "cluster": CONTENT_CLUSTER,
            "timeChunk": "10s",
            "timeout": VISIT_ROUND_TIMEOUT,
        }
        removed = 0
        while True:
            payload = await self._visit_round("DELETE", schema, params)
            removed += int(payload.get("documentCount", 0))
            token = payload.get("continuation")
            if not token:
                return removed
            params = {**params, "continuation": str(token)}

    async def visit(
        self, schema: str, selection: str, fields: Sequence[str], limit: int | None = None
    ) -> list[dict[str, Any]]:
        """The `fields` of every `schema` document `selection` selects (at most `limit`), by
        visiting: `GET /document/v1/<ns>/<schema>/docid?selection=…&cluster=…&fieldSet=…`,
        following `continuation` (`en/reference/api/document-v1.html`, "Visit"; the response's
        `documents[{id, fields}]`). No offset limit, but a linear scan of the cluster."""
        params = {
            "selection": selection,
            "cluster": CONTENT_CLUSTER,
            "fieldSet": f"{schema}:{','.join(fields)}",
            "wantedDocumentCount": str(VISIT_PAGE),
            "timeout": VISIT_ROUND_TIMEOUT,
        }
        found: list[dict[str, Any]] = []
        while limit is None or len(found) < limit:
            payload = await self._visit_round("GET", schema, params)
            for document in payload.get("documents") or []:
                if isinstance(document, dict) and isinstance(document.get("fields"), dict):
                    found.append(document["fields"])
            token = payload.get("continuation")
            if not token:
                break
            params = {**params, "continuation": str(token)}
        return found if limit is None else found[:limit]

    async def visit_page(
        self,
        schema: str,
        selection: str,
        fields: Sequence[str],
        *,
        wanted: int,
        continuation: str = "",
    ) -> tuple[list[dict[str, Any]], str]:
        """One visit request: `GET …/docid?selection=…&wantedDocumentCount=<wanted>` from
        `continuation` ("" = the start). Returns the documents' `fields` and the continuation
        to go on from ("" when the visit is complete).

        `en/reference/api/document-v1.html`: `wantedDocumentCount` is best effort (Vespa visits
        bucket by bucket and answers once that many documents were visited, so a response may
        hold more, or fewer when it timed out or the cluster ran out); the absence of
        `continuation` in a 200 answer means there is nothing left. A continuation Vespa cannot
        parse is a 400 (its handler parses it with `ProgressToken.fromSerializedString`)."""
        params = {
            "selection": selection,
            "cluster": CONTENT_CLUSTER,
            "fieldSet": f"{schema}:{','.join(fields)}",
            "wantedDocumentCount": str(wanted),
            "timeout": VISIT_ROUND_TIMEOUT,
        }
        if continuation:
            params["continuation"] = continuation
        try:
            payload = await self._visit_round("GET", schema, params)
        except FailedPrecondition as refused:  # a 400
            if continuation:
                raise ContinuationRefused(str(refused)) from None
            raise
        documents = [
            document["fields"]
            for document in payload.get("documents") or []
            if isinstance(document, dict) and isinstance(document.get("fields"), dict)
        ]
        following = payload.get("continuation")
        return documents, str(following) if following else ""

    async def _visit_round(
        self, method: str, schema: str, params: dict[str, str]
    ) -> dict[str, Any]:
        """One request of a visit (`GET`) or a selection delete (`DELETE`); its JSON body."""
        http = self._feeding().httpr_client  # pyvespa's own client: same TLS and headers
        if http is None:
            raise Unavailable("the Vespa client is not open", retry_after_s=RETRY_AFTER_S)
        url = f"{self._feed_app.end_point}/document/v1/{NAMESPACE}/{schema}/docid"
        try:
            async with self._slot():
                if method == "DELETE":
                    response = await http.delete(url, params=params)
                else:
                    response = await http.get(url, params=params)
        except Exception as error:
            raise _unreachable(self.endpoint.url, error) from None
        try:
            payload = response.json()
        except Exception:  # an empty or non-JSON body (a proxy's error page)
            payload = {}
        payload = payload if isinstance(payload, dict) else {}
        status = response.status_code
        if status == 200:
            return payload
        message = str(payload.get("message", ""))[:500]
        if status == 400:
            action = "selection delete" if method == "DELETE" else "visit"
            raise FailedPrecondition(
                f"Vespa refused the {action} on {schema}: {message}", reason="VESPA_REJECTED"
            )
        raise _status_error(status, message)

    async def _write(
        self,
        operation: str,
        schema: str,
        document_id: str,
        fields: dict[str, Any] | None,
        params: dict[str, Any],
    ) -> None:
        """One document write, sent at most `feed_retries` times: again only on 429 (too many
        operations in flight) or 503 (no answer now), after a short growing pause."""
        client = self._feeding()
        for attempt in range(1, self.endpoint.feed_retries + 1):
            try:
                async with self._slot():
                    if fields is None:
                        response = await client.delete_data(
                            schema, document_id, NAMESPACE, **params
                        )
                    else:
                        response = await client.feed_data_point(
                            schema, document_id, fields, NAMESPACE, **params
                        )
            except Exception as error:
                raise _unreachable(self.endpoint.url, error) from None
            status = response.status_code
            if status == 200:
                return
            body = response.json if isinstance(response.json, dict) else {}
            message = str(body.get("message", ""))[:500]
            if status == 412:
                raise ConditionFailed(message)
            if status in (429, 503) and attempt < self.endpoint.feed_retries:
                log.info(
                    "vespa write throttled, retrying",
                    extra={"status": status, "attempt": attempt},
                )
                await asyncio.sleep(self.endpoint.retry_pause_s * attempt)
                continue
            if status == 400:
                raise FailedPrecondition(
                    f"Vespa refused the {operation} of {schema} {document_id!r}: {message}",
                    reason="VESPA_REJECTED",
                )
            tries = f"attempt {attempt} of {self.endpoint.feed_retries}"
            raise _status_error(status, f"{message} ({operation} of {schema}, {tries})")

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of `feed_concurrency` document-API requests in flight, counted while held."""
        async with self._writes:
            self._in_flight += 1
            try:
                yield
            finally:
                self._in_flight -= 1

    def _connected(self) -> VespaAsync:
        if self._client is None:
            raise Unavailable("the Vespa client is not open", retry_after_s=RETRY_AFTER_S)
        return self._client

    def _feeding(self) -> VespaAsync:
        if self._feed_client is None:
            raise Unavailable("the Vespa client is not open", retry_after_s=RETRY_AFTER_S)
        return self._feed_client


def _unreachable(url: str, error: BaseException) -> Unavailable:
    log.warning("vespa unreachable", extra={"url": url, "error": type(error).__name__})
    return Unavailable(
        f"Vespa at {url} is unreachable ({type(error).__name__})",
        retry_after_s=RETRY_AFTER_S,
        reason="VESPA_UNAVAILABLE",
    )


def _status_error(status: int, message: str) -> Unavailable | DeadlineExceeded:
    if status == 504:
        return DeadlineExceeded(f"Vespa timed out: {message}")
    reason = "VESPA_OVERLOADED" if status in (429, 503) else "VESPA_UNAVAILABLE"
    if status == 507:
        reason = "VESPA_STORAGE_FULL"
    return Unavailable(
        f"Vespa answered {status}: {message}", retry_after_s=RETRY_AFTER_S, reason=reason
    )


def _error_message(root: dict[str, Any]) -> str:
    errors = root.get("errors") or []
    return "; ".join(f"{e.get('summary', '')}: {e.get('message', '')}".strip(": ") for e in errors)
