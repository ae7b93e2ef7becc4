"""The search tool on the Vespa engine reports SERVING only while Vespa answers queries with this
application package deployed, and flips back when it stops: a server built as `python -m
services.search_tool` builds it, its Vespa a local recording server, its health read through the
standard gRPC health Watch stream (events, no sleeps).

The refusal of an unknown rank profile is Vespa's ClusterSearcher answer (400, "Requested rank
profile '…' is undefined for document type '…'", an INVALID_QUERY_PARAMETER error), as pyvespa's
own integration tests assert it; the live suite proves it against a real Vespa."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.settings import ServerSettings
from services.search_tool.config import EngineSettings, SearchToolSettings, VespaSettings
from services.search_tool.engine.vespa.package import package_profile
from services.search_tool.server import build_search_tool_server
from services.search_tool.servicer import SERVICE_NAME
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply
from tests.search_tool.vespa.test_grpc_coverage import _FixtureEmbedder
from tests.search_tool.vespa.test_http_contract import _root

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@dataclass
class Vespa:
    """A Vespa whose deployed package and health the test switches."""

    deployed: bool = False
    down: bool = False
    probes: list[Recorded] = field(default_factory=list)
    refused: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once a readiness probe was refused (the package is not deployed)."""

    def respond(self, request: Recorded) -> Reply:
        if self.down:
            return Reply(503, {"root": {"errors": [{"code": 10, "message": "no backends"}]}})
        body = request.json() if request.body else {}
        if body.get("ranking") == package_profile():
            self.probes.append(request)
            if not self.deployed:
                message = (
                    f"Requested rank profile '{package_profile()}' is undefined for document "
                    "type 'chunk'"
                )
                self.refused.set()
                return Reply(400, {"root": {"errors": [{"code": 4, "message": message}]}})
        return _root([], 0)


async def _statuses(channel: grpc.aio.Channel) -> AsyncIterator[int]:
    stub = health_pb2_grpc.HealthStub(channel)
    async for reply in stub.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME)):
        yield reply.status


async def test_readiness_follows_whether_vespa_runs_this_package_and_answers() -> None:
    vespa = Vespa()
    recording = RecordingServer(vespa.respond)
    await recording.start()
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0),
        engine=EngineSettings(
            kind="vespa", vespa=VespaSettings(url=recording.url), readiness_interval_s=0.02
        ),
        log_format="text",
    )
    server = build_search_tool_server(settings, embedder_factory=_FixtureEmbedder)
    await server.start()
    seen: list[int] = []
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            async with asyncio.timeout(10):
                async for status in _statuses(channel):
                    seen.append(status)
                    if status == NOT_SERVING and not vespa.deployed:
                        await vespa.refused.wait()  # Vespa answered: not this package
                        vespa.deployed = True  # then it is deployed
                    elif status == SERVING:
                        vespa.down = True  # and then Vespa stops answering
                    elif status == NOT_SERVING and vespa.down:
                        break
    finally:
        await server.stop(0)
        await recording.close()
    assert seen == [NOT_SERVING, SERVING, NOT_SERVING]
    probe = vespa.probes[0].json()
    assert probe["hits"] == 0
    assert (
        probe["yql"]
        == 'select chunk_id from chunk where chunk_id contains "quarry-readiness-probe"'
    )
