"""Test-wide guards: no test reaches beyond the loopback interface, and under CI no PostgreSQL test
is skipped (a skipped one fails the run). The PostgreSQL fixtures live in `tests/postgres_server.py`
and are registered here for every test package."""

from __future__ import annotations

import ast
import asyncio
import faulthandler
import functools
import gc
import ipaddress
import os
import signal
import socket
import sys
import threading
from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import settings

from tests.postgres_server import postgres_dsn, postgres_server

__all__ = ["postgres_dsn", "postgres_server"]

_AST_LOCK = threading.RLock()
_unlocked_parse = ast.parse


@functools.wraps(_unlocked_parse)
def _parse_one_thread_at_a_time(*args: Any, **kwargs: Any) -> Any:
    with _AST_LOCK:
        return _unlocked_parse(*args, **kwargs)


# CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state and misses
# restoring it on an error path (python/cpython#106905), so two threads building ASTs at once
# (pytest rewriting a module's asserts on the main thread while a service in a test thread formats
# a traceback, whose carets `ast.parse` a source line) can end in `SystemError: AST constructor
# recursion depth mismatch`, seen in `pytest tests/cli` here. In tests, one parse at a time.
ast.parse = _parse_one_thread_at_a_time

# A shell that starts the suite in the background (`nohup make test &`) starts it with SIGINT
# ignored, and every CLI subprocess a test starts would inherit that and never see the Ctrl-C the
# test sends. A handler (unlike SIG_IGN) is reset to the default at exec: children get Python's
# usual KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# No timed assertions in tests: Hypothesis's default 200 ms per-example deadline fails a correct
# property on a loaded machine (seen once in tests/search_tool/vespa/test_yql.py at load ~25). A
# property that must bound time says so itself, as the calculator's does.
settings.register_profile("quarry", deadline=None)
settings.load_profile("quarry")

POSTGRES_MARK = "postgres"
_POSTGRES_FIXTURES = frozenset({"postgres_server", "postgres_dsn"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses a PostgreSQL fixture is marked `postgres`."""
    for item in items:
        if _POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(POSTGRES_MARK)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Under CI a skipped `postgres` test is a failure: the live PostgreSQL suite must run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") and item.get_closest_marker(POSTGRES_MARK):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid}: a PostgreSQL test was skipped under CI ({reason}); "
            "these tests must run against the embedded PostgreSQL"
        )


def _stalled_report(nodeid: str, after_s: float) -> None:
    """What a stalled test is doing, written straight to the terminal (uncaptured, so CI's log
    has it even if the run is killed): every thread's stack, and every pending asyncio task's
    (an event loop waiting shows only `select` in a thread stack; its tasks show where)."""
    out = sys.__stderr__
    if out is None:
        return
    out.write(f"\n=== {nodeid} still running after {after_s:.0f} s: stacks ===\n")
    out.flush()
    faulthandler.dump_traceback(file=out, all_threads=True)
    for task in [o for o in gc.get_objects() if isinstance(o, asyncio.Task)]:
        if not task.done():
            out.write(f"--- asyncio task {task.get_name()}\n")
            task.print_stack(limit=12, file=out)
    out.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, Any, None]:
    """A test still running at 90 % of its pytest-timeout (setup, call and teardown together)
    reports its stacks first, so a hang that CI meets can be read from CI's log."""
    marker = item.get_closest_marker("timeout")
    limit = (
        float(marker.args[0])
        if marker and marker.args
        else float(item.config.getini("timeout") or 0)
    )
    timer = None
    if limit > 0:
        timer = threading.Timer(limit * 0.9, _stalled_report, (item.nodeid, limit * 0.9))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()


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
