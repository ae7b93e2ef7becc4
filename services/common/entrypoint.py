"""The one `main` of every service: arguments, settings, logging, telemetry, serve.

    python -m services.<name> [--config FILE] [--host H] [--port N] [service flags]

Settings come from `load_settings` (defaults < YAML section < `QUARRY_*` environment < flags), so a
flag always wins. The process takes its CPU priority (`server.cpu_nice`) before any thread of
gRPC, the engine or the embedder starts. Logging carries the service's short name; traces carry
`tracing_name(name)`. The server is built inside the running loop (its channels belong to that
loop) and served until SIGTERM. Exit status: 0 after a clean stop, 2 for an invalid
configuration, 1 when the server cannot bind.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from services.common.cpu import lower_cpu_priority
from services.common.log import configure_logging
from services.common.server import QuarryServer, serve
from services.common.settings import QuarrySettings, load_settings
from services.common.telemetry import Telemetry, setup_telemetry

S = TypeVar("S", bound=QuarrySettings)


@dataclass(frozen=True)
class Flag:
    """A service-specific command-line flag that sets one settings field."""

    name: str
    """The flag, e.g. `--data-dir`."""
    field: str
    """The top-level settings field it sets, e.g. `data_dir`."""
    help: str
    """One line for `--help`."""


def tracing_name(service: str) -> str:
    """The OpenTelemetry `service.name` of a service: `quarry-agent`, `quarry-llm-gateway`, ..."""
    return "quarry-" + service.replace("_", "-")


def run_service(
    service: str,
    settings_cls: type[S],
    build: Callable[[S, Telemetry], QuarryServer],
    *,
    flags: Sequence[Flag] = (),
    argv: Sequence[str] | None = None,
) -> int:
    """Parse `argv`, load `settings_cls`, and serve what `build` makes until SIGTERM."""
    try:
        settings = settings_from_args(service, settings_cls, argv, flags=flags)
    except (ValidationError, ValueError, FileNotFoundError) as error:
        print(f"{service}: invalid configuration:\n{error}", file=sys.stderr)
        return 2
    configure_logging(service, settings.log_level, settings.log_format)
    lower_cpu_priority(settings.server.cpu_nice)
    telemetry = setup_telemetry(tracing_name(service), install_global=True)
    try:
        with asyncio.Runner(loop_factory=loop_factory(settings.server.event_loop)) as runner:
            runner.run(_serve(build, settings, telemetry))
    except OSError as error:
        print(f"{service}: {error}", file=sys.stderr)
        return 1
    finally:
        telemetry.shutdown()
    return 0


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the service's event loop (`server.event_loop`); None: asyncio's own."""
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return None


def _parser(service: str, flags: Sequence[Flag]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m services.{service}")
    parser.add_argument("--config", help=f"YAML file with a `{service}` section")
    parser.add_argument("--host", help="interface to bind (overrides the config)")
    parser.add_argument("--port", type=int, help="port to listen on; 0 picks a free one")
    for flag in flags:
        parser.add_argument(flag.name, dest=flag.field, help=flag.help)
    return parser


def settings_from_args(
    service: str,
    settings_cls: type[S],
    argv: Sequence[str] | None,
    *,
    flags: Sequence[Flag] = (),
) -> S:
    """The settings a service starts with: flags over `QUARRY_*` env over the YAML section."""
    args = _parser(service, flags).parse_args(argv)
    explicit = {
        f.field: getattr(args, f.field) for f in flags if getattr(args, f.field) is not None
    }
    listen: dict[str, Any] = {
        key: value for key, value in (("host", args.host), ("port", args.port)) if value is not None
    }
    if listen:  # merged into the file's and the environment's `server` like any other source
        explicit["server"] = listen
    return load_settings(settings_cls, args.config, **explicit)


async def _serve(
    build: Callable[[S, Telemetry], QuarryServer], settings: S, telemetry: Telemetry
) -> None:
    await serve(build(settings, telemetry))
