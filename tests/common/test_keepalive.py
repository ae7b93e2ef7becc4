"""Client pings and server ping policy agree: an idle channel stays connected and still works."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.channels import open_channel
from services.common.keepalive import KeepalivePolicy
from services.common.server import build_server
from services.common.settings import ServerSettings

FAST = KeepalivePolicy(ping_interval_ms=200, ping_timeout_ms=1_000)
# gRPC sends at most one keepalive ping a second whatever the interval; a server with gRPC's
# default policy answers the fourth ping on an idle connection with GOAWAY too_many_pings, ~3 s in.
IDLE_S = 3.5


async def test_a_channel_idle_for_many_keepalive_pings_stays_connected_and_answers() -> None:
    server = build_server([], ServerSettings(grace_s=0), keepalive=FAST)
    await server.start()
    try:
        async with open_channel(server.address, keepalive=FAST) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            await health.Check(health_pb2.HealthCheckRequest())
            assert channel.get_state() == grpc.ChannelConnectivity.READY
            # idling is the behaviour under test: the server must not drop the connection
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(
                    channel.wait_for_state_change(grpc.ChannelConnectivity.READY), IDLE_S
                )
            reply = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)
