"""Bootstrap: settings → providers, routes and servicer → a `QuarryServer`."""

from __future__ import annotations

import logging

from quarry.llmgateway.v1 import llm_gateway_pb2 as pb
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as pb_grpc

from services.common.auth import GATEWAY
from services.common.server import QuarryServer, ServiceRegistration, build_server
from services.common.telemetry import Telemetry
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.providers.factory import build_providers
from services.llm_gateway.routes import Router
from services.llm_gateway.servicer import LlmGatewayServicer
from services.llm_gateway.telemetry import GatewayTelemetry

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LlmGatewayService"].full_name
ACCESS_RULES = {
    m.name: GATEWAY for m in pb.DESCRIPTOR.services_by_name["LlmGatewayService"].methods
}
"""Every gateway RPC needs a key allowed to call the gateway directly (the agent's own key)."""


def build_gateway_server(
    settings: GatewaySettings, telemetry: Telemetry | None = None
) -> QuarryServer:
    """The gateway server, bound but not started; providers are closed when it stops."""
    log.info(
        "routes",
        extra={"routes": dict(settings.routes), "default_route": settings.default_route},
    )
    gateway_telemetry = GatewayTelemetry(telemetry)
    router = Router.from_settings(settings, build_providers(settings), telemetry=gateway_telemetry)
    servicer = LlmGatewayServicer(
        router,
        telemetry=gateway_telemetry,
        max_structured_attempts=settings.max_structured_attempts,
    )
    server = build_server(
        [
            ServiceRegistration(
                SERVICE_NAME,
                lambda s: pb_grpc.add_LlmGatewayServiceServicer_to_server(servicer, s),
                ACCESS_RULES,
            )
        ],
        settings.server,
        telemetry,
    )
    server.on_stop.append(router.aclose)
    return server
