"""Builds the search tool's gRPC server, used by `__main__` and by tests (port 0).

The server starts answering health checks at once: the process is SERVING, the search tool service
NOT_SERVING until the engine is open and the embedder loaded (about a second for MiniLM), then
SERVING. An engine behind a server (Vespa, `ReadinessCheck`) is asked every
`engine.readiness_interval_s` whether it can answer, and readiness follows: SERVING only while it
can, NOT_SERVING (with the reason logged) as soon as it cannot. On stop that watch ends first, then
the engine is closed after in-flight calls have drained.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2
from quarry.searchtool.v1 import search_tool_pb2_grpc

from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.telemetry import Telemetry
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder, build_embedder
from services.search_tool.engine.base import ReadinessCheck, SearchEngine
from services.search_tool.engine.lancedb import LanceDBEngine
from services.search_tool.engine.postgres import PostgresEngine
from services.search_tool.engine.vespa import Endpoint, VespaEngine
from services.search_tool.service import SearchService
from services.search_tool.servicer import ACCESS_RULES, SERVICE_NAME, SearchToolServicer
from services.search_tool.traced import TracedEmbedder
from services.search_tool.web import build_web_search

log = logging.getLogger(__name__)

EmbedderFactory = Callable[[], Embedder]


@dataclass
class SearchToolServer(QuarryServer):
    """A `QuarryServer` that loads the engine and the embedder while already answering health."""

    servicer: SearchToolServicer = field(default_factory=SearchToolServicer)
    search_settings: SearchToolSettings = field(default_factory=SearchToolSettings)
    embedder_factory: EmbedderFactory | None = None
    telemetry: Telemetry | None = None
    service: SearchService | None = None
    _draining: bool = False
    _readiness: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.set_serving(False)
        await self.listen()
        await self.mark_live()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        log.info("loading engine and embedder", extra={"address": self.address})
        self.service = await open_search_service(
            self.search_settings, self.embedder_factory, telemetry=self.telemetry
        )
        self.servicer.attach(self.service)
        engine = self.service.engine
        if isinstance(engine, PostgresEngine):
            # readiness follows the database: NOT_SERVING while it cannot be reached
            engine.watch(self._database_changed)
        elif isinstance(engine, ReadinessCheck):
            self._readiness = asyncio.create_task(self._follow_readiness(engine))
        else:
            await self.set_serving(True)
        log.info(
            "serving",
            extra={
                "address": self.address,
                "services": self.service_names,
                "health_port": self.health_port,
            },
        )

    async def _database_changed(self, reachable: bool) -> None:
        if not self._draining:
            await self.set_serving(reachable)

    async def begin_drain(self) -> None:
        self._draining = True
        await super().begin_drain()

    async def _follow_readiness(self, engine: ReadinessCheck) -> None:
        """Ask the engine now and every `readiness_interval_s`; flip readiness on a change."""
        serving: bool | None = None
        while True:
            try:
                reason = await engine.unready_reason()
            except Exception as error:  # an answer nobody mapped is still not an answer
                reason = f"{type(error).__name__}: {error}"
            if (reason is None) is not serving:
                serving = reason is None
                if not self._draining:
                    await self.set_serving(serving)
                if serving:
                    log.info("engine ready: serving")
                else:
                    log.warning("engine not ready: not serving", extra={"reason": reason})
            await asyncio.sleep(self.search_settings.engine.readiness_interval_s)

    async def stop(self, grace_s: float | None = None) -> None:
        if self._readiness is not None:  # before the drain flips readiness off for good
            self._readiness.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._readiness
            self._readiness = None
        await super().stop(grace_s)
        await self.servicer.web.aclose()
        if self.service is not None:
            await self.service.close()
            self.service = None


def build_search_tool_server(
    settings: SearchToolSettings,
    telemetry: Telemetry | None = None,
    *,
    embedder_factory: EmbedderFactory | None = None,
) -> SearchToolServer:
    """A bound, not started server; `start()` opens the engine and loads the embedder."""
    servicer = SearchToolServicer(web=build_web_search(settings.web_search))

    def register(server: grpc.aio.Server) -> None:
        search_tool_pb2_grpc.add_SearchToolServiceServicer_to_server(servicer, server)

    built = build_server(
        [ServiceRegistration(SERVICE_NAME, register, ACCESS_RULES)], settings.server, telemetry
    )
    return SearchToolServer(
        server=built.server,
        health=built.health,
        service_names=built.service_names,
        settings=built.settings,
        port=built.port,
        health_server=built.health_server,
        health_port=built.health_port,
        admission=built.admission,
        servicer=servicer,
        search_settings=settings,
        embedder_factory=embedder_factory,
        telemetry=telemetry,
    )


async def open_search_service(
    settings: SearchToolSettings,
    embedder_factory: EmbedderFactory | None = None,
    *,
    telemetry: Telemetry | None = None,
) -> SearchService:
    """Open the configured engine and load the embedder (off the event loop)."""
    factory = embedder_factory or (lambda: build_embedder(settings.embedding))
    engine_task = open_engine(settings)
    embedder, engine = await asyncio.gather(asyncio.to_thread(factory), engine_task)
    tracer = telemetry.tracer(__name__) if telemetry else None
    return SearchService(engine, TracedEmbedder(embedder, tracer), settings)


async def open_engine(settings: SearchToolSettings) -> SearchEngine:
    """The engine `settings.engine.kind` names: PostgreSQL at the DSN `engine.postgres` points
    to, Vespa at `engine.vespa.url`, or LanceDB opened on `settings.data_dir`."""
    if settings.engine.kind == "postgres":
        return await PostgresEngine.open(
            settings.engine.postgres,
            hybrid_candidates=settings.fusion.candidates,
            keyword_count_cap=settings.engine.keyword_count_cap,
        )
    if settings.engine.kind == "vespa":
        vespa = settings.engine.vespa
        return await VespaEngine.open(
            Endpoint(
                url=vespa.url,
                feed_url=vespa.feed_url,
                cert_path=vespa.cert_path,
                key_path=vespa.key_path,
                ca_path=vespa.ca_path,
                feed_concurrency=vespa.feed_concurrency,
                feed_retries=vespa.feed_retries,
                query_timeout_s=vespa.query_timeout_s,
            ),
            hybrid_candidates=settings.fusion.candidates,
            keyword_count_cap=settings.engine.keyword_count_cap,
            facts_ttl_s=vespa.facts_ttl_s,
        )
    return await LanceDBEngine.open(
        settings.data_dir,
        policy=settings.engine.index_policy(),
        hybrid_candidates=settings.fusion.candidates,
        keyword_count_cap=settings.engine.keyword_count_cap,
        settle_after_s=settings.engine.settle_after_s,
        vectors_in_memory=settings.engine.vectors_in_memory,
        keywords_in_memory=settings.engine.keywords_in_memory,
    )
