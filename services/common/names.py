"""Names every service checks the same way: one rule per kind of name, with the words that
describe it, so a name one service accepts is never refused by another with other words.

The search tool owns collections; the agent checks a run's collection by the same rule before the
run starts, so a run the search tool would refuse is refused (and never recorded) up front.
"""

from __future__ import annotations

import re

from services.common.errors import shown

COLLECTION_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
COLLECTION_NAME_RULE = "1 to 64 characters: a-z, 0-9, `_` or `-`, starting with a letter or digit"


def collection_name_problem(name: str) -> str | None:
    """What is wrong with `name` as a collection name (None: nothing), quoting it short."""
    if COLLECTION_NAME.match(name):
        return None
    return f"{shown(name)} is not a collection name: {COLLECTION_NAME_RULE}"
