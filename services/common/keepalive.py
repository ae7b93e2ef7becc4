"""The one keepalive policy, read by both ends of every Quarry channel.

Clients ping an idle connection every `ping_interval_ms` (so a dead peer or a silently dropped
NAT/load-balancer entry is noticed before the next call, not by it). A gRPC server with its default
policy refuses pings on a connection with no calls, or more often than every five minutes: after two
such pings it answers GOAWAY `too_many_pings`, and the first call after an idle period fails with
UNAVAILABLE "Too many pings". Quarry servers therefore accept pings without calls and as often as
half the client interval (the margin absorbs timer jitter).
"""

from __future__ import annotations

from dataclasses import dataclass

GrpcOptions = list[tuple[str, int]]


@dataclass(frozen=True)
class KeepalivePolicy:
    """How often clients ping idle connections, and what servers therefore accept."""

    ping_interval_ms: int = 30_000
    """A client pings a connection after this long without traffic."""
    ping_timeout_ms: int = 10_000
    """A ping unanswered for this long closes the connection."""

    def client_options(self) -> GrpcOptions:
        return [
            ("grpc.keepalive_time_ms", self.ping_interval_ms),
            ("grpc.keepalive_timeout_ms", self.ping_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]

    def server_options(self) -> GrpcOptions:
        # this argument is C-core's GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS: the least
        # interval between pings a server accepts (default 5 min) before counting a strike
        return [
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", self.ping_interval_ms // 2),
            ("grpc.http2.max_ping_strikes", 2),
        ]


KEEPALIVE = KeepalivePolicy()
"""The policy every Quarry server and channel uses unless a test passes its own."""
