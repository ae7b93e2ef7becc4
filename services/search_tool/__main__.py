"""`python -m services.search_tool [--config FILE] [--host H] [--port N] [--data-dir DIR]`."""

from __future__ import annotations

import sys

from services.common.entrypoint import Flag, run_service
from services.search_tool.config import SearchToolSettings
from services.search_tool.server import build_search_tool_server

FLAGS = (Flag("--data-dir", "data_dir", "where collections are stored"),)


def main(argv: list[str] | None = None) -> int:
    return run_service(
        "search_tool", SearchToolSettings, build_search_tool_server, flags=FLAGS, argv=argv
    )


if __name__ == "__main__":
    sys.exit(main())
