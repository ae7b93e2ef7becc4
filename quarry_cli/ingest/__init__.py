"""`quarry ingest`: files and folders into a collection, through the one ingest pipeline (`sync`),
which the demo collection uses too."""

from quarry_cli.ingest.files import IngestOptions, ingest
from quarry_cli.ingest.sync import IngestSummary, Progress, Target, Unit, sync

__all__ = ["IngestOptions", "IngestSummary", "Progress", "Target", "Unit", "ingest", "sync"]
