"""The PostgreSQL engine (`engine.kind: postgres`): pgvector HNSW for the dense side, BM25 with
engine-maintained term statistics for the keyword side, pg_trgm for `contains`."""

from services.search_tool.engine.postgres.engine import PostgresEngine

__all__ = ["PostgresEngine"]
