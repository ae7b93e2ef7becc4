"""Client channels between services: traced, with sane limits."""

from __future__ import annotations

import grpc

from services.common.telemetry import Telemetry

_MAX_MESSAGE_BYTES = 32 * 1024 * 1024


def open_channel(target: str, telemetry: Telemetry | None = None) -> grpc.aio.Channel:
    """An insecure grpc.aio channel to `target` that propagates the trace context."""
    interceptors = list(telemetry.client_interceptors()) if telemetry else []
    return grpc.aio.insecure_channel(
        target,
        options=[
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ],
        interceptors=interceptors,
    )
