"""`python -m services.llm_gateway [--config FILE] [--port N]`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import ValidationError

from services.common.log import configure_logging
from services.common.server import serve
from services.common.settings import load_settings
from services.common.telemetry import Telemetry, setup_telemetry
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.server import build_gateway_server

log = logging.getLogger("services.llm_gateway")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.llm_gateway", description=__doc__)
    parser.add_argument("--config", help="YAML file with an `llm_gateway` section")
    parser.add_argument("--port", type=int, help="port to listen on (overrides the config)")
    parser.add_argument("--host", help="interface to bind (overrides the config)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(GatewaySettings, args.config)
    except (ValidationError, ValueError, FileNotFoundError) as error:
        print(f"llm_gateway: invalid configuration:\n{error}", file=sys.stderr)
        return 2
    if args.port is not None or args.host is not None:
        server_settings = settings.server.model_copy(
            update={
                key: value
                for key, value in (("port", args.port), ("host", args.host))
                if value is not None
            }
        )
        settings = settings.model_copy(update={"server": server_settings})
    configure_logging("llm_gateway", settings.log_level, settings.log_format)
    telemetry = setup_telemetry("llm_gateway", install_global=True)
    log.info(
        "routes",
        extra={
            "routes": {name: chain for name, chain in settings.routes.items()},
            "default_route": settings.default_route,
        },
    )
    try:
        asyncio.run(_serve(settings, telemetry))
    except OSError as error:
        print(f"llm_gateway: {error}", file=sys.stderr)
        return 1
    finally:
        telemetry.shutdown()
    return 0


async def _serve(settings: GatewaySettings, telemetry: Telemetry) -> None:
    await serve(build_gateway_server(settings, telemetry))


if __name__ == "__main__":
    sys.exit(main())
