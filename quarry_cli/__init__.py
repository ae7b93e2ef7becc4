"""Tooling beside the services, never inside them: the `quarry` CLI (`ask`, `run`) and the demo
collection builder. They reach the services only through their public clients and protos, so a
service image carries only its service."""
