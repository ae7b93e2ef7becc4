"""Each format's reader, on files made here (PDF by fpdf2, DOCX by python-docx)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import docx
import pytest
from fpdf import FPDF

from quarry_cli.ingest.files import encode_id, walk
from quarry_cli.ingest.formats import ParseError, format_of, looks_binary, read, unpacked


def test_markdown_front_matter_becomes_metadata_and_sections_carry_their_headings() -> None:
    text = """---
title: Install guide
tags: [setup, linux]
version: 3
draft: false
---
Intro paragraph.

# Install
Run the installer.

## On Linux
Use apt.

## On macOS
Use brew.
"""
    parts = read("markdown", text.encode(), Path("guide.md"))
    assert [p.part for p in parts] == ["", "install", "install/on-linux", "install/on-macos"]
    linux = parts[2]
    assert linux.title == "Install guide › On Linux"  # cited with its own heading
    assert parts[0].title == "Install guide"
    assert linux.text.startswith("## On Linux")
    assert "Use apt." in linux.text
    assert "brew" not in linux.text
    assert [h.text for h in linux.headings] == ["Install"]
    assert linux.metadata["tags"] == "setup, linux"
    assert linux.metadata["version"] == 3
    assert linux.metadata["draft"] is False
    assert linux.metadata["section"] == "On Linux"


def test_markdown_without_headings_is_one_document_titled_by_front_matter_or_nothing() -> None:
    [part] = read("markdown", b"just some notes\nover two lines\n", Path("n.md"))
    assert part.part == ""
    assert part.text == "just some notes\nover two lines"


def test_bad_front_matter_is_a_parse_error_with_the_reason() -> None:
    with pytest.raises(ParseError, match="front matter is not valid YAML"):
        read("markdown", b"---\ntitle: [unclosed\n---\nbody\n", Path("bad.md"))


def test_restructuredtext_gives_its_title_and_plain_text() -> None:
    source = "Tempfiles\n=========\n\nUse *TemporaryDirectory* for `cleanup`.\n"
    [part] = read("rst", source.encode(), Path("t.rst"))
    assert part.title == "Tempfiles"
    assert "Use TemporaryDirectory for cleanup." in part.text
    assert "*" not in part.text


def test_sphinx_restructuredtext_with_roles_docutils_does_not_know_falls_back_to_its_text() -> None:
    source = """.. _install:

==========
Installing
==========

Run :command:`pip install` as :ref:`shown <usage>`.

.. note::
   Use a virtual environment.

.. autoclass:: pip.Installer
"""
    [part] = read("rst", source.encode(), Path("install.rst"))
    assert part.title == "Installing"
    assert "Run :command:`pip install` as :ref:`shown <usage>`." in part.text
    assert "Use a virtual environment." in part.text


def test_html_keeps_the_main_text_and_title_and_drops_navigation_and_link_targets() -> None:
    page = b"""<html><head><title>Queues</title><style>p{}</style></head><body>
    <nav>Home | About</nav><main><h1>Queues</h1><p>A <a href="https://x.test/q">queue</a>
    is FIFO.</p></main><footer>(c) us</footer><script>alert(1)</script></body></html>"""
    [part] = read("html", page, Path("q.html"))
    assert part.title == "Queues"
    assert "queue" in part.text
    assert "is FIFO." in part.text
    for dropped in ("Home | About", "(c) us", "alert", "https://x.test"):
        assert dropped not in part.text


def test_pdf_gives_one_document_per_page_with_the_page_number() -> None:
    pdf = FPDF()
    pdf.set_title("Manual")
    pdf.set_font("helvetica", size=12)
    for words in ("first page about kettles", "second page about teapots"):
        pdf.add_page()
        pdf.cell(text=words)
    parts = read("pdf", bytes(pdf.output()), Path("manual.pdf"))
    assert [(p.part, p.metadata["page"]) for p in parts] == [("page-1", 1), ("page-2", 2)]
    assert "teapots" in parts[1].text
    assert "kettles" not in parts[1].text
    assert parts[0].title == "Manual"


def test_a_corrupt_pdf_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="unreadable PDF"):
        read("pdf", b"%PDF-1.4 garbage that is not a pdf", Path("broken.pdf"))


def test_docx_gives_its_paragraphs_and_title() -> None:
    document = docx.Document()
    document.core_properties.title = "Minutes"
    document.add_paragraph("We agreed to ship on Friday.")
    document.add_paragraph("Bob brings cake.")
    buffer = io.BytesIO()
    document.save(buffer)
    [part] = read("docx", buffer.getvalue(), Path("minutes.docx"))
    assert part.title == "Minutes"
    assert part.text == "We agreed to ship on Friday.\nBob brings cake."


def test_json_lines_records_keep_their_ids_and_other_keys_as_metadata() -> None:
    lines = [
        {"_id": "4983", "title": "Microstructural development", "text": "Alterations of the..."},
        {"id": "d2", "title": "", "text": "Second.", "metadata": {"x": 1}, "year": 2001},
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode()
    first, second = read("record", data, Path("corpus.jsonl"))
    assert (first.record_id, first.title) == ("4983", "Microstructural development")
    assert second.metadata["year"] == 2001
    assert "metadata" not in second.metadata
    assert first.metadata["record_sha256"] != second.metadata["record_sha256"]


def test_a_json_lines_file_with_a_broken_line_names_the_line() -> None:
    with pytest.raises(ParseError, match="line 2: not JSON"):
        read("record", b'{"id": "a", "text": "x"}\n{oops\n', Path("c.jsonl"))


def test_source_code_is_recognised_with_its_language() -> None:
    assert format_of(Path("tool.py")) == "code"
    [part] = read("code", b"def f():\n    return 1\n", Path("tool.py"))
    assert part.metadata["language"] == "Python"


def test_unknown_suffixes_and_binary_content_are_recognised() -> None:
    assert format_of(Path("photo.png")) is None
    assert format_of(Path("data.sqlite")) is None
    assert looks_binary(b"\x89PNG\r\n\x1a\n\0\0\0")
    assert not looks_binary("plain text, accentué".encode())


def test_ids_keep_allowed_characters_and_encode_the_rest_one_to_one() -> None:
    assert encode_id("docs/guide/intro.md") == "docs/guide/intro.md"
    assert encode_id("my notes/café.md") == "my:20notes/caf:C3:A9.md"
    assert encode_id("a:b") != encode_id("a b")
    long = encode_id("x" * 400)
    assert len(long) == 256
    assert long != encode_id("x" * 401)


def test_walk_names_files_from_the_folder_above_each_argument_and_skips_hidden_ones(
    tmp_path: Path,
) -> None:
    root = tmp_path / "docs"
    (root / "guide").mkdir(parents=True)
    (root / "guide" / "a.md").write_text("a")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref")
    (tmp_path / "README.md").write_text("r")
    found = list(walk([root, tmp_path / "README.md"]))
    assert [(f.relative, f.source) for f in found] == [
        ("docs/guide/a.md", "docs"),
        ("README.md", tmp_path.name),
    ]


MAN_PAGE = r""".\" a comment line
.TH LS 1 "2024-01-01" "GNU coreutils" "User Commands"
.SH NAME
ls \- list directory contents
.SH SYNOPSIS
.B ls
[\fIOPTION\fR]... [\fIFILE\fR]...
.SH DESCRIPTION
.PP
List information about the FILEs (the current directory by default).
.TP
\fB\-a\fR, \fB\-\-all\fR
do not ignore entries starting with .
.SH "SEE ALSO"
.BR dir (1)
"""


def test_a_gzipped_manual_page_is_read_as_its_text_titled_by_name_and_section() -> None:
    import gzip

    assert format_of(Path("ls.1.gz")) == "man"
    assert format_of(Path("printf.3p")) == "man"
    assert format_of(Path("notes.md.gz")) == "markdown"
    assert format_of(Path("archive.gz")) is None
    content, name = unpacked(gzip.compress(MAN_PAGE.encode()), Path("ls.1.gz"))
    assert name == Path("ls.1")
    [page] = read("man", content, name)
    assert page.title == "ls(1)"
    assert "ls - list directory contents" in page.text
    assert "[OPTION]... [FILE]..." in page.text
    assert "-a, --all" in page.text
    assert "SEE ALSO\ndir(1)" in page.text
    assert "\\f" not in page.text
    assert ".TP" not in page.text
    assert "a comment line" not in page.text


def test_a_gzip_file_that_is_not_gzip_is_a_parse_error_with_the_reason() -> None:
    with pytest.raises(ParseError, match="not a readable gzip file"):
        unpacked(b"plain text, not gzip", Path("notes.txt.gz"))


def test_a_walked_gzip_file_is_read_through_the_ingest_pipeline(tmp_path: Path) -> None:
    import gzip

    from quarry_cli.ingest.files import file_unit

    (tmp_path / "man1").mkdir()
    (tmp_path / "man1" / "ls.1.gz").write_bytes(gzip.compress(MAN_PAGE.encode()))
    [found] = walk([tmp_path / "man1"])
    documents = file_unit(found).read(frozenset())
    assert documents is not None
    [document] = documents
    assert (document.title, document.entity_type) == ("ls(1)", "man")
    assert "list directory contents" in document.text
