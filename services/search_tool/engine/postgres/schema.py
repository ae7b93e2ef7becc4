"""The PostgreSQL engine's tables.

    quarry_collections          one row per collection: name, embedding model and dimensions, the
                                BM25 totals (chunks, tokens) every write keeps current, and a
                                write sequence number (cached counts are valid until it moves)
    quarry_collection_fields    the metadata keys of each collection with their types
    quarry_chunks_<id>          the chunks of collection <id>: chunk fields, metadata (jsonb),
                                the vector (pgvector, HNSW cosine index), the BM25 term counts
                                (`term_freqs`) and length, trigram indexes for `contains` on
                                title and text; the wide values out of line (`TOAST_TUPLE_TARGET`)
    quarry_postings_<id>        one row per (term, chunk): the term's count in the chunk and the
                                chunk's length, in a covering index by (term, chunk), so a keyword
                                search reads only the postings of its query terms (index-only)
                                instead of every matching chunk's wide, compressed row, and
                                HYBRID's completion looks up single (term, chunk) postings
    quarry_terms_<id>           BM25 document frequency of every term of collection <id>

The catalog comes from versioned migrations (`MIGRATIONS`, applied once under the advisory lock of
`services.common.postgres.migrate`); a collection's own tables are made by `ensure_collection`.
Table names carry the collection's numeric id, never its name, so no caller text becomes an
identifier.
"""

from __future__ import annotations

from psycopg import sql

from services.common.postgres import Migration

COMPONENT = "search_tool"
"""The migrations' component name in `quarry_schema_migrations`."""

MIGRATIONS = (
    Migration(
        1,
        "collection catalog",
        (
            "CREATE EXTENSION IF NOT EXISTS vector",
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
            """CREATE TABLE quarry_collections (
                id bigserial PRIMARY KEY,
                name text NOT NULL UNIQUE,
                embedding_model text NOT NULL,
                dimensions integer NOT NULL CHECK (dimensions > 0),
                chunk_count bigint NOT NULL DEFAULT 0,
                token_count bigint NOT NULL DEFAULT 0,
                write_seq bigint NOT NULL DEFAULT 0,
                created_at timestamptz NOT NULL DEFAULT now()
            )""",
            """CREATE TABLE quarry_collection_fields (
                collection_id bigint NOT NULL REFERENCES quarry_collections ON DELETE CASCADE,
                key text NOT NULL,
                type text NOT NULL,
                PRIMARY KEY (collection_id, key)
            )""",
        ),
    ),
    Migration(
        2,
        "postings indexed by (term, chunk); autovacuum after bulk inserts",
        (
            # existing collections get what `collection_ddl` now makes: the postings index keyed
            # by (term, chunk_id), so HYBRID's completion looks up a few chunks' postings of a
            # term instead of reading all of them; and autovacuum settings that keep the
            # visibility map current for index-only scans after bulk loads
            """DO $$
            DECLARE
                collection bigint;
                postings text;
            BEGIN
                FOR collection IN SELECT id FROM quarry_collections ORDER BY id LOOP
                    postings := 'quarry_postings_' || collection;
                    IF to_regclass(quote_ident(postings)) IS NULL THEN
                        CONTINUE;
                    END IF;
                    EXECUTE format(
                        'CREATE INDEX IF NOT EXISTS %I ON %I'
                        ' (term, chunk_id) INCLUDE (tf, doc_length)',
                        postings || '_term_chunk', postings);
                    EXECUTE format('DROP INDEX IF EXISTS %I', postings || '_term');
                    EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_insert_scale_factor'
                        ' = 0.02, autovacuum_vacuum_scale_factor = 0.05,'
                        ' autovacuum_analyze_scale_factor = 0.05)', postings);
                    EXECUTE format('ALTER TABLE %I SET (autovacuum_vacuum_insert_scale_factor'
                        ' = 0.02, autovacuum_vacuum_scale_factor = 0.05,'
                        ' autovacuum_analyze_scale_factor = 0.05)', 'quarry_chunks_' || collection);
                END LOOP;
            END
            $$""",
        ),
    ),
    Migration(
        3,
        "BM25's N counts only chunks holding a term, as Lance's index does",
        (
            # `termless_count`: the chunks without a term (doc_length 0), kept with the other
            # totals on every write; BM25's N is chunk_count minus it. Counted apart, not as the
            # chunks with a term: a replica still on the code before writes chunk_count alone,
            # which leaves N right unless the chunks it writes have no term (N as before)
            "ALTER TABLE quarry_collections"
            " ADD COLUMN IF NOT EXISTS termless_count bigint NOT NULL DEFAULT 0",
            """DO $$
            DECLARE
                collection bigint;
                chunks text;
                termless bigint;
            BEGIN
                FOR collection IN SELECT id FROM quarry_collections ORDER BY id LOOP
                    chunks := 'quarry_chunks_' || collection;
                    IF to_regclass(quote_ident(chunks)) IS NULL THEN
                        CONTINUE;
                    END IF;
                    EXECUTE format('SELECT count(*) FROM %I WHERE doc_length = 0', chunks)
                        INTO termless;
                    UPDATE quarry_collections SET termless_count = termless WHERE id = collection;
                END LOOP;
            END
            $$""",
        ),
    ),
)


TOAST_TUPLE_TARGET = 512
AUTOVACUUM = (
    "autovacuum_vacuum_insert_scale_factor = 0.02, autovacuum_vacuum_scale_factor = 0.05,"
    " autovacuum_analyze_scale_factor = 0.05"
)
"""Storage parameters of the chunk and postings tables (migration 2 gives existing ones the same):
autovacuum after 2 % of rows inserted (PostgreSQL's default: 20 %) keeps the visibility map
current, without which the keyword side's index-only scans of the postings visit the table for
every posting written since the last vacuum (a filtered HYBRID search at 100k chunks took twice as
long right after a bulk load as after `VACUUM`); replacements and statistics follow at 5 %. After a
bulk load an operator may still run `VACUUM (ANALYZE)` on them at once (the README)."""
"""A chunk row's wide values (the vector, text, chunk JSON, term counts) live out of line (TOAST),
so the table's own pages hold only the filterable fields: a filter reads ~400 bytes per chunk
instead of ~1.5 kB (the vector alone is 1.5 kB at 384 dimensions). The HNSW index keeps its own
copy of the vectors; the heap's is read only for the few rows a search returns."""


def chunks_table(collection_id: int) -> sql.Identifier:
    return sql.Identifier(f"quarry_chunks_{int(collection_id)}")


def postings_table(collection_id: int) -> sql.Identifier:
    return sql.Identifier(f"quarry_postings_{int(collection_id)}")


def terms_table(collection_id: int) -> sql.Identifier:
    return sql.Identifier(f"quarry_terms_{int(collection_id)}")


def collection_ddl(collection_id: int, dimensions: int) -> list[sql.Composed]:
    """The statements that make one collection's tables and indexes."""
    chunks = chunks_table(collection_id)
    terms = terms_table(collection_id)
    prefix = f"quarry_chunks_{int(collection_id)}"

    def index(suffix: str) -> sql.Identifier:
        return sql.Identifier(f"{prefix}_{suffix}")

    return [
        sql.SQL(
            """CREATE TABLE {chunks} (
                id text PRIMARY KEY,
                document_id text NOT NULL,
                chunk_index integer NOT NULL,
                title text NOT NULL,
                text text NOT NULL,
                source text NOT NULL,
                entity_type text NOT NULL,
                created_at timestamptz,
                updated_at timestamptz,
                url text NOT NULL,
                breadcrumb_terms text[] NOT NULL,
                breadcrumb_path text NOT NULL,
                metadata jsonb NOT NULL,
                content_hash text NOT NULL,
                chunk_json text NOT NULL,
                embedding vector({dimensions}) NOT NULL,
                term_freqs jsonb NOT NULL,
                doc_length integer NOT NULL
            ) WITH (toast_tuple_target = {toast_target}, {autovacuum})"""
        ).format(
            chunks=chunks,
            dimensions=sql.Literal(int(dimensions)),
            toast_target=sql.Literal(TOAST_TUPLE_TARGET),
            autovacuum=sql.SQL(AUTOVACUUM),
        ),
        sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE EXTERNAL").format(chunks),
        sql.SQL("CREATE INDEX {} ON {} (document_id)").format(index("document"), chunks),
        sql.SQL("CREATE INDEX {} ON {} (source)").format(index("source"), chunks),
        sql.SQL("CREATE INDEX {} ON {} (created_at)").format(index("created"), chunks),
        sql.SQL("CREATE INDEX {} ON {} USING hnsw (embedding vector_cosine_ops)").format(
            index("embedding"), chunks
        ),
        sql.SQL(
            "CREATE TABLE {} (term text NOT NULL, chunk_id text NOT NULL,"
            " tf integer NOT NULL, doc_length integer NOT NULL) WITH ({})"
        ).format(postings_table(collection_id), sql.SQL(AUTOVACUUM)),
        sql.SQL("CREATE INDEX {} ON {} (term, chunk_id) INCLUDE (tf, doc_length)").format(
            sql.Identifier(f"quarry_postings_{int(collection_id)}_term_chunk"),
            postings_table(collection_id),
        ),
        sql.SQL("CREATE INDEX {} ON {} (chunk_id)").format(
            sql.Identifier(f"quarry_postings_{int(collection_id)}_chunk"),
            postings_table(collection_id),
        ),
        sql.SQL("CREATE INDEX {} ON {} USING gin (text gin_trgm_ops)").format(
            index("text_trgm"), chunks
        ),
        sql.SQL("CREATE INDEX {} ON {} USING gin (title gin_trgm_ops)").format(
            index("title_trgm"), chunks
        ),
        sql.SQL("CREATE TABLE {} (term text PRIMARY KEY, df integer NOT NULL)").format(terms),
    ]


def drop_ddl(collection_id: int) -> list[sql.Composed]:
    return [
        sql.SQL("DROP TABLE IF EXISTS {}").format(chunks_table(collection_id)),
        sql.SQL("DROP TABLE IF EXISTS {}").format(terms_table(collection_id)),
        sql.SQL("DROP TABLE IF EXISTS {}").format(postings_table(collection_id)),
    ]
