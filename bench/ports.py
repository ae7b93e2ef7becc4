"""Loopback ports for the processes a bench or a test starts.

A port is picked by binding port 0 and releasing it, since another process has to bind it. A
released port can be handed out again by the very next bind, so the ports one run needs are
picked together (`free_ports`): each probe is held until all are bound. Two services of one test
once got the same port when they were picked one at a time.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports nothing listens on now."""
    with ExitStack() as held:
        probes = [
            held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


def free_port() -> int:
    """One loopback port nothing listens on now (pick a run's ports together: `free_ports`)."""
    (port,) = free_ports(1)
    return port
