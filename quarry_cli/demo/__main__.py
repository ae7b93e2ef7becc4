"""Build the demo collection through a running search tool when it is missing."""

from __future__ import annotations

import argparse
import asyncio
import sys

from quarry_cli.demo.build import DEFAULT_COLLECTION, ensure_demo_collection
from quarry_cli.ingest.progress import ProgressDisplay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m quarry_cli.demo", description=__doc__)
    parser.add_argument("--address", default="127.0.0.1:50051", help="search tool HOST:PORT")
    parser.add_argument("--collection", default=DEFAULT_COLLECTION)
    parser.add_argument("--batch-size", type=int, default=64, help="documents per request")
    args = parser.parse_args(argv)
    with ProgressDisplay(
        interactive=sys.stderr.isatty(), label="demo collection", unit="documents"
    ) as display:
        status = asyncio.run(
            ensure_demo_collection(
                args.address,
                collection=args.collection,
                progress=display,
                batch_size=args.batch_size,
            )
        )
    action = "built" if status.built else "already present"
    print(
        f"{status.collection}: {action}, {status.documents} documents, {status.chunks} chunks "
        f"({status.seconds:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
