"""`python -m services.agent [--config F] [--host H] [--port N]
[--search-tool A] [--llm-gateway A]`.

The two addresses override `search_tool_address` and `llm_gateway_address`.
"""

from __future__ import annotations

import sys

from services.agent.config import AgentSettings
from services.agent.server import build_agent_server
from services.common.entrypoint import Flag, run_service

FLAGS = (
    Flag("--search-tool", "search_tool_address", "address of the search tool, host:port"),
    Flag("--llm-gateway", "llm_gateway_address", "address of the LLM gateway, host:port"),
)


def main(argv: list[str] | None = None) -> int:
    return run_service("agent", AgentSettings, build_agent_server, flags=FLAGS, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
