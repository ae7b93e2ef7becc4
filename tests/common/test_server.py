"""The shared server bootstrap: health, reflection, error mapping, draining."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from quarry.common.v1 import search_pb2

from services.common.errors import InvalidArgument, NotFound, Unavailable
from services.common.server import (
    LIVENESS_SERVICE,
    QuarryServer,
    ServiceRegistration,
    build_server,
    freeze_startup_heap,
)
from services.common.settings import ServerSettings
from services.common.status import details_of_rpc_error
from services.common.telemetry import setup_telemetry

SERVICE = "test.v1.ProbeService"


async def _bad_field(request: bytes, context: Any) -> bytes:
    raise InvalidArgument.for_field("query.primary", "must not be empty")


async def _missing(request: bytes, context: Any) -> bytes:
    raise NotFound("collection 'nope' does not exist", metadata={"collection": "nope"})


async def _busy(request: bytes, context: Any) -> bytes:
    raise Unavailable("try later", retry_after_s=1.5)


async def _crash(request: bytes, context: Any) -> bytes:
    raise RuntimeError("secret internals /etc/passwd")


async def _stream_then_fail(request: bytes, context: Any) -> AsyncIterator[bytes]:
    yield b"first"
    raise NotFound("gone mid-stream")


async def _echo_query(request: search_pb2.SearchQuery, context: Any) -> bytes:
    return request.primary.encode()


async def _stream_query(request: search_pb2.SearchQuery, context: Any) -> AsyncIterator[bytes]:
    yield request.primary.encode()


def _register(server: grpc.aio.Server) -> None:
    parse = search_pb2.SearchQuery.FromString
    handlers = {
        "BadField": grpc.unary_unary_rpc_method_handler(_bad_field),
        "Missing": grpc.unary_unary_rpc_method_handler(_missing),
        "Busy": grpc.unary_unary_rpc_method_handler(_busy),
        "Crash": grpc.unary_unary_rpc_method_handler(_crash),
        "Stream": grpc.unary_stream_rpc_method_handler(_stream_then_fail),
        "Parse": grpc.unary_unary_rpc_method_handler(_echo_query, request_deserializer=parse),
        "ParseStream": grpc.unary_stream_rpc_method_handler(
            _stream_query, request_deserializer=parse
        ),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])


@pytest.fixture
async def server() -> AsyncIterator[QuarryServer]:
    built = build_server([ServiceRegistration(SERVICE, _register)], ServerSettings(grace_s=0.5))
    await built.start()
    yield built
    await built.stop(0)


@pytest.fixture
async def channel(server: QuarryServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(server.address) as channel:
        yield channel


async def _call(channel: grpc.aio.Channel, method: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(f"/{SERVICE}/{method}", None, None)(b"")
    return caught.value


async def test_server_binds_a_free_port_and_reports_each_service_serving(
    server: QuarryServer, channel: grpc.aio.Channel
) -> None:
    assert server.port > 0
    health = health_pb2_grpc.HealthStub(channel)
    for name in ("", SERVICE):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_registered_service(channel: grpc.aio.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def one_request() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    names: list[str] = []
    async for reply in stub.ServerReflectionInfo(one_request()):
        names = [s.name for s in reply.list_services_response.service]
    assert SERVICE in names
    assert "grpc.health.v1.Health" in names


async def test_invalid_argument_carries_bad_request_naming_the_field(
    channel: grpc.aio.Channel,
) -> None:
    error = await _call(channel, "BadField")
    details = details_of_rpc_error(error)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details.reason == "INVALID_ARGUMENT"
    assert [v.field for v in details.violations] == ["query.primary"]


async def test_not_found_carries_error_info_metadata(channel: grpc.aio.Channel) -> None:
    error = await _call(channel, "Missing")
    details = details_of_rpc_error(error)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert details.metadata == {"collection": "nope"}


INVALID_UTF8 = b"\x0a\x02\xff\xfe"
"""Field 1 (`primary`, a proto3 string) holding bytes that are not UTF-8."""
TRUNCATED = b"\x0a\x10abc"
"""Field 1 announcing 16 bytes and carrying 3."""


@pytest.mark.parametrize("payload", [INVALID_UTF8, TRUNCATED], ids=["invalid-utf8", "truncated"])
async def test_bytes_that_are_not_a_message_are_invalid_argument_not_unknown(
    channel: grpc.aio.Channel, payload: bytes
) -> None:
    assert await channel.unary_unary(f"/{SERVICE}/Parse", None, None)(b"\x0a\x02ok") == b"ok"
    with pytest.raises(grpc.aio.AioRpcError) as unary:
        await channel.unary_unary(f"/{SERVICE}/Parse", None, None)(payload)
    with pytest.raises(grpc.aio.AioRpcError) as stream:
        async for _ in channel.unary_stream(f"/{SERVICE}/ParseStream", None, None)(payload):
            pass
    for caught in (unary.value, stream.value):
        assert caught.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.details()
        assert [v.field for v in details_of_rpc_error(caught).violations] == ["request"]


async def test_unavailable_carries_retry_info(channel: grpc.aio.Channel) -> None:
    error = await _call(channel, "Busy")
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert details_of_rpc_error(error).retry_after_s == pytest.approx(1.5)


async def test_unexpected_exception_is_internal_without_leaking_its_message(
    channel: grpc.aio.Channel,
) -> None:
    error = await _call(channel, "Crash")
    assert error.code() == grpc.StatusCode.INTERNAL
    assert "passwd" not in (error.details() or "")
    assert "Traceback" not in (error.details() or "")


async def test_stream_delivers_items_before_a_mapped_error(channel: grpc.aio.Channel) -> None:
    call = channel.unary_stream(f"/{SERVICE}/Stream", None, None)(b"")
    received: list[bytes] = []
    code = None
    try:
        async for item in call:
            received.append(item)
    except grpc.aio.AioRpcError as error:
        code = error.code()
    assert received == [b"first"]
    assert code == grpc.StatusCode.NOT_FOUND


async def test_stop_flips_health_to_not_serving_before_shutting_down(
    server: QuarryServer, channel: grpc.aio.Channel
) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    await server.set_serving(False)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE))
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def _status(channel: grpc.aio.Channel, name: str) -> int:
    health = health_pb2_grpc.HealthStub(channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
    return int(reply.status)


async def test_draining_flips_readiness_but_liveness_stays_serving(
    server: QuarryServer, channel: grpc.aio.Channel
) -> None:
    serving, not_serving = (
        health_pb2.HealthCheckResponse.SERVING,
        health_pb2.HealthCheckResponse.NOT_SERVING,
    )
    assert await _status(channel, LIVENESS_SERVICE) == serving
    await server.begin_drain()
    assert await _status(channel, SERVICE) == not_serving
    assert await _status(channel, "") == not_serving
    assert await _status(channel, LIVENESS_SERVICE) == serving


async def test_stop_drains_readiness_and_leaves_liveness_alone() -> None:
    built = build_server([ServiceRegistration(SERVICE, _register)], ServerSettings(grace_s=0))
    await built.start()
    await built.stop()
    # the server no longer answers calls: read the state the health servicer holds
    watched = {
        name: await built.health.Check(health_pb2.HealthCheckRequest(service=name), None)
        for name in ("", SERVICE, LIVENESS_SERVICE)
    }
    assert watched[""].status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert watched[SERVICE].status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert watched[LIVENESS_SERVICE].status == health_pb2.HealthCheckResponse.SERVING


async def test_health_watch_streams_through_the_tracing_interceptor() -> None:
    telemetry = setup_telemetry("quarry-test", span_exporter=InMemorySpanExporter())
    built = build_server([ServiceRegistration(SERVICE, _register)], ServerSettings(), telemetry)
    await built.start()
    try:
        async with grpc.aio.insecure_channel(built.address) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=LIVENESS_SERVICE)
            )
            reply = await watch.read()
            watch.cancel()
    finally:
        await built.stop(0)
        telemetry.shutdown()
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_one_connection_carries_more_concurrent_calls_than_http2s_usual_100() -> None:
    """The agent multiplexes every run's searches over one channel: with a per-connection stream
    limit, grpc clients do not queue the excess, they fail UNAVAILABLE (REFUSED_STREAM)."""
    release, all_in = asyncio.Event(), asyncio.Event()
    entered = 0

    async def held(request: bytes, context: Any) -> bytes:
        nonlocal entered
        entered += 1
        if entered == 150:
            all_in.set()
        await release.wait()
        return b"done"

    def register(server: grpc.aio.Server) -> None:
        handler = grpc.unary_unary_rpc_method_handler(held)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(SERVICE, {"Held": handler})]
        )

    built = build_server([ServiceRegistration(SERVICE, register)], ServerSettings(grace_s=0))
    await built.start()
    try:
        async with grpc.aio.insecure_channel(built.address) as channel:
            call = channel.unary_unary(f"/{SERVICE}/Held", None, None)
            calls = [asyncio.ensure_future(call(b"")) for _ in range(150)]
            await asyncio.wait_for(all_in.wait(), timeout=30)
            release.set()
            assert await asyncio.gather(*calls) == [b"done"] * 150
    finally:
        await built.stop(0)


async def test_a_call_arriving_as_the_server_stops_accepting_is_refused_unavailable() -> None:
    """Not CANCELLED, which is what gRPC core's shutdown makes of a call it finds not yet handed
    to Python, and which retry policies do not retry; the call in flight still finishes."""
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow(request: bytes, context: Any) -> bytes:
        entered.set()
        await release.wait()
        return b"done"

    def register(server: grpc.aio.Server) -> None:
        _register(server)
        handlers = {"Slow": grpc.unary_unary_rpc_method_handler(slow)}
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])

    built = build_server([ServiceRegistration(SERVICE, register)], ServerSettings(grace_s=10))
    await built.start()
    async with grpc.aio.insecure_channel(built.address) as channel:
        held = asyncio.ensure_future(channel.unary_unary(f"/{SERVICE}/Slow", None, None)(b""))
        await entered.wait()
        stopping = asyncio.ensure_future(built.stop())
        while not built.admission.closed:  # noqa: ASYNC110
            await asyncio.sleep(0.005)  # the gate has no event to wait on
        refused = await _call(channel, "Missing")
        liveness = await _status(channel, LIVENESS_SERVICE)
        release.set()
        answered = await held
    await stopping
    details = details_of_rpc_error(refused)
    assert details.code == grpc.StatusCode.UNAVAILABLE
    assert (details.reason, details.retry_after_s) == ("CLOSING", 1.0)
    assert "shutting down" in details.message
    assert liveness == health_pb2.HealthCheckResponse.SERVING
    assert answered == b"done"


class _Node:
    """An object in a reference cycle: only the cyclic collector could ever reclaim it."""

    def __init__(self) -> None:
        self.me = self


def test_freezing_the_startup_heap_keeps_live_objects_out_of_every_later_collection() -> None:
    before = _Node()
    try:
        frozen = freeze_startup_heap()
        after = _Node()
        walked = gc.get_objects()  # what a full collection walks (the permanent generation is not)
        assert frozen >= 1
        assert not any(o is before for o in walked)
        assert any(o is after for o in walked)  # what is allocated later is collected as usual
    finally:
        gc.unfreeze()  # the test process goes on with its usual collector
    assert any(o is before for o in gc.get_objects())
