"""The grpc.aio server bootstrap every service uses, in `main` and in tests.

`build_server` wires health, reflection, admission control, tracing and error mapping around the
servicers a service registers. `serve` runs it until SIGTERM/SIGINT, then drains:

    readiness NOT_SERVING         new and in-flight calls are still served for `drain_window_s`
                                  (SIGTERM only), so health-checking load balancers see the drain
    stop accepting                in-flight calls finish for `grace_s`; for its first `CLOSE_S` the
                                  server still takes calls, only to refuse each UNAVAILABLE (reason
                                  `CLOSING`, RetryInfo), so a call racing the listener's close is
                                  refused retryably, not cancelled by gRPC core's shutdown
    grace over                    `on_grace_end` callbacks let streaming calls end with a message
                                  of their own (the agent's `error` event), then the rest is cut

Health names, and the probe each one is for:

    quarry.liveness      liveness: SERVING from start until the process exits, even draining
    <full service name>  readiness: SERVING once the service can answer, NOT_SERVING while draining
    ""                   the server as a whole (gRPC convention): follows readiness

A liveness probe must not fail while a pod drains properly (the kubelet would kill it mid-drain),
so it checks `quarry.liveness`, never `""`.

`server.health_port` adds a second, plaintext listener that serves only `grpc.health.v1.Health`
(no Quarry service, no reflection), backed by the same health states: the kubelet's native gRPC
probes cannot speak TLS, so with `server.tls` on they probe this port. It stops after the main
port has drained, so probes keep their answers through the whole drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from services.common.admission import AdmissionInterceptor
from services.common.auth import AuthInterceptor, MethodRule, check_rules
from services.common.interceptors import ErrorMappingInterceptor
from services.common.keepalive import KEEPALIVE, KeepalivePolicy
from services.common.settings import ServerSettings
from services.common.telemetry import Telemetry

log = logging.getLogger(__name__)

_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
LIVENESS_SERVICE = "quarry.liveness"
"""The health name a liveness probe checks: never flipped by a drain (see the module docstring)."""
CLOSE_S = 0.25
"""How long a stopping server refuses new calls itself (UNAVAILABLE) before gRPC core closes the
listener (taken from `grace_s`)."""
CUT_S = 1.0
"""After `grace_s`, how long calls cut by an `on_grace_end` callback have to send their last
message before the server cancels them."""


@dataclass
class ServiceRegistration:
    """One servicer to mount: its full proto name and the generated `add_*_to_server` call."""

    name: str
    """Full service name, e.g. `quarry.searchtool.v1.SearchToolService`."""
    register: Callable[[grpc.aio.Server], None]
    """Adds the servicer to a server."""
    rules: Mapping[str, MethodRule] = field(default_factory=dict)
    """The access each method (by short name) requires; every method must have one."""


@dataclass
class QuarryServer:
    """A built, not yet started, server and what it needs to start and stop cleanly."""

    server: grpc.aio.Server
    health: HealthServicer
    service_names: list[str]
    settings: ServerSettings
    admission: AdmissionInterceptor
    """The first interceptor: the concurrency bound (`settings.max_concurrent_rpcs`, when one is
    set) and the refusal of new calls once the server stops accepting."""
    port: int = 0
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    health_server: grpc.aio.Server | None = None
    """The plaintext health-only listener (`server.health_port`), when configured."""
    health_port: int | None = None
    """The port it is bound to (the chosen one when `health_port` is 0)."""
    on_grace_end: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Run when `grace_s` is over with calls still in flight, `CUT_S` before they are cancelled."""

    @property
    def address(self) -> str:
        host = self.settings.host
        if host in ("0.0.0.0", "::", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    async def start(self) -> None:
        await self.listen()
        await self.mark_live()
        await self.set_serving(True)
        log.info(
            "serving",
            extra={
                "address": self.address,
                "services": self.service_names,
                "health_port": self.health_port,
                "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
            },
        )

    async def listen(self) -> None:
        """Start accepting calls: the health port (when configured), then the main port."""
        if self.health_server is not None:
            await self.health_server.start()
        await self.server.start()

    async def mark_live(self) -> None:
        """Liveness SERVING: the process is up; stays so until it exits."""
        await self.health.set(LIVENESS_SERVICE, _SERVING)

    async def set_serving(self, serving: bool, service: str | None = None) -> None:
        """Flip readiness for one service, or for all of them and the server as a whole
        (liveness is never touched)."""
        status = _SERVING if serving else _NOT_SERVING
        for name in [service] if service else ["", *self.service_names]:
            await self.health.set(name, status)

    async def begin_drain(self) -> None:
        """Readiness NOT_SERVING (every service and `""`); liveness stays SERVING."""
        await self.set_serving(False)

    async def stop(self, grace_s: float | None = None) -> None:
        """NOT_SERVING, then let in-flight calls finish for the grace period, then stop."""
        grace = self.settings.grace_s if grace_s is None else grace_s
        await self.begin_drain()
        self.admission.closed = True
        close = min(CLOSE_S, grace)
        if close:
            await asyncio.sleep(close)
            grace -= close
        if not self.on_grace_end:
            await self.server.stop(grace)
        else:
            stopping = asyncio.ensure_future(self.server.stop(grace + CUT_S))
            finished, _ = await asyncio.wait({stopping}, timeout=grace)
            if not finished:
                log.info("grace period over, cutting calls still in flight")
                for callback in self.on_grace_end:
                    await callback()
            await stopping
        if self.health_server is not None:
            await self.health_server.stop(0)
        for callback in self.on_stop:
            await callback()
        log.info("stopped", extra={"address": self.address})


def build_server(
    services: Sequence[ServiceRegistration],
    settings: ServerSettings,
    telemetry: Telemetry | None = None,
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor[Any, Any]] = (),
    keepalive: KeepalivePolicy = KEEPALIVE,
) -> QuarryServer:
    """A server with health, reflection, tracing and error mapping; bound but not started."""
    admission = AdmissionInterceptor(
        settings.max_concurrent_rpcs, retry_after_s=settings.overload_retry_after_s
    )
    chain: list[grpc.aio.ServerInterceptor[Any, Any]] = [admission]
    if telemetry is not None:
        chain.extend(telemetry.server_interceptors())
    chain.extend(interceptors)
    chain.append(ErrorMappingInterceptor())
    chain.append(AuthInterceptor(settings.auth, _rules(services, check=settings.auth.enabled)))
    max_bytes = settings.max_message_mb * 1024 * 1024
    server = grpc.aio.server(
        interceptors=chain,
        options=[
            ("grpc.max_send_message_length", max_bytes),
            ("grpc.max_receive_message_length", max_bytes),
            ("grpc.so_reuseport", 0),
            *(
                [("grpc.max_concurrent_streams", settings.max_concurrent_streams)]
                if settings.max_concurrent_streams
                else []
            ),
            *(
                [("grpc.max_connection_age_ms", int(settings.max_connection_age_s * 1000))]
                if settings.max_connection_age_s
                else []
            ),
            *keepalive.server_options(),
        ],
    )
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    names = [s.name for s in services]
    for service in services:
        service.register(server)
    reflection.enable_server_reflection(
        [*names, _HEALTH_SERVICE, reflection.SERVICE_NAME],
        server,
    )
    address = f"{settings.host}:{settings.port}"
    if settings.tls.enabled:
        port = server.add_secure_port(address, settings.tls.credentials())
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind {settings.host}:{settings.port}")
    health_server, health_port = _health_listener(health, settings)
    return QuarryServer(
        server=server,
        health=health,
        service_names=names,
        settings=settings,
        port=port,
        health_server=health_server,
        health_port=health_port,
        admission=admission,
    )


def _health_listener(
    health: HealthServicer, settings: ServerSettings
) -> tuple[grpc.aio.Server | None, int | None]:
    """The plaintext listener serving only `health` on `settings.health_port` (None: none)."""
    if settings.health_port is None:
        return None, None
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port(f"{settings.host}:{settings.health_port}")
    if port == 0:
        raise OSError(f"cannot bind the health port {settings.host}:{settings.health_port}")
    return server, port


def _rules(services: Sequence[ServiceRegistration], *, check: bool) -> dict[str, MethodRule]:
    """Every method's rule by full method path; with `check` (auth on) a proto service missing
    one is refused at build time."""
    rules: dict[str, MethodRule] = {}
    for service in services:
        full = {f"/{service.name}/{m}": rule for m, rule in service.rules.items()}
        try:
            methods = descriptor_pool.Default().FindServiceByName(service.name).methods
        except KeyError:
            methods = []
        if check:
            check_rules(service.name, [m.name for m in methods], full)
        rules.update(full)
    return rules


def freeze_startup_heap() -> int:
    """Collect garbage, then move every object alive now to the permanent generation, which no
    later collection walks (`server.gc_freeze`); returns how many objects that is. Refcounting
    still frees them; only cycles among them are never reclaimed."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info(
        "startup heap frozen",
        extra={"objects": frozen, "collect_ms": round((time.perf_counter() - started) * 1000, 1)},
    )
    return frozen


async def serve(server: QuarryServer) -> None:
    """Start, run until SIGTERM or SIGINT, then drain (see the module docstring) and stop."""
    received: asyncio.Queue[signal.Signals] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, received.put_nowait, sig)
    if server.settings.gc_freeze:
        freeze_startup_heap()
    await server.start()
    sig = await received.get()
    window = server.settings.drain_window_s if sig == signal.SIGTERM else 0.0
    log.info(
        "signal received, draining",
        extra={"signal": sig.name, "drain_window_s": window, "grace_s": server.settings.grace_s},
    )
    await server.begin_drain()
    if window:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(received.get(), window)  # a second signal ends the window
    await server.stop()
