"""`bench.ports`: the ports a test or bench run starts its processes on."""

from __future__ import annotations

import socket

from bench.ports import free_port, free_ports


def test_ports_picked_together_are_distinct_and_each_can_be_listened_on() -> None:
    ports = free_ports(64)

    assert len(set(ports)) == 64
    listeners = []
    try:
        for port in ports:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listeners.append(listener)
            listener.bind(("127.0.0.1", port))
            listener.listen()
    finally:
        for listener in listeners:
            listener.close()


def test_a_single_port_is_one_nothing_listens_on() -> None:
    port = free_port()

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", port))
        listener.listen()
