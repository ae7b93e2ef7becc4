"""Test-wide guards: no test reaches beyond the loopback interface."""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

import pytest

REAL_MODEL_ENV = "QUARRY_REAL_MODEL"
# The real-model proof needs the model `make local-model` prepares and minutes of CPU: it runs in
# `make real-model-proof` (QUARRY_REAL_MODEL=1), which CI calls after `make test`.
collect_ignore = [] if os.environ.get(REAL_MODEL_ENV) == "1" else ["real_model"]

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check(address: Any) -> None:
    if isinstance(address, tuple) and address:
        host = str(address[0])
        if host in ("localhost", ""):
            return
        try:
            if ipaddress.ip_address(host).is_loopback:
                return
        except ValueError:
            pass
        raise RuntimeError(f"tests must not reach the network (tried {host})")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check(address)
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check(address)
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def _agent_history_in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """An agent built by a test records its runs under the test's temp dir, not ./var."""
    monkeypatch.setenv("QUARRY_AGENT_HISTORY__PATH", str(tmp_path / "agent-runs.sqlite3"))


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
