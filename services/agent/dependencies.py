"""How the agent calls its two dependencies: connected first, briefly, then the call itself.

When the services start separately, the agent's channel to the search tool or the gateway may
still be connecting (or backing off after a refused connection) when a question comes. Before each
call the channel is given up to `CONNECT_WAIT_S` (never more than the caller's deadline) to
connect; channels reconnect within about two seconds (`services.common.channels`), so a dependency
that is coming up or restarting is reached. One that stays down is named at once: UNAVAILABLE
(with RetryInfo) when the wait ran out, DEADLINE_EXCEEDED when the caller's deadline did, each
naming the dependency and its connection state, instead of the call hanging until the deadline.
A connection lost during a call fails it UNAVAILABLE, naming the dependency too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from services.common.errors import DeadlineExceeded, QuarryError, Unavailable
from services.common.status import domain_error

CONNECT_WAIT_S = 3.0
"""The longest a call waits for its dependency's channel to connect."""
RETRY_AFTER_S = 2.0
"""The RetryInfo delay of an unreachable dependency: about one reconnect attempt."""


async def call_options(
    channel: grpc.aio.Channel, service: str, remaining_s: float | None
) -> dict[str, Any]:
    """`timeout` of a call with `remaining_s` of the caller's deadline, once `channel` is
    connected; raises `Unavailable` / `DeadlineExceeded` naming `service` when it does not
    connect within `CONNECT_WAIT_S` / the deadline."""
    if channel.get_state(try_to_connect=True) is not grpc.ChannelConnectivity.READY:
        await _connected(channel, service, remaining_s)
    return {"timeout": remaining_s}


async def _connected(channel: grpc.aio.Channel, service: str, remaining_s: float | None) -> None:
    wait_s = CONNECT_WAIT_S if remaining_s is None else min(CONNECT_WAIT_S, remaining_s)
    try:
        async with asyncio.timeout(max(wait_s, 0.0)):
            await channel.channel_ready()
    except TimeoutError:
        state = channel.get_state(try_to_connect=False).name.lower()
        if remaining_s is not None and remaining_s <= CONNECT_WAIT_S:
            raise DeadlineExceeded(
                f"{service}: not reachable within the caller's deadline (connection {state})"
            ) from None
        raise Unavailable(
            f"{service}: not reachable (connection {state} for {wait_s:g} s); "
            f"is the {service} running?",
            retry_after_s=RETRY_AFTER_S,
        ) from None


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
