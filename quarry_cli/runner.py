"""`quarry run` (what `make run` calls): the three services as separate processes on fixed local
ports, the embedded engine under `./var/`, the demo collection, and how to ask a question.

Each child runs in its own session so a terminal Ctrl-C reaches only this process, which forwards
SIGTERM to the children (agent first), waits for them to drain, and kills what is left. Closing the
terminal (SIGHUP) does the same. Before anything starts, each port is checked: one in use is named
with what answers there, and nothing is started. A child that exits on its own is reported with its
exit status and the end of its log; the others keep serving until Ctrl-C (no restart: a service
that stopped cleanly was stopped on purpose, one that crashed needs its log read).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.llmgateway.v1 import llm_gateway_pb2, llm_gateway_pb2_grpc

from quarry_cli import service_environment
from quarry_cli.addresses import AGENT, LLM_GATEWAY, SEARCH_TOOL
from services.common.channels import open_channel
from services.common.errors import QuarryError
from services.common.status import code_of

QUESTION = "How do I create a temporary directory that is removed automatically?"
STOP_GRACE_S = 15.0
DEMO_TIMEOUT_S = 600.0
"""Per ingest call: generous, the first build embeds the whole corpus on a laptop CPU."""
T = TypeVar("T")


@dataclass
class Child:
    """One service process."""

    name: str
    service: str
    """Full gRPC service name, for its health check."""
    address: str
    args: list[str]
    process: asyncio.subprocess.Process | None = None
    log_path: Path | None = None


_PORT_FLAGS = {
    "--search-tool-port": SEARCH_TOOL,
    "--llm-gateway-port": LLM_GATEWAY,
    "--agent-port": AGENT,
}
"""Each port flag and the service whose address variable gives its default."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    for flag, service in _PORT_FLAGS.items():
        parser.add_argument(flag, type=int, help=f"port (default: the port of {service.help()})")
    parser.add_argument("--data-dir", type=Path, default=Path("var"), help="engine data and logs")
    parser.add_argument("--collection", default="python-docs", help="demo collection name")
    parser.add_argument("--no-demo", action="store_true", help="do not ingest the demo collection")
    parser.add_argument(
        "--config", help="YAML config given to every service (search tool, gateway, agent)"
    )
    parser.add_argument("--startup-timeout", type=float, default=300.0, help="seconds")


def run_suite(args: argparse.Namespace) -> int:
    try:
        resolve_ports(args)
    except ValueError as error:
        _say(str(error))
        return 2
    return asyncio.run(_run(args))


def resolve_ports(args: argparse.Namespace) -> None:
    """Each port flag left out takes the port of its service's address variable (or default)."""
    for flag, service in _PORT_FLAGS.items():
        dest = flag.removeprefix("--").replace("-", "_")
        if getattr(args, dest, None) is None:
            setattr(args, dest, service.port())


def children(args: argparse.Namespace) -> list[Child]:
    host = args.host
    search = f"{host}:{args.search_tool_port}"
    gateway = f"{host}:{args.llm_gateway_port}"
    agent = f"{host}:{args.agent_port}"
    config = ["--config", args.config] if args.config else []
    data = str(args.data_dir / "search_tool")
    return [
        Child(
            "search_tool",
            "quarry.searchtool.v1.SearchToolService",
            search,
            [
                "-m",
                "services.search_tool",
                "--port",
                str(args.search_tool_port),
                "--data-dir",
                data,
                *config,
            ],
        ),
        Child(
            "llm_gateway",
            "quarry.llmgateway.v1.LlmGatewayService",
            gateway,
            ["-m", "services.llm_gateway", "--port", str(args.llm_gateway_port), *config],
        ),
        Child(
            "agent",
            "quarry.agent.v1.AgentService",
            agent,
            [
                "-m",
                "services.agent",
                "--port",
                str(args.agent_port),
                "--search-tool",
                search,
                "--llm-gateway",
                gateway,
                *config,
            ],
        ),
    ]


async def _run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    logs = args.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    services = children(args)
    busy = await ports_in_use(services)
    if busy:
        for line in busy:
            _say(line)
        _say(
            "stop what holds these ports, or pick others with --search-tool-port, "
            "--llm-gateway-port and --agent-port (or QUARRY_SEARCH_TOOL_ADDRESS, "
            "QUARRY_LLM_GATEWAY_ADDRESS and QUARRY_AGENT_ADDRESS, which the clients read too)"
        )
        return 1
    _say(f"starting the search tool, the LLM gateway and the agent (logs in {logs}/)")
    try:
        for child in services:
            await start(child, logs)
        ready = await _wait_until_ready(services, stop, args.startup_timeout)
        if ready and not args.no_demo:
            ready = await _ensure_demo(services[0].address, args.collection, stop)
        if ready:
            await _print_how_to_ask(services, args.collection)
            return await _supervise(services, stop)
        return 0 if stop.is_set() else 1
    finally:
        await stop_all(services)


async def start(child: Child, logs: Path, *, env: dict[str, str] | None = None) -> None:
    """Start `child` in its own session, stderr and stdout to `logs/<name>.log`."""
    child.log_path = logs / f"{child.name}.log"
    log_file: IO[bytes] = child.log_path.open("ab")
    try:
        child.process = await asyncio.create_subprocess_exec(
            sys.executable,
            *child.args,
            stdout=log_file,
            stderr=log_file,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env=env or service_environment(),
        )
    finally:
        log_file.close()


async def wait_serving(child: Child, timeout_s: float) -> bool:
    """Poll the child's health until SERVING; False when it exits or the time is up."""
    deadline = time.monotonic() + timeout_s
    request = health_pb2.HealthCheckRequest(service=child.service)
    async with open_channel(child.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if child.process is None or child.process.returncode is not None:
                return False
            try:
                reply = await stub.Check(request, timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.2)
    return False


async def stop_all(services: list[Child]) -> None:
    """SIGTERM in reverse start order, wait for the drain, then kill what is left."""
    for child in reversed(services):
        process = child.process
        if process is None or process.returncode is not None:
            continue
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _wait_until_ready(services: list[Child], stop: asyncio.Event, timeout_s: float) -> bool:
    for child in services:
        _say(f"waiting for {child.name} at {child.address} ...")
        serving = await _unless_stopped(wait_serving(child, timeout_s), stop)
        if serving is None:
            return False
        if not serving:
            _say(f"{child.name} did not become ready; last lines of {child.log_path}:")
            _tail(child.log_path)
            return False
    return True


async def _ensure_demo(address: str, collection: str, stop: asyncio.Event) -> bool:
    from quarry_cli.demo.build import ensure_demo_collection
    from quarry_cli.ingest.progress import ProgressDisplay

    _say(f"checking the demo collection {collection!r} ...")
    try:
        with ProgressDisplay(
            interactive=sys.stderr.isatty(), label="demo collection", unit="documents"
        ) as progress:
            building = ensure_demo_collection(
                address, collection=collection, progress=progress, timeout_s=DEMO_TIMEOUT_S
            )
            status = await _unless_stopped(building, stop)
    except QuarryError as error:
        _say(
            f"the demo collection could not be built ({code_of(error).name}: {error.message}); "
            "the services keep running, and the next `quarry run` resumes the build"
        )
        return not stop.is_set()
    if status is None:
        return False
    action = "built" if status.built else "ready"
    refused = f" ({status.failed} documents refused by the search tool)" if status.failed else ""
    _say(f"{collection}: {action}, {status.documents} documents, {status.chunks} chunks{refused}")
    return True


async def _supervise(services: list[Child], stop: asyncio.Event) -> int:
    """Until Ctrl-C / SIGTERM / SIGHUP: 0, or 1 when every child has exited on its own.

    A child that exits is reported (how, and the end of its log); the others keep serving."""
    running = [c for c in services if c.process is not None]
    while running:
        exits = [c.process.wait() for c in running if c.process is not None]
        ended = await _unless_stopped(_first(exits), stop)
        if ended is None:
            _say("stopping ...")
            return 0
        for child in [c for c in running if c.process and c.process.returncode is not None]:
            running.remove(child)
            _report_exit(child, running)
    return 1


def _report_exit(child: Child, running: list[Child]) -> None:
    code = child.process.returncode if child.process is not None else None
    how = (
        "stopped cleanly (exit status 0)"
        if code == 0
        else f"was killed by signal {-code}"
        if code is not None and code < 0
        else f"failed with exit status {code}"
    )
    others = ", ".join(c.name for c in running) or "nothing"
    _say(f"{child.name} {how}; {others} still serving. Last lines of {child.log_path}:")
    _tail(child.log_path)


async def ports_in_use(services: list[Child]) -> list[str]:
    """One sentence per port already taken, naming the Quarry service that answers there."""
    from quarry_cli.probe import SERVICES, service_at

    busy: list[str] = []
    for child in services:
        host, _, port = child.address.rpartition(":")
        if not _port_taken(host, int(port)):
            continue
        found = await service_at(child.address, timeout_s=1.0)
        holder = (
            f"{SERVICES[found][0]} of another Quarry (a `quarry run` whose terminal closed?)"
            if found
            else "another program"
        )
        busy.append(f"port {port} for the {child.name} is in use by {holder}")
    return busy


def _port_taken(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


async def _first(awaitables: list[Coroutine[Any, Any, int]]) -> int:
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        return done.pop().result()
    finally:
        await _cancel(tasks)


async def _unless_stopped(work: Coroutine[Any, Any, T], stop: asyncio.Event) -> T | None:
    """`work`'s result, or None when `stop` is set first (`work` is then cancelled)."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await _cancel([task, stopping])
    if stop.is_set() or task.cancelled():
        return None
    return task.result()


async def _cancel(tasks: Sequence[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _print_how_to_ask(services: list[Child], collection: str) -> None:
    search, gateway, agent = (c.address for c in services)
    route = await _route_description(gateway)
    request = f'{{"collection": "{collection}", "query": "{QUESTION}", "mode": "MODE_THINKING"}}'
    quarry = Path(sys.executable).with_name("quarry")
    address = "" if agent == AGENT.address() else f" --address {agent}"
    address += "" if search == SEARCH_TOOL.address() else f" --search-tool {search}"
    print(
        f"""
Quarry is running.
  search tool  {search}
  llm gateway  {gateway}   route: {route}
  agent        {agent}

Ask a question:
  {quarry} ask "{QUESTION}" --collection {collection} --mode thinking{address}

or with grpcurl (reflection, no proto files needed):
  grpcurl -plaintext -d '{request}' {agent} quarry.agent.v1.AgentService/StreamRun

Press Ctrl-C to stop.
""",
        flush=True,
    )


async def _route_description(address: str) -> str:
    try:
        async with open_channel(address) as channel:
            stub = llm_gateway_pb2_grpc.LlmGatewayServiceStub(channel)
            status = await stub.GetStatus(llm_gateway_pb2.GetStatusRequest(), timeout=5.0)
    except grpc.aio.AioRpcError:
        return "unknown"
    chains = {r.name: list(r.chain) for r in status.routes}
    return f"{status.default_route} = " + " → ".join(chains.get(status.default_route, []))


def _tail(path: Path | None, lines: int = 15) -> None:
    if path is not None and path.exists():
        for line in path.read_text(errors="replace").splitlines()[-lines:]:
            print(f"    {line}", file=sys.stderr)


def _say(text: str) -> None:
    print(f"quarry: {text}", file=sys.stderr, flush=True)
