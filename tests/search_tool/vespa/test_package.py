"""The Vespa application package: the checked-in copy is what its one definition renders, and it
declares every field, property and input the YQL compiler and the feeder rely on (L3).

This proves the package is consistent with the code; only a config server can judge that Vespa
accepts it (the live suite, `QUARRY_VESPA_URL`)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

from services.search_tool.documents import Document
from services.search_tool.engine.vespa.documents import HIT_FIELDS, chunk_fields, chunk_from_hit
from services.search_tool.engine.vespa.package import (
    CONTENT_CLUSTER,
    KEYWORD_FIELDS,
    KEYWORD_PROFILE,
    MAX_QUERY_VECTORS,
    SEMANTIC_PROFILE,
    STRING_ATTRIBUTES,
    TEXT_ATTRIBUTE_COPIES,
    application_package,
    cosine_feature,
    package_profile,
)
from tests.search_tool.engine_fixtures import record

ROOT = Path(__file__).resolve().parents[3]
CHECKED_IN = ROOT / "services" / "search_tool" / "vespa" / "app"
SCRIPT = ROOT / "scripts" / "gen_vespa_app.py"


def _files(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


def test_checked_in_package_equals_what_the_definition_renders(tmp_path: Path) -> None:
    out = tmp_path / "app"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--zip", str(tmp_path / "app.zip")],
        check=True,
        capture_output=True,
    )
    rendered = _files(out)
    assert rendered == _files(CHECKED_IN), "run `make vespa-package` and commit the result"
    with zipfile.ZipFile(tmp_path / "app.zip") as archive:
        assert sorted(archive.namelist()) == sorted(rendered)
        assert archive.read("services.xml").decode() == rendered["services.xml"]


def test_the_embedding_tensor_and_query_inputs_follow_the_dimensions() -> None:
    schema = application_package(768).get_schema("chunk").schema_to_text
    assert "field embedding type tensor<bfloat16>(x[768])" in schema
    assert "distance-metric: prenormalized-angular" in schema
    for i in range(MAX_QUERY_VECTORS):
        assert f"query(q{i}) tensor<float>(x[768])" in schema
    assert "384" not in schema


def test_every_field_the_compiler_compares_whole_is_a_cased_attribute() -> None:
    schema = application_package().get_schema("chunk")
    fields = {f.name: f for f in schema.document.fields}  # synthetic copies included
    cased = [*STRING_ATTRIBUTES, *TEXT_ATTRIBUTE_COPIES.values(), "breadcrumb_terms"]
    for name in [*cased, "breadcrumb_path"]:
        field = fields[name]
        assert "attribute" in str(field.indexing), name
        assert field.match == ["cased"], name
    for name in STRING_ATTRIBUTES:
        assert fields[name].attribute == ["fast-search"], name


def test_regex_targets_are_attributes_without_an_index() -> None:
    """`matches` cannot target a field that is both index and attribute (yql.html#matches)."""
    schema = application_package().get_schema("chunk")
    fields = {f.name: f for f in schema.document.fields}  # synthetic copies included
    for name in [*TEXT_ATTRIBUTE_COPIES.values(), "url", "source", "breadcrumb_path"]:
        assert "index" not in (fields[name].indexing or []), name


def test_keyword_retrieval_matches_and_scores_one_field_like_the_embedded_engine() -> None:
    """One BM25 index, `search_text`, holding what the embedded engine's `search_text` holds
    (`ChunkRecord.indexed_text`: the title, then the keyword body), so both engines score the
    same text and one train-chosen fusion serves both."""
    schema = application_package().get_schema("chunk")
    assert schema.fieldsets["default"].fields == ["search_text"]
    fields = {f.name: f for f in schema.document.fields}
    assert fields["search_text"].indexing == ["index"]
    assert fields["search_text"].index == "enable-bm25"
    assert fields["title"].indexing == ["summary"]  # returned (and copied to title_attr)
    assert fields["text"].indexing == ["summary"]  # returned (and copied to text_attr)
    text = schema.schema_to_text
    assert "bm25(title)" not in text
    assert "bm25(text)" not in text
    assert "first-phase {\n            expression {\n                bm25(search_text)" in text


def test_the_feeder_writes_the_embedded_engines_search_text() -> None:
    plain = record(Document(id="d", title="Tides", text="Neap tides are weak."))
    fields = chunk_fields("c", plain, {})
    assert set(KEYWORD_FIELDS) <= fields.keys()
    assert fields["search_text"] == "Tides\nNeap tides are weak."  # no neighbourhood
    wide = replace(plain, keyword_text="Neap tides are weak.\nSpring tides are strong.")
    fields = chunk_fields("c", wide, {})
    assert fields["search_text"] == wide.indexed_text
    assert fields["text"] == "Neap tides are weak."


def test_the_package_has_exactly_the_rank_profiles_the_engine_sends() -> None:
    """`semantic` and `keyword` (what `queries` names) plus the readiness marker; no profile
    the engine never uses (a native hybrid whose fusion differs from `fusion.py` was one)."""
    profiles = set(application_package().get_schema("chunk").rank_profiles)
    assert profiles == {SEMANTIC_PROFILE, KEYWORD_PROFILE, package_profile()}
    features = [cosine_feature(i) for i in range(MAX_QUERY_VECTORS)]
    for name in (SEMANTIC_PROFILE, KEYWORD_PROFILE):
        profile = application_package().get_schema("chunk").rank_profiles[name]
        assert profile.match_features == [*features, "bm25(search_text)"], name
    services = application_package().services_to_text
    assert "<document-api" in services
    assert "<search" in services
    assert 'document type="chunk"' in services
    assert 'document type="collection"' in services


def test_the_readiness_marker_changes_with_the_schema_and_not_with_the_dimensions() -> None:
    marker = package_profile()
    assert marker.startswith("quarry_")
    assert len(marker) == len("quarry_") + 12
    assert marker in application_package(768).get_schema("chunk").rank_profiles
    assert marker in application_package(8).get_schema("chunk").rank_profiles


def test_the_content_cluster_selection_deletes_name_is_the_one_the_package_declares() -> None:
    services = application_package().services_to_text
    assert f'<content id="{CONTENT_CLUSTER}"' in services


def test_only_string_map_values_carry_a_casing() -> None:
    """`match: cased` is for strings; on a numeric struct field Vespa ignores it with a warning."""
    schema = application_package().get_schema("chunk").schema_to_text
    for name, value_type in (
        ("meta_long", "long"),
        ("meta_double", "double"),
        ("meta_bool", "bool"),
    ):
        block = schema.split(f"field {name} type map<string,{value_type}>")[1].split(
            "\n        field "
        )[0]
        value = block.split("struct-field value")[1]
        assert "cased" not in value, name
    strings = schema.split("field meta_str type map<string,string>")[1].split("\n        field ")[0]
    assert "cased" in strings.split("struct-field value")[1]


def test_the_full_text_attribute_is_paged_out_of_memory() -> None:
    """`text_attr` (every chunk's text, for `contains`) is `paged`: on disk and in the page
    cache, not pinned in RAM (`en/content/attributes.html#paged-attributes`)."""
    schema = application_package().get_schema("chunk").schema_to_text
    block = schema.split("field text_attr type string {")[1].split("\n    }")[0]
    assert "paged" in block
    title = schema.split("field title_attr type string {")[1].split("\n    }")[0]
    assert "paged" not in title


def test_the_text_is_stored_once_as_itself_not_again_inside_chunk_json() -> None:
    """The text and title are their own summary fields; `chunk_json` holds the rest, and a hit
    is rebuilt from the three (`HIT_FIELDS`)."""
    plain = record(Document(id="d", title="Tides", text="Neap tides are weak."))
    fields = chunk_fields("c", plain, {})
    assert "Neap" not in fields["chunk_json"]
    assert "Tides" not in fields["chunk_json"]
    hit = {name: fields[name] for name in HIT_FIELDS}
    assert chunk_from_hit(hit) == plain.chunk
