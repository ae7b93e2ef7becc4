"""Quarry's three gRPC services: the search tool, the LLM gateway and the agent.

Their logs are JSON, one object per line. gRPC core writes its own lines (e.g. `Received a GOAWAY
with error code ENHANCE_YOUR_CALM and debug data equal to "too_many_pings"`) as plain text straight
to stderr, and grpcio offers no hook to route them into Python's logging. What they report reaches
the services' own logs as the status of the call that failed. grpcio reads `GRPC_VERBOSITY` once,
when grpc is imported, and every service imports grpc below this package, so core's verbosity is
set here: NONE, unless the environment says otherwise (`GRPC_VERBOSITY=ERROR` or `INFO`, with
`GRPC_TRACE`, brings core's lines back, raw, to debug a connection).
"""

import os

os.environ.setdefault("GRPC_VERBOSITY", "NONE")
