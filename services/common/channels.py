"""Client channels between services: traced, with sane limits."""

from __future__ import annotations

import grpc

from services.common.keepalive import KEEPALIVE, KeepalivePolicy
from services.common.telemetry import Telemetry

_MAX_MESSAGE_BYTES = 32 * 1024 * 1024


def open_channel(
    target: str,
    telemetry: Telemetry | None = None,
    *,
    keepalive: KeepalivePolicy = KEEPALIVE,
) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to `target` that propagates the trace context and keeps an
    idle connection alive within what Quarry servers accept (`services.common.keepalive`)."""
    interceptors = list(telemetry.client_interceptors()) if telemetry else []
    return grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            *keepalive.client_options(),
        ],
        interceptors=interceptors,
    )
