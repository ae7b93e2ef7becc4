"""The inner fences: how large each part of a request may be (the server's message-size limit is the
outer one). Beyond a limit the search tool answers INVALID_ARGUMENT naming the field and the limit,
at once, before any embedding or storage work; the values are documented in the README."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

DOCUMENT_TOO_LARGE = "DOCUMENT_TOO_LARGE"
"""`ErrorInfo.reason` of an UpsertDocuments refused because a document alone is more than one call
may give the model (`upsert_total_word_pieces`): the caller should split that document."""


class RequestLimits(BaseModel):
    """Largest values a request may carry (`search_tool.limits.*` in the YAML config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query_chars: int = Field(default=4_000, ge=1)
    """`query.primary` and each of `query.variations`, in characters (the agent takes questions
    up to the same length: `loop.max_query_chars`)."""
    document_id_bytes: int = Field(default=1_000, ge=1)
    """A document id, in UTF-8 bytes (any characters but control characters; at most the
    filter string limit, so that every id can be named in a `document_id` filter)."""
    title_chars: int = Field(default=1_000, ge=1)
    """A document's title."""
    label_chars: int = Field(default=256, ge=1)
    """A document's `source` and `entity_type`, and each breadcrumb's id, name and entity type."""
    url_chars: int = Field(default=4_096, ge=1)
    """A document's url."""
    breadcrumbs: int = Field(default=64, ge=0)
    """Breadcrumbs per document."""
    metadata_keys: int = Field(default=64, ge=0)
    """Metadata keys per document."""
    metadata_string_chars: int = Field(default=4_096, ge=1)
    """A string metadata value."""
    collection_metadata_keys: int = Field(default=256, ge=0)
    """Distinct metadata keys per collection (each becomes a filterable column)."""
    filter_groups: int = Field(default=32, ge=1)
    """OR groups of a search's filter, counted on each side and once the caller's filter and the
    request's filter are combined (every caller group AND every request group)."""
    filter_conditions: int = Field(default=32, ge=1)
    """Conditions per filter group."""
    filter_list_values: int = Field(default=1_000, ge=1)
    """Values of one `in` / `not_in` condition."""
    filter_string_chars: int = Field(default=1_000, ge=1)
    """A string value in a filter condition."""
    embed_text_chars: int = Field(default=20_000, ge=1)
    """One text of an `Embed` call."""
    embed_total_chars: int = Field(default=16_000, ge=1)
    """All texts of one `Embed` call together. The embedder's work grows with the word pieces it
    reads (about one per character at worst, e.g. CJK text), so this bounds one call to seconds:
    256 texts of 20,000 characters, each within its own limit, ran past two minutes."""
    embed_total_word_pieces: int = Field(default=4_096, ge=1)
    """Word pieces the model reads for one `Embed` call (each text counts at most the embedder's
    `max_tokens`): the model's work, which characters bound only loosely (a CJK character is a
    word piece, an English word about one)."""
    upsert_total_bytes: int = Field(default=262_144, ge=1)
    """All document texts of one `UpsertDocuments` call together, in UTF-8 bytes: by default one
    document of `max_document_bytes`. Without it a call could carry 1,000 such documents. It
    bounds the tokenising done before `upsert_total_word_pieces` is counted (about a CPU second
    for 256 KiB of the densest text)."""
    upsert_total_word_pieces: int = Field(default=16_384, ge=1)
    """Word pieces the model reads for one `UpsertDocuments` call: every chunk's embedding text
    (the document's title and the chunk, overlaps included) with its two markers, each at most
    `embedding.max_tokens`, counted as `Embed` counts (unchanged documents too). The embedder is
    nearly all of an upsert's time (profiled: 97 % in the model, none super-linear), so this
    bounds one call to seconds on 2 idle cores; one document of 1,000,000 bytes (about 140,000
    word pieces of English) took 386 s at load 15 before it. About 90 KB of English text."""


DEFAULT_LIMITS = RequestLimits()
