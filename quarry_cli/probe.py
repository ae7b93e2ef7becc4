"""Which Quarry service answers at an address: said when a command was pointed at the wrong port."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.channels import open_channel

SERVICES = {
    "quarry.searchtool.v1.SearchToolService": ("the search tool", "50051"),
    "quarry.llmgateway.v1.LlmGatewayService": ("the LLM gateway", "50052"),
    "quarry.agent.v1.AgentService": ("the agent", "50053"),
}


async def service_at(address: str, *, timeout_s: float = 2.0) -> str | None:
    """The full name of the Quarry service serving health at `address`, if any."""
    async with open_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in SERVICES:
            try:
                await stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=timeout_s)
            except grpc.aio.AioRpcError:
                continue
            return name
    return None


async def wrong_service_hint(address: str, expected: str) -> str:
    """A sentence naming what answers at `address` instead of `expected` (a full service name)."""
    found = await service_at(address)
    wanted = SERVICES[expected][0]
    if found is None:
        return f"{address} does not answer as {wanted}; is that the right address?"
    return f"{address} is {SERVICES[found][0]}, not {wanted}: point --address at {wanted}."
