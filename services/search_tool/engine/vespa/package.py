"""The Vespa application package, defined once with pyvespa: schemas, rank profiles, limits.

`application_package(dimensions)` is the one source of truth. `scripts/gen_vespa_app.py` renders
it into `services/search_tool/vespa/app/` (checked in, compared by a test) and `make
vespa-package` zips that directory for `vespa deploy` or the config server's prepareandactivate.
The field names below are the ones the YQL compiler (`yql`) and the feeder (`documents`) use.

One `chunk` document type holds every collection (`collection` is a fast-search attribute every
query filters on), so a new collection never needs a redeploy; a small `collection` document type
records each collection's embedding model, dimensions and metadata key types (a collection with
no chunks still lists). Equality fields are `match: cased` attributes (Quarry's `equals` is
case-sensitive); `search_text` (the title, then the chunk's text and its neighbourhood: exactly the
embedded engine's `search_text`, `ChunkRecord.indexed_text`) is the one BM25 index, the `default`
fieldset keyword retrieval matches, so both engines score the same field with BM25 and one
train-chosen fusion serves both; `text` is returned, not indexed. Synthetic attribute
copies `title_attr` / `text_attr` serve `equals` and `contains`, which compiles to `matches` (a
regex, case-insensitive substring with `(?i)`) and cannot target a field that is both index and
attribute. Metadata lives in four typed maps whose keys and values are struct-field attributes
(`sameElement` queries), so a new key needs no redeploy and a missing key is really missing.
"""

from __future__ import annotations

import functools
import hashlib

from vespa.package import (
    HNSW,
    ApplicationPackage,
    Document,
    Field,
    FieldSet,
    FirstPhaseRanking,
    Function,
    QueryField,
    QueryProfile,
    RankProfile,
    Schema,
    Struct,
    StructField,
)

APPLICATION = "quarry"
CHUNK = "chunk"
COLLECTION = "collection"
NAMESPACE = "quarry"
CONTENT_CLUSTER = "quarry_content"
EMBEDDING = "embedding"
MAX_QUERY_VECTORS = 10
"""The primary query plus at most nine variations (DESIGN §4); one declared input each."""
MAX_HITS = 1200
"""Query-profile `maxHits`: the largest `fusion.candidates` (1000) plus the largest page (200)."""
MAX_OFFSET = 10_000
"""Query-profile `maxOffset`: the deepest page a search may ask for."""
DEFAULT_DIMENSIONS = 384
"""all-MiniLM-L6-v2, the default embedder; the checked-in package is rendered for it."""

STRING_ATTRIBUTES = ("collection", "chunk_id", "document_id", "source", "entity_type", "url")
"""Cased, fast-search string attributes compared whole."""
TEXT_ATTRIBUTE_COPIES = {"title": "title_attr", "text": "text_attr"}
"""Text fields and their synthetic attribute copies (for `equals` and `matches`)."""
SEARCH_TEXT = "search_text"
KEYWORD_FIELDS = (SEARCH_TEXT,)
"""BM25 indexes of the `default` fieldset: what keyword retrieval matches and scores."""
SEMANTIC_PROFILE = "semantic"
"""Ranks by the best closeness over the query's nearestNeighbor operators (the dense side)."""
KEYWORD_PROFILE = "keyword"
"""Ranks by `bm25(search_text)` (the keyword side)."""
BM25_FEATURE = f"bm25({SEARCH_TEXT})"
"""The keyword score each hit reports (`matchfeatures`), in both profiles."""


def cosine_feature(index: int) -> str:
    """The match feature holding a hit's cosine similarity to query vector `index`."""
    return f"cosine_q{index}"


METADATA_MAPS = {
    "string": "meta_str",
    "integer": "meta_long",
    "double": "meta_double",
    "bool": "meta_bool",
}
"""Metadata field type → the typed map holding its keys."""
_MAP_VALUE_TYPES = {
    "meta_str": "string",
    "meta_long": "long",
    "meta_double": "double",
    "meta_bool": "bool",
}


def application_package(dimensions: int = DEFAULT_DIMENSIONS) -> ApplicationPackage:
    """The whole package for `dimensions`-d embeddings, marked with `package_profile()`."""
    package = _unmarked_package(dimensions)
    package.get_schema(CHUNK).add_rank_profile(RankProfile(package_profile(), inherits="default"))
    return package


@functools.cache
def package_profile() -> str:
    """The name of a rank profile only this shape of the package has: `quarry_` and the first
    12 hex digits of the SHA-256 of its schemas and query profile (rendered without the marker,
    for any one dimension count: the embedding size is checked per collection). Readiness asks
    Vespa for it; a query naming a rank profile the deployed schema lacks is refused ("Requested
    rank profile '…' is undefined for document type", Vespa's ClusterSearcher), so an older or
    foreign package is told apart from this one."""
    package = _unmarked_package(1)
    text = "\n".join(
        [*(schema.schema_to_text for schema in package.schemas), package.query_profile_to_text]
    )
    return "quarry_" + hashlib.sha256(text.encode()).hexdigest()[:12]


def _unmarked_package(dimensions: int) -> ApplicationPackage:
    return ApplicationPackage(
        name=APPLICATION,
        schema=[chunk_schema(dimensions), collection_schema()],
        query_profile=QueryProfile(
            fields=[QueryField("maxHits", MAX_HITS), QueryField("maxOffset", MAX_OFFSET)]
        ),
    )


def chunk_schema(dimensions: int) -> Schema:
    """One document per chunk, every collection in one document type."""
    document = Document(
        fields=[
            *(_string_attribute(name) for name in STRING_ATTRIBUTES),
            Field(
                "chunk_index",
                "int",
                indexing=["attribute", "summary"],
                attribute=["fast-search"],
                rank="filter",
            ),
            Field("title", "string", indexing=["summary"]),
            Field("text", "string", indexing=["summary"]),
            Field(SEARCH_TEXT, "string", indexing=["index"], index="enable-bm25"),
            *(
                Field(
                    name,
                    "long",
                    indexing=["attribute", "summary"],
                    attribute=["fast-search"],
                    rank="filter",
                )
                for name in ("created_at", "updated_at")
            ),
            Field(
                "breadcrumbs",
                "array<breadcrumb>",
                indexing=["summary"],
                struct_fields=[
                    StructField(name, indexing=["attribute"], match=["cased"])
                    for name in ("id", "name", "entity_type")
                ],
            ),
            Field(
                "breadcrumb_terms",
                "array<string>",
                indexing=["attribute"],
                attribute=["fast-search"],
                match=["cased"],
                rank="filter",
            ),
            Field("breadcrumb_path", "string", indexing=["attribute"], match=["cased"]),
            *(
                Field(
                    name,
                    f"map<string,{value_type}>",
                    indexing=["summary"],
                    struct_fields=[
                        StructField(
                            "key",
                            indexing=["attribute"],
                            attribute=["fast-search"],
                            match=["cased"],
                        ),
                        # casing is for strings: Vespa ignores it, with a deploy warning, on
                        # numbers (its DictionaryTestCase.testCasingIsIgnoredForNumericFields)
                        StructField("value", indexing=["attribute"], match=["cased"])
                        if value_type == "string"
                        else StructField("value", indexing=["attribute"]),
                    ],
                )
                for name, value_type in _MAP_VALUE_TYPES.items()
            ),
            Field("content_hash", "string", indexing=["attribute", "summary"], match=["cased"]),
            Field("chunk_json", "string", indexing=["summary"]),
            # the collection's incarnation the chunk was written into (`registry`): only
            # test-and-set conditions read it, from the stored document; no attribute, no RAM
            Field("incarnation", "string", indexing=["summary"]),
            Field(
                EMBEDDING,
                # bfloat16 cells, dot product on unit vectors: on SciFact (3,712 of 5,183
                # abstracts, 255 test queries) no query's top 10 changed against float32 cosine
                # (bench/results/vespa-vector-precision-partial.json); half the memory
                f"tensor<bfloat16>(x[{dimensions}])",
                indexing=["attribute", "index"],
                ann=HNSW(
                    distance_metric="prenormalized-angular",
                    max_links_per_node=16,
                    neighbors_to_explore_at_insert=200,
                ),
            ),
        ],
        structs=[
            Struct(
                "breadcrumb",
                [Field(name, "string") for name in ("id", "name", "entity_type")],
            )
        ],
    )
    synthetic = [
        Field(
            copy,
            "string",
            indexing=[f"input {source}", "attribute"],
            match=["cased"],
            # the whole text of every chunk, for `contains` (a regex scan) only: paged, so it
            # lives on disk and in the page cache, not pinned in memory
            # (`en/content/attributes.html#paged-attributes`); titles are short and stay in RAM
            attribute=["paged"] if source == "text" else None,
            is_document_field=False,
        )
        for source, copy in TEXT_ATTRIBUTE_COPIES.items()
    ]
    schema = Schema(
        CHUNK,
        document,
        fieldsets=[FieldSet("default", list(KEYWORD_FIELDS))],
        rank_profiles=_rank_profiles(dimensions),
    )
    for field in synthetic:
        schema.add_fields(field)
    return schema


def collection_schema() -> Schema:
    """One document per collection: what fixes its shape and its metadata key types."""
    return Schema(
        COLLECTION,
        Document(
            fields=[
                _string_attribute("name"),
                Field("embedding_model", "string", indexing=["attribute", "summary"]),
                Field("dimensions", "int", indexing=["attribute", "summary"]),
                Field("metadata_types", "string", indexing=["summary"]),
                # bumped by every write; the test-and-set condition of the next one
                Field("revision", "long", indexing=["attribute", "summary"]),
                # random id written at creation: a collection deleted and created again has
                # another one (`registry`)
                Field("incarnation", "string", indexing=["summary"]),
            ]
        ),
    )


def query_inputs(dimensions: int) -> list[tuple[str, str]]:
    """`query(q0)` … `query(q9)`: one dense query vector per labelled nearestNeighbor."""
    return [(f"query(q{i})", f"tensor<float>(x[{dimensions}])") for i in range(MAX_QUERY_VECTORS)]


def _rank_profiles(dimensions: int) -> list[RankProfile]:
    """The two profiles the engine sends (`queries`), each reporting both sides' scores of every
    hit: the exact cosine to each query vector (`cosine_q<i>`, computed from the stored vector,
    so also for hits the nearestNeighbor operators did not retrieve; 0 for an unused input) and
    `bm25(search_text)`. A dense request gets a hit's BM25 from its rank-only text terms, a
    keyword request a hit's cosines from the query vectors it carries: the fusion needs no
    request to complete the side a candidate came without."""
    inputs = query_inputs(dimensions)
    cosines = [
        Function(
            cosine_feature(i),
            f"sum(query(q{i}) * attribute({EMBEDDING})) / max(1e-9, "
            f"sqrt(sum(query(q{i}) * query(q{i}))) * "
            f"sqrt(sum(attribute({EMBEDDING}) * attribute({EMBEDDING}))))",
        )
        for i in range(MAX_QUERY_VECTORS)
    ]
    features = [*(cosine_feature(i) for i in range(MAX_QUERY_VECTORS)), BM25_FEATURE]
    return [
        RankProfile(
            SEMANTIC_PROFILE,
            inputs=inputs,
            functions=cosines,
            # the best closeness over every nearestNeighbor operator of the query
            first_phase=FirstPhaseRanking(f"closeness(field, {EMBEDDING})"),
            match_features=features,
        ),
        RankProfile(
            KEYWORD_PROFILE,
            inputs=inputs,
            functions=cosines,
            first_phase=FirstPhaseRanking(BM25_FEATURE),
            match_features=features,
        ),
    ]


def _string_attribute(name: str) -> Field:
    return Field(
        name,
        "string",
        indexing=["attribute", "summary"],
        attribute=["fast-search"],
        match=["cased"],
        rank="filter",
    )
