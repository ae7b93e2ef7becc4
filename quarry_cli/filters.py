"""`--filter` as the commands read it: JSON groups, errors a person can act on."""

from __future__ import annotations

import json

from pydantic import ValidationError
from quarry.common.v1 import search_pb2

from services.agent.client import parse_filter

FILTER_HELP = (
    'JSON: a list of groups (OR), each {"conditions": [...]} (AND) of '
    '{"field", "operator", "value"}; operators equals, not_equals, contains, greater_than, '
    "greater_than_or_equal, less_than, less_than_or_equal, in, not_in"
)
DEMO_FILTER = (
    '\'[{"conditions": [{"field": "source", "operator": "equals", '
    '"value": "stdlib-docstrings"}]}]\''
)


class FilterError(ValueError):
    """A `--filter` that is not a filter; the message names where and why."""


def read_filter(text: str) -> search_pb2.Filter:
    """The filter `text` describes; FilterError with one line per problem otherwise."""
    try:
        return parse_filter(text)
    except json.JSONDecodeError as error:
        raise FilterError(f"not JSON ({error.msg} at character {error.pos})") from error
    except ValidationError as error:
        problems = []
        for item in error.errors():
            loc = list(item["loc"])
            is_value = "value" in loc
            if is_value:
                loc = loc[: loc.index("value") + 1]
            where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
            where = f"groups{where}" if where.startswith("[") else where.lstrip(".")
            if is_value:
                problems.append(f"{where}: must be a string, number, bool, or a list for in/not_in")
            elif item["type"] == "literal_error":
                problems.append(f"{where}: {item['input']!r} is not an operator")
            else:
                problems.append(f"{where}: {item['msg']}")
        raise FilterError("; ".join(dict.fromkeys(problems))) from error
