"""`quarry ingest`: files and folders into a collection, through the search tool's public client."""

from quarry_cli.ingest.sync import IngestOptions, IngestSummary, Progress, ingest

__all__ = ["IngestOptions", "IngestSummary", "Progress", "ingest"]
