"""The scale-out engine: Vespa, reached over HTTP with pyvespa's async client.

`package` defines the application package (schemas, rank profiles, limits) the engine expects.
"""
