"""What every `quarry` command prints the same way: JSON, errors, and a closed pipe.

JSON is protobuf's JSON mapping with the proto field names (`run_id`, as grpcurl prints them),
enums by name, int64 as strings, one object per line. An error prints its status code, message and
offending fields, never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from services.common.errors import InvalidArgument, QuarryError
from services.common.status import code_of


def message_json(message: Message, *, all_fields: bool = False) -> dict[str, Any]:
    """`message` in protobuf's JSON mapping, proto field names kept; `all_fields` prints fields
    at their default too (an empty `results` list, a zero `total_count`), for replies scripts
    index into."""
    return json_format.MessageToDict(
        message,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=all_fields,
    )


def print_json(value: Message | dict[str, Any], *, all_fields: bool = False) -> None:
    """One JSON object on its own line, flushed (`all_fields`: see `message_json`)."""
    data = message_json(value, all_fields=all_fields) if isinstance(value, Message) else value
    print(json.dumps(data, ensure_ascii=False), flush=True)


def error_json(error: QuarryError) -> dict[str, Any]:
    fields = [
        {"field": v.field, "description": v.description}
        for v in (error.violations if isinstance(error, InvalidArgument) else [])
    ]
    body: dict[str, Any] = {"code": code_of(error).name, "message": error.message}
    if fields:
        body["field_violations"] = fields
    return {"error": body}


def describe_error(error: QuarryError) -> str:
    """`CODE message`, then one `  field: description` line per offending field."""
    lines = [f"{code_of(error).name} {error.message}"]
    if isinstance(error, InvalidArgument):
        lines.extend(f"  {v.field}: {v.description}" for v in error.violations)
    return "\n".join(lines)


def exit_quietly_on_closed_pipe() -> None:
    """After `quarry ... | head` closed our stdout: no BrokenPipeError traceback, exit 0.

    Points stdout at /dev/null so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)
