"""`server.health_port`: a plaintext listener that serves only the gRPC health service.

The kubelet's native gRPC probes cannot speak TLS; with `server.tls` on they probe this port.
Every test runs real servers on 127.0.0.1 (port 0) and real TLS handshakes with certificates
made in the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.common.channels import open_channel
from services.common.server import LIVENESS_SERVICE, QuarryServer, ServiceRegistration, build_server
from services.common.settings import ServerSettings
from services.common.tls import ChannelTls, ServerTls
from tests.common.certs import Authority, issue, make_ca

SERVICE = "test.v1.EchoService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
CALL_TIMEOUT_S = 10.0


class _Gate:
    """A method that holds its call open until released: an in-flight call during a drain."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def hold(self, request: bytes, context: Any) -> bytes:
        self.entered.set()
        await self.release.wait()
        return b"done"


async def _echo(request: bytes, context: Any) -> bytes:
    return request


def _registration(gate: _Gate) -> ServiceRegistration:
    def register(server: grpc.aio.Server) -> None:
        handlers = {
            "Echo": grpc.unary_unary_rpc_method_handler(_echo),
            "Hold": grpc.unary_unary_rpc_method_handler(gate.hold),
        }
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])

    return ServiceRegistration(SERVICE, register)


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return make_ca(tmp_path, "quarry-test-ca")


@pytest.fixture
def gate() -> _Gate:
    return _Gate()


@pytest.fixture
async def tls_server(ca: Authority, tmp_path: Path, gate: _Gate) -> AsyncIterator[QuarryServer]:
    pem = issue(ca, tmp_path, "server")
    settings = ServerSettings(
        port=0,
        health_port=0,
        grace_s=0,
        tls=ServerTls(cert_file=pem.cert_file, key_file=pem.key_file),
    )
    server = build_server([_registration(gate)], settings)
    await server.start()
    yield server
    gate.release.set()
    await server.stop(0)


def _health_address(server: QuarryServer) -> str:
    assert server.health_port, "the health port must be bound"
    return f"127.0.0.1:{server.health_port}"


async def _check(address: str, name: str, tls: ChannelTls | None = None) -> Any:
    """The health status of `name`, or the status code of the failed call."""
    channel = open_channel(address, tls=tls)
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=name), timeout=CALL_TIMEOUT_S
        )
        return reply.status
    except grpc.aio.AioRpcError as error:
        return error.code()
    finally:
        await channel.close(None)


async def test_the_health_port_answers_in_plaintext_while_the_main_port_requires_tls(
    tls_server: QuarryServer, ca: Authority
) -> None:
    health = _health_address(tls_server)
    for name in ("", SERVICE, LIVENESS_SERVICE):
        assert await _check(health, name) == SERVING
    assert await _check(tls_server.address, SERVICE) == grpc.StatusCode.UNAVAILABLE
    trusted = ChannelTls(enabled=True, ca_file=ca.cert_file)
    assert await _check(tls_server.address, SERVICE, trusted) == SERVING


async def test_the_health_port_refuses_every_other_service_and_reflection(
    tls_server: QuarryServer, ca: Authority
) -> None:
    async with grpc.aio.insecure_channel(_health_address(tls_server)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as echo:
            await channel.unary_unary(f"/{SERVICE}/Echo", None, None)(b"hi", timeout=CALL_TIMEOUT_S)
        assert echo.value.code() == grpc.StatusCode.UNIMPLEMENTED
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.aio.AioRpcError) as listed:
            async for _ in reflection.ServerReflectionInfo(iter([request]), timeout=CALL_TIMEOUT_S):
                pass
        assert listed.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # the same method is there on the main (TLS) port: the health port hides it, nothing else
    trusted = ChannelTls(enabled=True, ca_file=ca.cert_file)
    main = open_channel(tls_server.address, tls=trusted)
    try:
        assert (
            await main.unary_unary(f"/{SERVICE}/Echo", None, None)(b"hi", timeout=CALL_TIMEOUT_S)
            == b"hi"
        )
    finally:
        await main.close(None)


async def test_readiness_and_liveness_read_the_same_on_both_ports_when_a_drain_begins(
    tls_server: QuarryServer, ca: Authority
) -> None:
    trusted = ChannelTls(enabled=True, ca_file=ca.cert_file)
    await tls_server.begin_drain()
    for name, expected in (("", NOT_SERVING), (SERVICE, NOT_SERVING), (LIVENESS_SERVICE, SERVING)):
        assert await _check(_health_address(tls_server), name) == expected
        assert await _check(tls_server.address, name, trusted) == expected


async def test_the_health_port_answers_through_the_whole_grace_period_then_closes(
    ca: Authority, tmp_path: Path, gate: _Gate
) -> None:
    pem = issue(ca, tmp_path, "server")
    settings = ServerSettings(
        port=0,
        health_port=0,
        grace_s=60,
        tls=ServerTls(cert_file=pem.cert_file, key_file=pem.key_file),
    )
    server = build_server([_registration(gate)], settings)
    await server.start()
    health = _health_address(server)
    trusted = ChannelTls(enabled=True, ca_file=ca.cert_file)
    main = open_channel(server.address, tls=trusted)
    in_flight = asyncio.ensure_future(main.unary_unary(f"/{SERVICE}/Hold", None, None)(b""))
    await gate.entered.wait()
    stopping = asyncio.ensure_future(server.stop())
    try:
        # the main port is draining its in-flight call; probes still get their answers
        async with grpc.aio.insecure_channel(health) as probe:
            watch = health_pb2_grpc.HealthStub(probe).Watch(
                health_pb2.HealthCheckRequest(service=SERVICE), timeout=CALL_TIMEOUT_S
            )
            async for reply in watch:
                if reply.status == NOT_SERVING:
                    break
        assert await _check(health, LIVENESS_SERVICE) == SERVING
        assert not stopping.done()
    finally:
        gate.release.set()
        assert await in_flight == b"done"
        await stopping
        await main.close(None)
    assert await _check(health, LIVENESS_SERVICE) == grpc.StatusCode.UNAVAILABLE


def test_the_health_port_must_differ_from_the_main_port() -> None:
    with pytest.raises(ValueError, match="health_port must differ"):
        ServerSettings(port=50051, health_port=50051)
    assert ServerSettings(port=0, health_port=0).health_port == 0


async def test_without_a_health_port_no_second_listener_is_opened() -> None:
    server = build_server([], ServerSettings(port=0, grace_s=0))
    assert server.health_server is None
    assert server.health_port is None
