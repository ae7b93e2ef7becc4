"""Questions over the demo collection (the Python standard library's docstrings,
`quarry_cli/demo/corpus.py`) with the documents that answer them, for `bench/answer_quality.py`.

Each question is paraphrased so that its keywords do not name the answer: it describes what the
user wants to do, not the function. `documents` are the demo document ids whose text answers it
(citing a chunk of any of them counts); `facts` are strings of which at least one must appear in
the answer (case-insensitive) — the name a user would need, or the value asked for.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    text: str
    documents: tuple[str, ...]
    facts: tuple[str, ...]


QUESTIONS: tuple[Question, ...] = (
    Question(
        "How can I get a scratch folder that cleans itself up when my with-block ends?",
        ("py:tempfile.TemporaryDirectory",),
        ("TemporaryDirectory",),
    ),
    Question(
        "What deletes a folder together with everything inside it?",
        ("py:shutil.rmtree",),
        ("rmtree",),
    ),
    Question(
        "How do I turn a Python dict into a JSON string?",
        ("py:json.dumps",),
        ("dumps",),
    ),
    Question(
        "Which decorator memoises a function's results, and how many entries does it keep by "
        "default?",
        ("py:functools.lru_cache",),
        ("128",),
    ),
    Question(
        "How do I bundle runs of equal neighbouring items in a sequence into groups?",
        ("py:itertools.groupby",),
        ("groupby",),
    ),
    Question(
        "What gives me the top n biggest values of a collection without sorting it all myself?",
        ("py:heapq.nlargest",),
        ("nlargest",),
    ),
    Question(
        "How do I create a nested chain of folders in one call, parents included?",
        ("py:os.makedirs", "py:pathlib.Path.mkdir"),
        ("makedirs", "parents"),
    ),
    Question(
        "How can I duplicate an entire directory, subfolders and files, to a new location?",
        ("py:shutil.copytree",),
        ("copytree",),
    ),
    Question(
        "What randomly reorders the elements of a list in place, and what does it return?",
        ("py:random.shuffle",),
        ("None",),
    ),
    Question(
        "How do I make an unguessable random string of hex digits for a password reset link?",
        ("py:secrets.token_hex",),
        ("token_hex",),
    ),
    Question(
        "Which function produces a random universally unique identifier?",
        ("py:uuid.uuid4",),
        ("uuid4",),
    ),
    Question(
        "Which clock should I read to measure elapsed time that can never jump backwards?",
        ("py:time.monotonic",),
        ("monotonic",),
    ),
    Question(
        "What is the right timer for benchmarking how long a snippet takes?",
        ("py:time.perf_counter", "py:timeit.timeit"),
        ("perf_counter", "timeit"),
    ),
    Question(
        "How should I compare two floats for approximate equality, and what relative tolerance "
        "is used by default?",
        ("py:math.isclose",),
        ("1e-09", "isclose"),
    ),
    Question(
        "How is the middle value computed when a data set has an even number of points?",
        ("py:statistics.median",),
        ("average", "interpolated"),
    ),
    Question(
        "How do I find which elements occur most often in a tally, with their counts?",
        ("py:collections.Counter.most_common",),
        ("most_common",),
    ),
    Question(
        "What list-like container is optimised for adding and removing at both ends?",
        ("py:collections.deque",),
        ("deque",),
    ),
    Question(
        "How do I strip the shared indentation from every line of a triple-quoted string?",
        ("py:textwrap.dedent",),
        ("dedent",),
    ),
    Question(
        "How can I make a string safe to paste into a shell command line?",
        ("py:shlex.quote",),
        ("quote",),
    ),
    Question(
        "What runs an external program and hands back an object with its return code and output?",
        ("py:subprocess.run",),
        ("CompletedProcess", "subprocess.run"),
    ),
    Question(
        "How do I list all files whose names match a wildcard pattern like *.txt?",
        ("py:glob.glob",),
        ("glob",),
    ),
    Question(
        "How can I test whether one file name fits a Unix shell-style pattern?",
        ("py:fnmatch.fnmatch",),
        ("fnmatch",),
    ),
    Question(
        "Which function computes a CRC-32 checksum of some bytes?",
        ("py:zlib.crc32",),
        ("crc32",),
    ),
    Question(
        "How do I Base64-encode bytes so the result can go into a URL or a file name?",
        ("py:base64.urlsafe_b64encode",),
        ("urlsafe_b64encode",),
    ),
    Question(
        "How do I copy an object so that nested objects inside it are copied too, not shared?",
        ("py:copy.deepcopy",),
        ("deepcopy",),
    ),
    Question(
        "What builds a callable that fetches a given index or key from whatever it is passed, "
        "handy as a sort key?",
        ("py:operator.itemgetter",),
        ("itemgetter",),
    ),
    Question(
        "How can I pre-fill some arguments of a function and get a new callable?",
        ("py:functools.partial",),
        ("partial",),
    ),
    Question(
        "How do I ignore a particular exception in a block without writing try/except?",
        ("py:contextlib.suppress",),
        ("suppress",),
    ),
    Question(
        "How can I iterate over several lists one after another as if they were one?",
        ("py:itertools.chain",),
        ("chain",),
    ),
    Question(
        "How do I take only the first few items from an iterator without building a list?",
        ("py:itertools.islice",),
        ("islice",),
    ),
    Question(
        "How do I separate a file name from its extension?",
        ("py:os.path.splitext",),
        ("splitext",),
    ),
    Question(
        "How can I turn a path that starts with ~ into the user's home directory path?",
        ("py:os.path.expanduser",),
        ("expanduser",),
    ),
    Question(
        "How do I capitalise the first letter of each word in a sentence?",
        ("py:string.capwords",),
        ("capwords",),
    ),
    Question(
        "How can I use arbitrary user text literally inside a regular expression?",
        ("py:re.escape",),
        ("escape",),
    ),
    Question(
        "Which regex function succeeds only if the pattern covers the entire string?",
        ("py:re.fullmatch",),
        ("fullmatch",),
    ),
    Question(
        "How do I parse a timestamp written like 2024-05-01T12:30:00 into a datetime?",
        ("py:datetime.datetime.fromisoformat",),
        ("fromisoformat",),
    ),
    Question(
        "How do I build the ?a=1&b=2 part of a URL from a dictionary?",
        ("py:urllib.parse.urlencode",),
        ("urlencode",),
    ),
    Question(
        "What size limit does a FIFO queue for threads have if I do not give one?",
        ("py:queue.Queue",),
        ("infinite", "unbounded", "no limit"),
    ),
    Question(
        "How can I turn a dataclass instance into a plain dictionary of its fields?",
        ("py:dataclasses.asdict",),
        ("asdict",),
    ),
    Question(
        "How do I set up logging output in one call for a small script, and when does that call "
        "do nothing?",
        ("py:logging.basicConfig",),
        ("basicConfig",),
    ),
    Question(
        "How do I run several coroutines concurrently and collect all their results?",
        ("py:asyncio.gather",),
        ("gather",),
    ),
    Question(
        "How can I give up waiting on a coroutine after some seconds, and what is raised then?",
        ("py:asyncio.wait_for",),
        ("TimeoutError", "wait_for"),
    ),
    Question(
        "How do I get the current exception's traceback as a string instead of printing it?",
        ("py:traceback.format_exc",),
        ("format_exc",),
    ),
    Question(
        "Which function replaces < > and & with HTML-safe sequences?",
        ("py:html.escape",),
        ("escape",),
    ),
    Question(
        "How can I visit every directory under a folder with its subfolders and files?",
        ("py:os.walk",),
        ("walk",),
    ),
    Question(
        "How can I find where an executable like git lives on the PATH?",
        ("py:shutil.which",),
        ("which",),
    ),
    Question(
        "How do I read a password from the terminal without showing what is typed?",
        ("py:getpass.getpass",),
        ("getpass",),
    ),
    Question(
        "How many ways are there to choose k items out of n, and which function computes it?",
        ("py:math.comb",),
        ("comb",),
    ),
)
