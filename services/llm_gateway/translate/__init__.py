"""How the gateway speaks to each vendor: pure functions between the generic model and wire params.

Who we talk to (clients, auth, base URLs, error handling) lives in `providers/`.
"""
