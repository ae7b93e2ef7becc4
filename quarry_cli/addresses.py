"""Where the `quarry` commands find the services: one default per service, settable once.

QUARRY_SEARCH_TOOL_ADDRESS   HOST:PORT of the search tool (default 127.0.0.1:50051)
QUARRY_LLM_GATEWAY_ADDRESS   HOST:PORT of the LLM gateway (default 127.0.0.1:50052)
QUARRY_AGENT_ADDRESS         HOST:PORT of the agent (default 127.0.0.1:50053)

Every client command's address flag defaults to its variable, and `quarry run` (`make run`) listens
on the ports these variables name, so `export QUARRY_AGENT_ADDRESS=127.0.0.1:6003` moves both the
server and every client at once. A flag still wins over the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceAddress:
    """One service's default address and the variable that overrides it."""

    name: str
    """The service as the commands name it, e.g. `search tool`."""
    variable: str
    """The environment variable read for the address."""
    fallback: str
    """The address when the variable is unset or empty."""

    def address(self) -> str:
        """HOST:PORT from the variable, else the fallback."""
        return os.environ.get(self.variable, "").strip() or self.fallback

    def port(self) -> int:
        """The port of `address()`; a variable without a numeric port is refused by name."""
        address = self.address()
        _, _, port = address.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{self.variable}={address!r} is not HOST:PORT with a port 1..65535")
        return int(port)

    def help(self) -> str:
        """`(default: $VARIABLE, else HOST:PORT)` for a flag's help."""
        return f"${self.variable}, else {self.fallback}"


SEARCH_TOOL = ServiceAddress("search tool", "QUARRY_SEARCH_TOOL_ADDRESS", "127.0.0.1:50051")
LLM_GATEWAY = ServiceAddress("LLM gateway", "QUARRY_LLM_GATEWAY_ADDRESS", "127.0.0.1:50052")
AGENT = ServiceAddress("agent", "QUARRY_AGENT_ADDRESS", "127.0.0.1:50053")
