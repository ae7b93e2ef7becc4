"""The filter cases every engine must agree on: a small fixture set and `condition → matching ids`.

An engine test loads `FIXTURE` (one chunk per document) and, for each case, searches with the
validated filter and a limit large enough to return every match; the document ids found must equal
`expected` exactly. Vespa runs this same table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from services.search_tool.documents import Breadcrumb, Document
from services.search_tool.filters import Operator, RawValue


def _at(day: int) -> datetime:
    return datetime(2024, 3, day, 12, 0, tzinfo=UTC)


FIXTURE: tuple[Document, ...] = (
    Document(
        id="alpha",
        title="Quarterly Report",
        text="Revenue grew in the third quarter.",
        source="confluence",
        entity_type="page",
        created_at=_at(1),
        updated_at=_at(2),
        url="https://wiki.example/alpha",
        breadcrumbs=(Breadcrumb("sp-fin", "Finance", "space"), Breadcrumb("f-rep", "Reports")),
        metadata={"year": 2023, "score": 4.5, "draft": False, "team": "Finance"},
    ),
    Document(
        id="beta",
        title="O'Brien's notes",
        text="It's 50% done; see file_name.txt and C:\\temp.",
        source="confluence",
        entity_type="comment",
        created_at=_at(5),
        url="https://wiki.example/beta",
        breadcrumbs=(Breadcrumb("sp-eng", "Engineering", "space"),),
        metadata={"year": 2024, "score": 3.0, "draft": True, "team": "eng"},
    ),
    Document(
        id="gamma",
        title="Release checklist",
        text="Tag the release and publish the wheels.",
        source="github",
        entity_type="issue",
        created_at=_at(10),
        updated_at=_at(11),
        url="https://github.example/gamma",
        metadata={"year": 2024, "team": "ENG"},
    ),
    Document(
        id="delta",
        title="Onboarding",
        text="Welcome aboard. Read the handbook first.",
        source="gdrive",
        entity_type="page",
        created_at=_at(20),
        breadcrumbs=(Breadcrumb("sp-hr", "People Ops", "space"), Breadcrumb("f-on", "Onboarding")),
        metadata={"year": 2022, "score": 5.0},
    ),
    Document(
        id="epsilon",
        title="Untitled",
        text="' OR 1=1 -- ; DROP TABLE chunks; %_%",
        source="slack",
        entity_type="message",
        metadata={"team": "' OR ''='"},
    ),
)

ALL = frozenset(d.id for d in FIXTURE)


@dataclass(frozen=True)
class FilterCase:
    """One condition and the documents it must match."""

    field: str
    """Field filtered on."""
    operator: Operator
    """Comparison."""
    value: RawValue
    """Value as a caller would send it."""
    expected: frozenset[str]
    """Ids of the matching fixture documents."""

    @property
    def name(self) -> str:
        return f"{self.field} {self.operator.value} {self.value!r}"


def _case(field: str, operator: Operator, value: RawValue, *expected: str) -> FilterCase:
    return FilterCase(field, operator, value, frozenset(expected))


CASES: tuple[FilterCase, ...] = (
    _case("source", Operator.EQUALS, "confluence", "alpha", "beta"),
    _case("source", Operator.NOT_EQUALS, "confluence", "gamma", "delta", "epsilon"),
    _case("source", Operator.IN, ["github", "gdrive"], "gamma", "delta"),
    _case("source", Operator.NOT_IN, ["github", "gdrive"], "alpha", "beta", "epsilon"),
    _case("entity_type", Operator.EQUALS, "PAGE"),
    _case("title", Operator.CONTAINS, "REPORT", "alpha"),
    _case("title", Operator.CONTAINS, "o'brien", "beta"),
    _case("text", Operator.CONTAINS, "50%", "beta"),
    _case("text", Operator.CONTAINS, "%", "beta", "epsilon"),
    _case("text", Operator.CONTAINS, "_", "beta", "epsilon"),
    _case("text", Operator.CONTAINS, "file_name", "beta"),
    _case("text", Operator.CONTAINS, "c:\\temp", "beta"),
    _case("text", Operator.CONTAINS, "the", "alpha", "gamma", "delta"),
    _case("document_id", Operator.EQUALS, "gamma", "gamma"),
    _case("id", Operator.IN, ["alpha__chunk_0", "delta__chunk_0"], "alpha", "delta"),
    _case("url", Operator.CONTAINS, "github.example", "gamma"),
    _case("chunk_index", Operator.EQUALS, 0, *ALL),
    _case("chunk_index", Operator.GREATER_THAN, 0),
    _case("created_at", Operator.GREATER_THAN_OR_EQUAL, "2024-03-05", "beta", "gamma", "delta"),
    _case("created_at", Operator.LESS_THAN, "2024-03-05T12:00:00Z", "alpha"),
    _case("created_at", Operator.LESS_THAN_OR_EQUAL, "2024-03-05T13:00:00+01:00", "alpha", "beta"),
    _case("created_at", Operator.EQUALS, "2024-03-10T12:00:00Z", "gamma"),
    _case("updated_at", Operator.GREATER_THAN, "2024-03-01", "alpha", "gamma"),
    _case("breadcrumbs", Operator.EQUALS, "Finance", "alpha"),
    _case("breadcrumbs", Operator.EQUALS, "sp-eng", "beta"),
    _case("breadcrumbs", Operator.IN, ["Onboarding", "sp-eng"], "beta", "delta"),
    _case("breadcrumbs", Operator.NOT_EQUALS, "Finance", "beta", "gamma", "delta", "epsilon"),
    _case("breadcrumbs", Operator.CONTAINS, "people ops > onb", "delta"),
    _case("metadata.year", Operator.EQUALS, 2024, "beta", "gamma"),
    _case("metadata.year", Operator.GREATER_THAN, 2022.5, "alpha", "beta", "gamma"),
    _case("metadata.year", Operator.LESS_THAN_OR_EQUAL, 2023, "alpha", "delta"),
    _case("metadata.year", Operator.NOT_EQUALS, 2024, "alpha", "delta", "epsilon"),
    _case("metadata.year", Operator.IN, [2022, 2023], "alpha", "delta"),
    _case("metadata.year", Operator.NOT_IN, [2022, 2023], "beta", "gamma", "epsilon"),
    _case("metadata.score", Operator.GREATER_THAN_OR_EQUAL, 4.5, "alpha", "delta"),
    _case("metadata.score", Operator.EQUALS, 3, "beta"),
    _case("metadata.draft", Operator.EQUALS, True, "beta"),
    _case("metadata.draft", Operator.NOT_EQUALS, True, "alpha", "gamma", "delta", "epsilon"),
    _case("metadata.team", Operator.EQUALS, "eng", "beta"),
    _case("metadata.team", Operator.CONTAINS, "eng", "beta", "gamma"),
    _case("metadata.team", Operator.EQUALS, "' OR ''='", "epsilon"),
    _case("metadata.team", Operator.IN, ["x') OR (1=1", "Finance"], "alpha"),
    _case("source", Operator.EQUALS, "' OR 1=1 --"),
    _case("source", Operator.EQUALS, "confluence' OR '1'='1"),
    _case("title", Operator.CONTAINS, "%' OR '%'='"),
    _case("text", Operator.CONTAINS, "`id` IS NOT NULL"),
)
