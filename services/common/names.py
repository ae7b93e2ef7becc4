"""Names every service checks the same way: one rule per kind of name, with the words that
describe it, so a name one service accepts is never refused by another with other words.

The search tool owns collections; the agent checks a run's collection by the same rule before the
run starts, so a run the search tool would refuse is refused (and never recorded) up front. Run
and question ids follow one rule too (`agent_id_problem`), on every RPC that takes them.
"""

from __future__ import annotations

import re

from services.common.errors import shown

COLLECTION_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
COLLECTION_NAME_RULE = "1 to 64 characters: a-z, 0-9, `_` or `-`, starting with a letter or digit"


AGENT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
AGENT_ID_RULE = (
    "1 to 128 characters: A-Z, a-z, 0-9, `_` or `-` (the agent issues run ids of 32 and question "
    "ids of 16 hex digits)"
)


def collection_name_problem(name: str) -> str | None:
    """What is wrong with `name` as a collection name (None: nothing), quoting it short."""
    if COLLECTION_NAME.fullmatch(name):  # `$` alone would let a trailing newline through
        return None
    return f"{shown(name)} is not a collection name: {COLLECTION_NAME_RULE}"


def agent_id_problem(value: str) -> str | None:
    """What is wrong with `value` as a run id or question id (None: nothing), quoting it short:
    the one rule of `GetRun`, `AnswerQuestion` and `AcknowledgeQuestion`, so a 100 KB id is
    refused at once instead of looked up."""
    if not value:
        return "must not be empty"
    if AGENT_ID.fullmatch(value):
        return None
    return f"{shown(value)} is not an id the agent issues: {AGENT_ID_RULE}"
