"""A Python source tree becomes a code-search collection (CodeSearchNet's rules) that
`bench/harness.load_beir` reads: a docstring asks for the code it was taken out of."""

from __future__ import annotations

from pathlib import Path

from bench.classic_collections import write_beir
from bench.code_collection import code_search
from bench.harness import load_beir

PARSER = '''\
"""A module docstring is not a query."""


def parse_header(line):
    """Split a mail header line into its name and value.

    The second paragraph is not part of the query.
    """
    name, _, value = line.partition(":")
    return name.strip(), value.strip()


def tiny(x):
    """Return x plus one, always."""
    return x + 1


def undocumented(a, b):
    total = a + b
    return total


def test_parse_header_splits():
    """Check that a header line splits in two."""
    assert parse_header("a: b") == ("a", "b")


class Reader:
    """A class docstring is not a query."""

    def __repr__(self):
        """Return the reader as its class name and state."""
        name = type(self).__name__
        return f"{name}()"

    @property
    def size(self):
        """Return the size of the buffered input."""
        return len(
            self.buffer
        )

    @size.setter
    def size(self, value):
        """Return repr(self) in a shared docstring."""
        self.buffer = value
        return None

    async def read_all(self):
        """Return repr(self) in a shared docstring."""
        data = await self.read()
        return data

    def reset(self):
        """Reset it."""
        self.buffer = b""
        self.size = 0
        return self
'''


def _tree(root: Path) -> Path:
    (root / "mail").mkdir(parents=True)
    (root / "mail" / "parser.py").write_text(PARSER)
    (root / "mail" / "vendored.py").write_text(PARSER.split("def tiny")[0])  # a copy
    (root / "test").mkdir()
    (root / "test" / "test_mail.py").write_text(
        'def check_parser(x):\n    """Assert that the parser parses headers."""\n    return x\n'
    )
    (root / "py2.py").write_text('def old():\n    print "Python 2 is skipped"\n    return 1\n')
    return root


def test_a_docstring_asks_for_its_own_function_whose_code_no_longer_holds_it(
    tmp_path: Path,
) -> None:
    counts = write_beir(tmp_path / "out", *code_search(_tree(tmp_path / "src"), 100, seed=1))
    collection = load_beir(tmp_path / "out")

    documents = {d["_id"]: d["text"] for d in collection.corpus}
    asked = {collection.queries[q]: set(judged) for q, judged in collection.qrels.items()}
    assert asked["Split a mail header line into its name and value."] == {
        "mail.parser:parse_header@4"
    }
    assert documents["mail.parser:parse_header@4"] == (
        'def parse_header(line):\n    name, _, value = line.partition(":")\n'
        "    return name.strip(), value.strip()"
    )
    # a method's code is dedented; its decorator stays with it, its docstring does not
    assert documents["mail.parser:Reader.size@37"] == (
        "@property\ndef size(self):\n    return len(\n        self.buffer\n    )"
    )
    assert asked["Return the size of the buffered input."] == {"mail.parser:Reader.size@37"}
    assert counts["judgements"] == counts["judged_queries"] == len(asked) == 2


def test_code_search_leaves_out_what_codesearchnet_leaves_out(tmp_path: Path) -> None:
    corpus, queries, _ = code_search(_tree(tmp_path / "src"), 100, seed=1)

    # `tiny` (2 lines of code once its docstring is out), the test-named function, the test
    # directory and the Python 2 file are not documents; the vendored copy of parse_header is
    # the same code, kept once under its first path; the property's getter and setter share a
    # name, and their ids tell them apart by line
    assert [d["_id"] for d in corpus] == [
        "mail.parser:parse_header@4",
        "mail.parser:undocumented@18",
        "mail.parser:Reader.__repr__@31",
        "mail.parser:Reader.size@37",
        "mail.parser:Reader.size@44",
        "mail.parser:Reader.read_all@49",
        "mail.parser:Reader.reset@54",
    ]
    # a dunder method asks nothing, nor a docstring two functions share, nor one too short
    assert sorted(q["text"] for q in queries) == [
        "Return the size of the buffered input.",
        "Split a mail header line into its name and value.",
    ]


def test_code_search_draws_the_same_queries_for_the_same_seed(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    (root / "many.py").write_text(
        "".join(
            f'def f{n}(x):\n    """Return the value number {n} of x."""\n    y = x\n    return y\n'
            for n in range(40)
        )
    )

    first = code_search(root, 10, seed=7)[1]
    again = code_search(root, 10, seed=7)[1]
    other = code_search(root, 10, seed=8)[1]

    assert first == again
    assert len(first) == 10
    assert {q["text"] for q in first} != {q["text"] for q in other}
