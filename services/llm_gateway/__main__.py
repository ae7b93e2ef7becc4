"""`python -m services.llm_gateway [--config FILE] [--host H] [--port N]`."""

from __future__ import annotations

import sys

from services.common.entrypoint import run_service
from services.llm_gateway.config import GatewaySettings
from services.llm_gateway.server import build_gateway_server


def main(argv: list[str] | None = None) -> int:
    return run_service("llm_gateway", GatewaySettings, build_gateway_server, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
