"""`python -m services.agent [--config FILE] [--port N] [--search-tool A] [--llm-gateway A]`."""

from __future__ import annotations

import argparse
import asyncio

from services.agent.config import AgentSettings
from services.agent.server import build_agent_server
from services.common.log import configure_logging
from services.common.server import serve
from services.common.settings import load_settings
from services.common.telemetry import Telemetry, setup_telemetry


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.agent", description=__doc__)
    parser.add_argument("--config", help="YAML file with an `agent` section")
    parser.add_argument("--port", type=int, help="port to listen on (0 picks a free one)")
    parser.add_argument("--search-tool", help="address of the search tool, host:port")
    parser.add_argument("--llm-gateway", help="address of the LLM gateway, host:port")
    args = parser.parse_args(argv)
    overrides: dict[str, object] = {}
    if args.search_tool:
        overrides["search_tool_address"] = args.search_tool
    if args.llm_gateway:
        overrides["llm_gateway_address"] = args.llm_gateway
    settings = load_settings(AgentSettings, args.config, **overrides)
    if args.port is not None:
        settings.server.port = args.port
    configure_logging("agent", settings.log_level, settings.log_format)
    telemetry = setup_telemetry("quarry-agent", install_global=True)
    try:
        asyncio.run(_serve(settings, telemetry))
    finally:
        telemetry.shutdown()


async def _serve(settings: AgentSettings, telemetry: Telemetry) -> None:
    """Built inside the running loop: its channels belong to that loop."""
    await serve(build_agent_server(settings, telemetry))


if __name__ == "__main__":
    main()
