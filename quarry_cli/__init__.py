"""Tooling beside the services, never inside them: the `quarry` CLI (`ask`, `run`) and the demo
collection builder. They reach the services only through their public clients and protos, so a
service image carries only its service.

gRPC core's own log lines (`Got goaway`, `Handshake failed`, traces) are for whoever debugs gRPC,
not for the person at the terminal: they are off unless `GRPC_VERBOSITY` is set (the variable is
read once, when gRPC's core starts, so it is set before anything imports grpc). The services
`quarry run` starts get the environment as it was, without this default.
"""

import os

GRPC_VERBOSITY_DEFAULTED = "GRPC_VERBOSITY" not in os.environ
"""True when the CLI turned gRPC core's logging off (the user had not chosen a verbosity)."""
if GRPC_VERBOSITY_DEFAULTED:
    os.environ["GRPC_VERBOSITY"] = "NONE"


def service_environment() -> dict[str, str]:
    """The environment for a service process: this one's, without the CLI's own gRPC default."""
    environment = dict(os.environ)
    if GRPC_VERBOSITY_DEFAULTED:
        environment.pop("GRPC_VERBOSITY", None)
    return environment
