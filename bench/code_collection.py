"""Code search over a Python source tree as a BEIR-layout collection, for evaluation only.

    python bench/code_collection.py /usr/lib/python3.11 OUT_DIR [--queries 1000] [--seed 31]

Built as CodeSearchNet builds its collections (Husain et al. 2019, "CodeSearchNet Challenge",
section 2): a function's docstring is a natural-language query, and the function's code with the
docstring taken out is the document that answers it. The question is asked in words a person
writes, the answer is code: the words the two share are the identifiers, so the keyword side has
less to hold on to than in prose, and neither side was tuned on code. Filters, after the paper:

* functions and methods (async too) of every `.py` file under the source tree, except files under
  a `test`, `tests`, `idle_test`, `site-packages` or `dist-packages` directory and functions whose
  name contains `test`;
* a function whose code is shorter than 3 lines, its docstring not counted, is left out (the
  paper's rule);
* corpus: each remaining function, `{title: "", text: its code without its docstring}`, its id
  `module:qualified.name@line` (a property's getter and setter share a name); of two functions
  with the same code, the first is kept (the tree holds copies, e.g. vendored modules);
* queries: the first paragraph of a docstring, spaces collapsed, of at least 3 words, from a
  function that is not a dunder method (`__init__`, `__repr__` …: "constructors and standard
  extension methods"); a query text that two functions share (`Return repr(self).`) says nothing
  about which one, so every copy of it is left out;
* judgements: each query's own function, gain 1; `--queries` of them, drawn with `--seed`.

Nothing here downloads anything, and none of it is shipped with the product: keep OUT_DIR outside
the repository (e.g. `/work/datasets/code`).
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.classic_collections import Converted, write_beir

SKIPPED_DIRECTORIES = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
)
MIN_LINES = 3
MIN_QUERY_WORDS = 3


class Function(NamedTuple):
    """One function of the tree: its id, its code without its docstring, and its query."""

    id: str
    code: str
    query: str | None


def functions(root: Path) -> Iterator[Function]:
    """Every function of the tree that the filters keep, in path order."""
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if SKIPPED_DIRECTORIES & set(relative.parts[:-1]):
            continue
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # lib2to3's fixtures, Python 2 files: not code a user searches
        lines = source.splitlines()
        module = ".".join(relative.with_suffix("").parts)
        yield from _functions_of(tree, lines, module, prefix="")


def _functions_of(node: ast.AST, lines: list[str], module: str, prefix: str) -> Iterator[Function]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            yield from _functions_of(child, lines, module, f"{prefix}{child.name}.")
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            converted = _function(child, lines, f"{module}:{name}@{child.lineno}")
            if converted is not None:
                yield converted
            yield from _functions_of(child, lines, module, f"{name}.")


def _function(
    node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str], function_id: str
) -> Function | None:
    if "test" in node.name.lower() or node.end_lineno is None:
        return None
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    docstring = ast.get_docstring(node, clean=True)
    kept = list(range(first, node.end_lineno + 1))
    if docstring is not None:
        expression = node.body[0]
        assert expression.end_lineno is not None
        dropped = set(range(expression.lineno, expression.end_lineno + 1))
        kept = [n for n in kept if n not in dropped]
    if len(kept) < MIN_LINES:
        return None
    code = "\n".join(lines[n - 1] for n in kept).strip("\n")
    code = _dedented(code)
    if not code.strip():
        return None
    dunder = node.name.startswith("__") and node.name.endswith("__")
    query = None if docstring is None or dunder else _summary(docstring)
    return Function(function_id, code, query)


def _summary(docstring: str) -> str | None:
    """The docstring's first paragraph, spaces collapsed, if it has enough words to ask with."""
    paragraph = docstring.strip().split("\n\n", 1)[0]
    words = paragraph.split()
    return " ".join(words) if len(words) >= MIN_QUERY_WORDS else None


def _dedented(code: str) -> str:
    lines = code.split("\n")
    indents = [len(line) - len(line.lstrip(" ")) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return "\n".join(line[cut:] for line in lines)


def code_search(root: Path, queries: int, seed: int) -> Converted:
    """(corpus, queries, judgements) of the tree: see the module's docstring."""
    corpus: list[dict[str, str]] = []
    seen_code: set[str] = set()
    asked: list[tuple[str, str]] = []
    for function in functions(root):
        if function.code in seen_code:
            continue
        seen_code.add(function.code)
        corpus.append({"_id": function.id, "title": "", "text": function.code})
        if function.query is not None:
            asked.append((function.id, function.query))
    copies = Counter(query.lower() for _, query in asked)
    unique = [(fid, query) for fid, query in asked if copies[query.lower()] == 1]
    drawn = sorted(random.Random(seed).sample(unique, min(queries, len(unique))))
    query_rows = [{"_id": f"q{n}", "text": query} for n, (_, query) in enumerate(drawn, start=1)]
    qrels = [(f"q{n}", fid, 1) for n, (fid, _) in enumerate(drawn, start=1)]
    return corpus, query_rows, qrels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a Python source tree, e.g. /usr/lib/python3.11")
    parser.add_argument("out", type=Path, help="where the BEIR layout is written")
    parser.add_argument("--queries", type=int, default=1000, help="judged queries drawn")
    parser.add_argument("--seed", type=int, default=31, help="seed of the draw")
    args = parser.parse_args()
    counts = write_beir(args.out, *code_search(args.source, args.queries, args.seed))
    print(json.dumps({"collection": "code", "source": str(args.source), **counts}))


if __name__ == "__main__":
    main()
