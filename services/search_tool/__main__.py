"""`python -m services.search_tool [--config FILE] [--port N] [--data-dir DIR]`."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from services.common.log import configure_logging
from services.common.server import serve
from services.common.settings import ServerSettings, load_settings
from services.common.telemetry import Telemetry, setup_telemetry
from services.search_tool.config import SearchToolSettings
from services.search_tool.server import build_search_tool_server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.search_tool", description=__doc__)
    parser.add_argument("--config", help="YAML file with a `search_tool` section")
    parser.add_argument("--port", type=int, help="port to listen on (0 picks a free one)")
    parser.add_argument("--data-dir", type=Path, help="where collections are stored")
    args = parser.parse_args(argv)
    settings = load_settings(SearchToolSettings, args.config)
    if args.port is not None:
        server = settings.server.model_dump()
        server["port"] = args.port
        settings = settings.model_copy(update={"server": ServerSettings(**server)})
    if args.data_dir is not None:
        settings = settings.model_copy(update={"data_dir": args.data_dir})
    configure_logging("search_tool", settings.log_level, settings.log_format)
    telemetry = setup_telemetry("search_tool", install_global=True)
    try:
        asyncio.run(_serve(settings, telemetry))
    finally:
        telemetry.shutdown()


async def _serve(settings: SearchToolSettings, telemetry: Telemetry) -> None:
    await serve(build_search_tool_server(settings, telemetry))


if __name__ == "__main__":
    main()
