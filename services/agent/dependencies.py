"""How the agent calls its two dependencies: wait for a connection within the caller's deadline.

When the services start separately, the agent's channel to the search tool or the gateway may
still be connecting (or backing off after a refused connection) when the first question comes.
A call made with `wait_for_ready` waits for the connection instead of failing at once with
UNAVAILABLE; the caller's deadline bounds the wait. A call without a deadline fails fast, as
before: waiting could otherwise be forever. A deadline that expires while the channel is still not
connected is said so, naming the dependency.
"""

from __future__ import annotations

from typing import Any

import grpc

from services.common.errors import DeadlineExceeded, QuarryError
from services.common.status import domain_error


def call_options(remaining_s: float | None) -> dict[str, Any]:
    """`timeout` and `wait_for_ready` of a call with `remaining_s` of the caller's deadline."""
    return {"timeout": remaining_s, "wait_for_ready": remaining_s is not None}


def dependency_error(
    error: grpc.aio.AioRpcError, channel: grpc.aio.Channel, service: str
) -> QuarryError:
    """The domain error of a failed call to `service`; an unconnected channel is named."""
    if error.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
        state = channel.get_state(try_to_connect=False)
        if state is not grpc.ChannelConnectivity.READY:
            return DeadlineExceeded(
                f"{service}: not reachable within the caller's deadline "
                f"(connection {state.name.lower()})"
            )
    return domain_error(error, service)
