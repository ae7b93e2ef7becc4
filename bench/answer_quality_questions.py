"""Questions over the demo collection (the Python standard library's docstrings,
`quarry_cli/demo/corpus.py`) with the documents that answer them, for `bench/answer_quality.py`.

Two sets. `QUESTIONS` (48, issue 22) is the set every retrieval change of issue 31's sessions
3-16 was measured on, so it has been looked at hard. `HELD_OUT_QUESTIONS` (150, issue 31
session 17) were written afterwards by three people who read only the documents (no search was
run to write or choose them), over disjoint modules and the language-reference topics, none
aimed at a document the first set aims at: a fresh check of what was chosen on the first set,
and enough questions for a difference at rank 1 to rise above noise. Unlike the first set, they
also count a module's overview as answering when its text states the answer.

A third set, `HELD_OUT_2_QUESTIONS` (100, session 22, `--questions held-out-2`), was written the
same way by two more people who read only the first 700 characters of each document (no search
run), each question aimed at a document none of the first 198 aims at (the modules are shared:
few were left untouched), at most four a module. It was written to confirm a borderline result on
the 150 (`docs/first-search.md`, session 22, lab 6), and used once more, pooled with the 150, for
lab 7.

Each question is paraphrased so that its keywords do not name the answer: it describes what the
user wants to do, not the function. `documents` are the demo document ids whose text answers it
(citing a chunk of any of them counts); `facts` are strings of which at least one must appear in
the answer (case-insensitive) — the name a user would need, or the value asked for.
"""

from __future__ import annotations

import argparse
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


HELD_OUT_QUESTIONS: tuple[Question, ...] = (
    Question(
        (
            "How can I call a slow, blocking regular function from inside a coroutine without "
            "freezing the event loop, and still get its return value by awaiting?"
        ),
        ("py:asyncio.to_thread",),
        ("to_thread",),
    ),
    Question(
        (
            "How can I await an asyncio task but keep it running to completion even if the "
            "coroutine doing the awaiting is itself cancelled?"
        ),
        ("py:asyncio.shield", "py:asyncio.wait_for"),
        ("shield",),
    ),
    Question(
        (
            "In async code, how can I put one overall time limit on a whole block containing "
            "several awaits, using an `async with` statement?"
        ),
        ("py:asyncio.timeout", "py:asyncio.timeout_at", "py:asyncio.Timeout"),
        ("asyncio.timeout", "timeout("),
    ),
    Question(
        (
            "From an ordinary worker thread (not async code), how do I hand a coroutine to an event"
            " loop that is running in a different thread and later get its result?"
        ),
        ("py:asyncio.run_coroutine_threadsafe",),
        ("run_coroutine_threadsafe",),
    ),
    Question(
        (
            "I've started several async jobs at once. How can I handle each result as soon as that "
            "particular job finishes, in finishing order rather than the order I started them?"
        ),
        ("py:asyncio.as_completed",),
        ("as_completed",),
    ),
    Question(
        (
            "If I block on a group of asyncio tasks with a time limit and the limit passes before "
            "all of them are finished, is an error raised, or what happens to the unfinished ones?"
        ),
        ("py:asyncio.wait",),
        ("pending", "second set"),
    ),
    Question(
        (
            "When closing down a pool of worker threads or processes, how do I make it drop queued "
            "jobs that haven't started yet instead of running them?"
        ),
        (
            "py:concurrent.futures.Executor.shutdown",
            "py:concurrent.futures.ThreadPoolExecutor.shutdown",
            "py:concurrent.futures.ProcessPoolExecutor.shutdown",
        ),
        ("cancel_futures",),
    ),
    Question(
        (
            "I've submitted a batch of jobs to a worker pool. How can I block until the first one "
            "of them fails with an error, but otherwise hold on until all of them are done?"
        ),
        ("py:concurrent.futures.wait",),
        ("FIRST_EXCEPTION",),
    ),
    Question(
        (
            "If I register a completion callback on a future that has already finished, will the "
            "callback still run, and when?"
        ),
        ("py:concurrent.futures.Future.add_done_callback",),
        ("immediately",),
    ),
    Question(
        (
            "Waiting for a thread to end with a time limit always returns None, so how do I tell "
            "whether the thread actually finished or the wait simply timed out?"
        ),
        ("py:threading.Thread.join",),
        ("is_alive",),
    ),
    Question(
        (
            "Which kind of lock can be taken again by the same thread that already holds it without"
            " deadlocking, and how many times must it then be released?"
        ),
        ("py:threading.RLock",),
        ("RLock", "reentrant"),
    ),
    Question(
        (
            "Is there a counting lock that complains with an error if it is given back more times "
            "than it was taken, to help catch bugs?"
        ),
        (
            "py:threading.BoundedSemaphore",
            "py:threading.BoundedSemaphore.release",
            "py:asyncio.BoundedSemaphore",
        ),
        ("BoundedSemaphore",),
    ),
    Question(
        (
            "I need a queue where items come out by importance rather than arrival order. Which "
            "class should I use, and is the smallest or the largest priority number handed out "
            "first?"
        ),
        ("py:queue.PriorityQueue", "py:asyncio.PriorityQueue"),
        ("PriorityQueue", "lowest"),
    ),
    Question(
        (
            "When a worker pulls from a thread-safe queue but is only willing to wait a few "
            "seconds, what exception tells it that nothing arrived in time?"
        ),
        ("py:queue.Queue.get",),
        ("Empty",),
    ),
    Question(
        (
            "In the standard library's simple planner for calling functions at set times, when two "
            "planned calls are due at the same moment, does the one with the smaller or the larger "
            "priority number run first?"
        ),
        ("py:sched",),
        ("lower", "smaller"),
    ),
    Question(
        (
            "Can the standard library's planner of timed function calls run only the calls that are"
            " already due and then return right away, instead of blocking until everything queued "
            "has run?"
        ),
        ("py:sched.scheduler.run",),
        ("blocking",),
    ),
    Question(
        (
            "When my handler function gets invoked because the process received SIGTERM, which two "
            "arguments is it called with?"
        ),
        ("py:signal.signal",),
        ("frame",),
    ),
    Question(
        (
            "How can I find out what is currently set up to handle a particular OS signal, and what"
            " do I get back if that handler was not installed from Python?"
        ),
        ("py:signal.getsignal",),
        ("getsignal",),
    ),
    Question(
        (
            "Is there a one-call helper that opens a client TCP socket to a host and port, applying"
            " a timeout before it tries to connect?"
        ),
        ("py:socket.create_connection", "py:socket"),
        ("create_connection",),
    ),
    Question(
        (
            "How do I create a single listening TCP socket that accepts both IPv4 and IPv6 clients "
            "on the same port?"
        ),
        ("py:socket.create_server",),
        ("create_server", "dualstack_ipv6"),
    ),
    Question(
        (
            "How do I find every address (IPv4 and IPv6) that a host name and service port map to, "
            "with the details needed to create and connect a socket?"
        ),
        ("py:socket.getaddrinfo",),
        ("getaddrinfo",),
    ),
    Question(
        (
            "When I run a command and take its output as the return value, how do I get its error "
            "messages included in that same captured output?"
        ),
        ("py:subprocess.check_output", "py:subprocess"),
        ("STDOUT",),
    ),
    Question(
        (
            "What's a quick way to execute a shell command string and get back a tuple of its exit "
            "code and its text output?"
        ),
        ("py:subprocess.getstatusoutput", "py:subprocess.getoutput", "py:subprocess"),
        ("getstatusoutput",),
    ),
    Question(
        (
            "What's the difference between the two methods for stopping a child process I launched:"
            " which signal does each one send on Unix?"
        ),
        (
            "py:subprocess.Popen.terminate",
            "py:subprocess.Popen.kill",
            "py:asyncio.SubprocessTransport.terminate",
            "py:asyncio.SubprocessTransport.kill",
        ),
        ("SIGTERM", "SIGKILL"),
    ),
    Question(
        (
            "I need to open a list of files whose length is only known at runtime, all in one with "
            "statement, and be sure they all get closed even if opening a later one fails. What "
            "should I use?"
        ),
        ("py:contextlib.ExitStack",),
        ("ExitStack",),
    ),
    Question(
        (
            "How can I temporarily send everything that print() writes into a file or an in-memory "
            "buffer instead of the console?"
        ),
        ("py:contextlib.redirect_stdout",),
        ("redirect_stdout",),
    ),
    Question(
        (
            "Is there a do-nothing stand-in I can put in a with statement when a real resource "
            "manager is only needed under some condition?"
        ),
        ("py:contextlib.nullcontext",),
        ("nullcontext",),
    ),
    Question(
        (
            "How do I measure how much CPU time my whole program has actually consumed, not "
            "counting time spent sleeping or waiting?"
        ),
        ("py:time.process_time", "py:time.process_time_ns"),
        ("process_time",),
    ),
    Question(
        (
            "How do I turn a local-time tuple (year, month, day, hour, ...) back into a number of "
            "seconds since 1970?"
        ),
        ("py:time.mktime",),
        ("mktime",),
    ),
    Question(
        (
            "I changed the TZ environment variable while my program is running. How do I make the "
            "time functions pick up the new zone, and what happens if the zone name isn't "
            "recognized?"
        ),
        ("py:time.tzset",),
        ("tzset",),
    ),
    Question(
        (
            "When I benchmark a code snippet several times and get a list of timings, which number "
            "should I report: the average, or something else?"
        ),
        ("py:timeit.Timer.repeat",),
        ("min",),
    ),
    Question(
        (
            "How can I let the benchmarking tool decide by itself how many loop iterations to run, "
            "and what total duration does it aim for?"
        ),
        ("py:timeit.Timer.autorange", "py:timeit"),
        ("autorange", "0.2"),
    ),
    Question(
        "Which method gives the day of the week for a date with Monday as 1 and Sunday as 7?",
        ("py:datetime.date.isoweekday",),
        ("isoweekday",),
    ),
    Question(
        (
            "How do I convert the difference between two datetimes into a plain number of seconds, "
            "including the days part?"
        ),
        ("py:datetime.timedelta.total_seconds",),
        ("total_seconds",),
    ),
    Question(
        (
            "When turning a datetime into the standard 'YYYY-MM-DDTHH:MM:SS' text form, how do I "
            "leave out the microseconds and keep only hours, minutes and seconds?"
        ),
        ("py:datetime.datetime.isoformat", "py:datetime.time.isoformat"),
        ("timespec",),
    ),
    Question(
        (
            "How can I get a list of every IANA time zone name installed on this machine, and is "
            "that call expensive?"
        ),
        ("py:zoneinfo.available_timezones",),
        ("available_timezones",),
    ),
    Question(
        (
            "How do I combine a page's address with a relative link like '../img/logo.png' to get "
            "the complete address?"
        ),
        ("py:urllib.parse.urljoin",),
        ("urljoin",),
    ),
    Question(
        (
            "When I parse 'a=1&b=' from a web address, the empty 'b' parameter disappears. How do I"
            " keep parameters that have no value?"
        ),
        ("py:urllib.parse.parse_qs", "py:urllib.parse.parse_qsl"),
        ("keep_blank_values",),
    ),
    Question(
        (
            "How do I percent-encode a form field value so that spaces become '+' signs instead of "
            "%20?"
        ),
        ("py:urllib.parse.quote_plus",),
        ("quote_plus",),
    ),
    Question(
        (
            "How do I produce a mail/HTTP-style date string for a header that ends in 'GMT' rather "
            "than a numeric '+0000' offset?"
        ),
        ("py:email.utils.formatdate", "py:email.utils.format_datetime"),
        ("usegmt",),
    ),
    Question(
        (
            "How do I split a string like 'Jane Doe <jane@example.com>' into the display name and "
            "the bare address, and what comes back if it can't be parsed?"
        ),
        ("py:email.utils.parseaddr",),
        ("parseaddr",),
    ),
    Question(
        (
            "I have text containing entity codes such as &amp; or &#233;. How do I convert those "
            "codes back into the actual characters?"
        ),
        ("py:html.unescape",),
        ("unescape",),
    ),
    Question(
        (
            "Inside an except block, how do I write an ERROR-level log entry that also includes the"
            " full traceback of what was just caught?"
        ),
        (
            "py:logging.exception",
            "py:logging.Logger.exception",
            "py:logging.LoggerAdapter.exception",
            "py:logging.Logger.error",
        ),
        ("logger.exception", "logging.exception", "exc_info"),
    ),
    Question(
        (
            "I'm writing a library that emits log messages. How do I avoid the 'No handlers could "
            "be found' warning when the application using my library hasn't configured logging?"
        ),
        ("py:logging.NullHandler",),
        ("NullHandler",),
    ),
    Question(
        (
            "How do I make messages from the warnings module show up in my log output instead of "
            "going straight to stderr?"
        ),
        ("py:logging.captureWarnings",),
        ("captureWarnings",),
    ),
    Question(
        "How can I make the timestamps in all my log lines show UTC/GMT instead of local time?",
        ("py:logging.Formatter.formatTime",),
        ("converter", "gmtime"),
    ),
    Question(
        (
            "In a unit test, how can I collect the warnings some code emits into a list so I can "
            "assert on them, with the global warning settings restored afterwards?"
        ),
        ("py:warnings.catch_warnings",),
        ("catch_warnings",),
    ),
    Question(
        (
            "How do I make every warning raise an exception instead of just printing a message, so "
            "none of them can be missed?"
        ),
        ("py:warnings.simplefilter", "py:warnings.filterwarnings"),
        ("simplefilter", "filterwarnings"),
    ),
    Question(
        (
            "No exception has happened, but for debugging I want to print the chain of function "
            "calls that led to the current line. How?"
        ),
        ("py:traceback.print_stack", "py:traceback.extract_stack"),
        ("print_stack", "extract_stack"),
    ),
    Question(
        (
            "How do I get just the final 'ValueError: bad input' line for an exception, without the"
            " stack trace lines above it?"
        ),
        (
            "py:traceback.format_exception_only",
            "py:traceback.TracebackException.format_exception_only",
        ),
        ("format_exception_only",),
    ),
    Question(
        (
            "How can I make a dictionary that automatically creates a starting value, such as an "
            "empty list, the first time I look up a key that isn't there yet?"
        ),
        ("py:collections.defaultdict", "py:collections"),
        ("defaultdict",),
    ),
    Question(
        (
            "I have a dict of user settings, one of environment settings and one of built-in "
            "fallbacks. How do I look keys up through all of them in order without merging them "
            "into a new dict?"
        ),
        ("py:collections.ChainMap", "py:collections"),
        ("ChainMap",),
    ),
    Question(
        (
            "In a dictionary that remembers insertion order, how do I push an existing key to the "
            "back or bring it to the front, and what happens if the key isn't present?"
        ),
        ("py:collections.OrderedDict.move_to_end",),
        ("move_to_end",),
    ),
    Question(
        (
            "How do I loop over a sequence two neighbours at a time, getting (a, b), (b, c), (c, d)"
            " and so on?"
        ),
        ("py:itertools.pairwise", "py:itertools"),
        ("pairwise",),
    ),
    Question(
        (
            "When I zip two lists of different lengths the extra items of the longer one get "
            "dropped. How do I keep them, and what value fills the missing slots by default?"
        ),
        ("py:itertools.zip_longest",),
        ("zip_longest",),
    ),
    Question(
        (
            "Is there a built-in iterator that yields running totals of a list, e.g. [1, 2, 3] "
            "gives 1, 3, 6?"
        ),
        ("py:itertools.accumulate", "py:itertools"),
        ("accumulate",),
    ),
    Question(
        (
            "I've written __eq__ and __lt__ for my class. Is there a decorator that generates "
            "__le__, __gt__ and __ge__ for me?"
        ),
        ("py:functools.total_ordering",),
        ("total_ordering",),
    ),
    Question(
        (
            "My decorator returns an inner function, and now the decorated function's __name__ and "
            "docstring are the inner one's. How do I copy the original's metadata onto it?"
        ),
        ("py:functools.wraps", "py:functools.update_wrapper"),
        ("wraps", "update_wrapper"),
    ),
    Question(
        (
            "How can I write one function whose implementation is chosen by the type of its first "
            "argument, adding versions for more types later?"
        ),
        ("py:functools.singledispatch",),
        ("singledispatch",),
    ),
    Question(
        (
            "What can I pass as the key when sorting a list of objects by one of their fields, even"
            " a nested one like person.name.last?"
        ),
        ("py:operator.attrgetter",),
        ("attrgetter",),
    ),
    Question(
        (
            "How do I compute the straight-line distance between two points given as coordinate "
            "tuples of any dimension?"
        ),
        ("py:math.dist",),
        ("math.dist", "dist("),
    ),
    Question(
        (
            "How do I add up a long list of floating point numbers without accumulating rounding "
            "error?"
        ),
        ("py:math.fsum",),
        ("fsum",),
    ),
    Question(
        (
            "What does the math function counting ordered arrangements of k items picked from n "
            "return when k is bigger than n?"
        ),
        ("py:math.perm",),
        ("zero", "perm", "returns 0"),
    ),
    Question(
        (
            "My data has several values tied for most frequent. Which function gives me all of them"
            " instead of only the first one?"
        ),
        ("py:statistics.multimode", "py:statistics"),
        ("multimode",),
    ),
    Question(
        (
            "What kind of average should I use for speeds or other rates, and can I weight each "
            "value, e.g. by the distance driven at that speed?"
        ),
        ("py:statistics.harmonic_mean",),
        ("harmonic",),
    ),
    Question(
        (
            "My numbers are the whole population, not a sample. Which function gives the standard "
            "deviation for that case?"
        ),
        ("py:statistics.pstdev", "py:statistics"),
        ("pstdev",),
    ),
    Question(
        (
            "How do I pick several random items from a list where some items should be more likely "
            "than others, with repeats allowed?"
        ),
        ("py:random.choices", "py:random.Random.choices"),
        ("choices",),
    ),
    Question(
        "How do I draw 6 different lottery numbers from 1 to 49 so that no number comes up twice?",
        ("py:random.sample", "py:random.Random.sample"),
        ("sample",),
    ),
    Question(
        "Is the upper limit included when I generate a random whole number between a and b?",
        ("py:random.randint", "py:random.Random.randint"),
        ("randint",),
    ),
    Question(
        (
            "How do I generate a hard-to-guess random string that can safely go into a password-"
            "reset link?"
        ),
        ("py:secrets.token_urlsafe",),
        ("token_urlsafe",),
    ),
    Question(
        (
            "How can I approximate a rational number by a simpler one with a bounded denominator, "
            "like 22/7 for pi, and what is the default bound?"
        ),
        ("py:fractions.Fraction.limit_denominator",),
        ("limit_denominator", "1000000"),
    ),
    Question(
        (
            "How do I rearrange an existing list in place so that its smallest element is always at"
            " index 0 and I can repeatedly pop the minimum efficiently? How long does the "
            "conversion take?"
        ),
        ("py:heapq",),
        ("heapify",),
    ),
    Question(
        (
            "How can I combine several already sorted iterators into one sorted stream lazily, "
            "without loading everything into memory?"
        ),
        ("py:heapq.merge",),
        ("heapq.merge", "merge("),
    ),
    Question(
        (
            "How do I make sure no two members of my enumeration accidentally end up with the same "
            "value?"
        ),
        ("py:enum.unique",),
        ("@unique", "enum.unique", "unique("),
    ),
    Question(
        (
            "What happens by default when a bit-flag enumeration receives an integer containing "
            "bits that don't belong to any of its members?"
        ),
        ("py:enum.FlagBoundary",),
        ("strict",),
    ),
    Question(
        "How do I get a copy of an immutable data class instance with just one attribute changed?",
        ("py:dataclasses.replace",),
        ("replace",),
    ),
    Question(
        "How do I give a data class attribute an empty list as its default value?",
        ("py:dataclasses.field",),
        ("default_factory",),
    ),
    Question(
        (
            "How do I describe, for a static type checker, a dict that must have specific string "
            "keys each with its own value type, with some keys allowed to be missing?"
        ),
        ("py:typing.TypedDict",),
        ("TypedDict",),
    ),
    Question(
        (
            "Can I use isinstance() against a structural duck-typing interface class, and does that"
            " check verify the method signatures?"
        ),
        ("py:typing.runtime_checkable", "py:typing.Protocol"),
        ("runtime_checkable",),
    ),
    Question(
        (
            "How do I force the static type checker to treat a value as a specific type when I know"
            " better than its inference, and does that convert or check anything at runtime?"
        ),
        ("py:typing.cast",),
        ("cast",),
    ),
    Question(
        (
            "Is there a lightweight object I can create from keyword arguments and then read and "
            "set as attributes, without writing my own class?"
        ),
        ("py:types.SimpleNamespace", "py:argparse.Namespace"),
        ("Namespace",),
    ),
    Question(
        (
            "How can I make an existing class I can't modify, even a built-in type, count as a "
            "subclass of my abstract interface for issubclass() checks?"
        ),
        ("py:abc.ABCMeta.register", "py:abc.ABCMeta"),
        ("register",),
    ),
    Question(
        (
            "What exception is raised when I ask for the code text of a function whose original .py"
            " file can't be located?"
        ),
        ("py:inspect.getsource", "py:inspect.getsourcelines", "py:inspect.findsource"),
        ("OSError",),
    ),
    Question(
        (
            "Without calling a function, how can I map some positional and keyword arguments onto "
            "its parameters and find out whether the call would be rejected?"
        ),
        ("py:inspect.Signature.bind", "py:inspect.Signature", "py:inspect.getcallargs"),
        ("bind", "getcallargs"),
    ),
    Question(
        (
            "How do I read an attribute's raw stored value from an object without running any "
            "property code or its custom attribute-lookup hooks?"
        ),
        ("py:inspect.getattr_static",),
        ("getattr_static",),
    ),
    Question(
        (
            "What does the function that prints a function's bytecode instructions show if I call "
            "it with no argument at all?"
        ),
        ("py:dis.dis", "py:dis.distb"),
        ("traceback",),
    ),
    Question(
        (
            "How do I register a cleanup callback that runs when a particular object is garbage "
            "collected, and will it still run if the program exits first?"
        ),
        ("py:weakref.finalize",),
        ("finalize",),
    ),
    Question(
        (
            "How can I associate extra data with objects owned by other code, without adding "
            "attributes to them and without keeping them alive?"
        ),
        ("py:weakref.WeakKeyDictionary",),
        ("WeakKeyDictionary",),
    ),
    Question(
        (
            "Which function duplicates an arbitrary object such that the new container still refers"
            " to the same inner objects as the original?"
        ),
        ("py:copy.copy", "py:copy"),
        ("copy.copy", "shallow"),
    ),
    Question(
        (
            "How do I get the nicely indented, line-wrapped representation of a big nested data "
            "structure back as a string instead of having it printed to stdout?"
        ),
        ("py:pprint.pformat", "py:pprint"),
        ("pformat",),
    ),
    Question(
        (
            "Is there a ready-made constant containing every ASCII punctuation character, e.g. for "
            "stripping them from text?"
        ),
        ("py:string",),
        ("string.punctuation",),
    ),
    Question(
        (
            "How do I cut a long sentence down to fit in 40 characters, breaking only between words"
            " and adding a marker to show it was truncated?"
        ),
        ("py:textwrap.shorten", "py:textwrap.TextWrapper"),
        ("shorten",),
    ),
    Question(
        (
            "When I reflow a long paragraph into shorter lines with the standard library's "
            "paragraph-formatting helpers, what is the maximum line length if I don't specify one?"
        ),
        ("py:textwrap.wrap", "py:textwrap.fill", "py:textwrap.TextWrapper"),
        ("70",),
    ),
    Question(
        (
            "In a regex search-and-replace, can the replacement be computed by a function for each "
            "match instead of being a fixed string?"
        ),
        ("py:re.sub", "py:re.subn"),
        ("re.sub", "sub("),
    ),
    Question(
        "How do I do a regex replacement and also find out how many replacements were made?",
        ("py:re.subn", "py:re.Pattern.subn", "py:re"),
        ("subn",),
    ),
    Question(
        (
            "When I break a string apart on a regular expression that contains parentheses, why do "
            "the separators themselves show up in the resulting list of pieces?"
        ),
        ("py:re.split",),
        ("group",),
    ),
    Question(
        (
            "When a regular expression fails to compile, how can I find out at which position in "
            "the pattern the problem is?"
        ),
        ("py:re.error",),
        ("re.error", ".pos"),
    ),
    Question(
        (
            "In a format string for packing values into binary C-style records, which leading "
            "character means native byte order, size and alignment, and what applies if I give "
            "none?"
        ),
        ("py:struct",),
        ("@",),
    ),
    Question(
        (
            "I have tasks with prerequisites. How do I get an order to run them in so that every "
            "task comes after the ones it depends on?"
        ),
        ("py:graphlib.TopologicalSorter", "py:graphlib.TopologicalSorter.static_order"),
        ("TopologicalSorter", "static_order"),
    ),
    Question(
        (
            "How do I import a module whose name is only known as a string at runtime, including a "
            "relative name?"
        ),
        ("py:importlib.import_module",),
        ("import_module",),
    ),
    Question(
        (
            "How can I find out how many bytes of free space are left on the drive that holds a "
            "given folder?"
        ),
        ("py:shutil.disk_usage",),
        ("disk_usage",),
    ),
    Question(
        (
            "I need to relocate a whole folder to another disk, not just rename it on the same "
            "filesystem. Which function does this, like the Unix mv command?"
        ),
        ("py:shutil.move",),
        ("move",),
    ),
    Question(
        "How do I pack an entire directory into a .zip or .tar.gz file from Python?",
        ("py:shutil.make_archive",),
        ("make_archive",),
    ),
    Question(
        (
            "How do I read an environment variable and get a fallback value instead of None when it"
            " isn't set?"
        ),
        ("py:os.getenv", "py:os.getenvb"),
        ("getenv",),
    ),
    Question(
        (
            "When I combine several path pieces into one and a later piece starts with a slash, "
            "what happens to the pieces that came before it?"
        ),
        ("py:os.path.join", "py:pathlib.PurePath.joinpath"),
        ("discarded", "join"),
    ),
    Question(
        (
            "How do I get the true location of a file, with every symbolic link along the way "
            "followed?"
        ),
        ("py:os.path.realpath", "py:pathlib.Path.resolve", "py:pathlib.Path.absolute"),
        ("realpath", "resolve"),
    ),
    Question(
        (
            "Given a path object for report.txt, how do I get the same path ending in .csv instead,"
            " and how do I drop the extension entirely?"
        ),
        ("py:pathlib.PurePath.with_suffix",),
        ("with_suffix",),
    ),
    Question(
        (
            "What exception do I get when I ask for a path expressed relative to a directory that "
            "it isn't actually inside?"
        ),
        ("py:pathlib.PurePath.relative_to",),
        ("ValueError",),
    ),
    Question(
        (
            "Which low-level call creates a scratch file securely and hands back an OS-level handle"
            " plus its path, rather than a file object?"
        ),
        ("py:tempfile.mkstemp", "py:tempfile"),
        ("mkstemp",),
    ),
    Question(
        (
            "Is there a scratch file object that keeps its data in memory and only writes to disk "
            "once it grows past a size limit?"
        ),
        ("py:tempfile.SpooledTemporaryFile",),
        ("SpooledTemporaryFile",),
    ),
    Question(
        (
            "Which function lets me loop lazily over file names matching a wildcard like *.log, "
            "without building the whole list first?"
        ),
        ("py:glob.iglob", "py:pathlib.Path.glob", "py:pathlib.Path.rglob"),
        ("iglob", "glob"),
    ),
    Question(
        "How do I convert a shell-style wildcard pattern such as *.txt into an equivalent regex?",
        ("py:fnmatch.translate", "py:fnmatch"),
        ("translate",),
    ),
    Question(
        (
            "Which mode should I pass when opening a file so that it is only created if it doesn't "
            "exist yet, and what error is raised when it already does?"
        ),
        ("py:io.open",),
        ("FileExistsError",),
    ),
    Question(
        (
            "How do I stop Python from converting \\r\\n line endings into \\n when I read a text "
            "file?"
        ),
        ("py:io.open",),
        ("newline",),
    ),
    Question(
        "How do I read a .gz compressed log file line by line as strings instead of bytes?",
        ("py:gzip.open", "py:gzip.GzipFile"),
        ("gzip.open", "'rt'", '"rt"'),
    ),
    Question(
        (
            "With the deflate compressor object, what window-bits value makes the output carry a "
            "gzip header instead of a zlib one?"
        ),
        ("py:zlib.compressobj",),
        ("25", "31"),
    ),
    Question(
        (
            "When decoding base64 text, stray characters outside the alphabet seem to be silently "
            "dropped. How can I make decoding reject them with an error instead?"
        ),
        ("py:base64.b64decode",),
        ("validate",),
    ),
    Question(
        (
            "What's the simplest way to compute a SHA-256 checksum of a file opened in binary mode,"
            " without reading it in chunks myself?"
        ),
        ("py:hashlib.file_digest",),
        ("file_digest",),
    ),
    Question(
        (
            "When creating a keyed hash for message authentication, do I have to name the hash "
            "algorithm, or is there a default?"
        ),
        ("py:hmac.new",),
        ("digestmod",),
    ),
    Question(
        (
            "How can I parse a JSON value at the start of a string that has other junk after it, "
            "and find out where the JSON part ended?"
        ),
        ("py:json.JSONDecoder.raw_decode",),
        ("raw_decode",),
    ),
    Question(
        (
            "How do I load JSON so that numbers like 1.1 come back as Decimal objects instead of "
            "floats?"
        ),
        ("py:json.loads", "py:json"),
        ("parse_float",),
    ),
    Question(
        (
            "My CSV files sometimes use semicolons and sometimes commas as separators. How can I "
            "detect which one a file uses from a sample of it?"
        ),
        ("py:csv.Sniffer", "py:csv.Sniffer.sniff"),
        ("Sniffer", "sniff"),
    ),
    Question(
        (
            "How do I open a throwaway SQL database that lives only in RAM and disappears when the "
            "connection is closed?"
        ),
        ("py:sqlite3",),
        (":memory:",),
    ),
    Question(
        "Which database method runs one INSERT statement once for every tuple in a list of rows?",
        ("py:sqlite3.Connection.executemany", "py:sqlite3.Cursor.executemany"),
        ("executemany",),
    ),
    Question(
        (
            "How do I read a pyproject.toml config file using only the standard library, and must "
            "the file be opened in text or binary mode?"
        ),
        ("py:tomllib.load",),
        ("tomllib",),
    ),
    Question(
        (
            "How can I generate the same unique identifier every time for a given name, such as a "
            "URL, instead of a random one?"
        ),
        ("py:uuid.uuid5", "py:uuid.uuid3", "py:uuid"),
        ("uuid5", "uuid3"),
    ),
    Question(
        (
            "How do I break a command-line string into a list of arguments while keeping quoted "
            "parts together, the way a Unix shell would?"
        ),
        ("py:shlex.split", "py:shlex.shlex", "py:shlex"),
        ("shlex.split", "shlex"),
    ),
    Question(
        (
            "How do I find out the login name of the person running my script, in a way that works "
            "on Windows too?"
        ),
        ("py:getpass.getuser", "py:getpass"),
        ("getuser",),
    ),
    Question(
        (
            "How can I make my command-line tool's --help output automatically show each option's "
            "default value?"
        ),
        (
            "py:argparse.ArgumentDefaultsHelpFormatter",
            "py:argparse",
            "py:argparse.ArgumentDefaultsHelpFormatter._get_help_string",
        ),
        ("ArgumentDefaultsHelpFormatter",),
    ),
    Question(
        (
            "I'm letting users pass an output file on the command line; is there a ready-made "
            "converter that opens the given name as a file for me, with a mode and encoding I "
            "choose?"
        ),
        ("py:argparse.FileType", "py:argparse"),
        ("FileType",),
    ),
    Question(
        "Which values does an if statement treat as false?",
        ("topic:truth", "topic:booleans"),
        ("None", "empty"),
    ),
    Question(
        "Does `a or b` always evaluate to True or False, or can it give back something else?",
        ("topic:booleans", "topic:truth"),
        ("operand", "last evaluated"),
    ),
    Question(
        (
            "Can I write a range check like 0 <= x < 10 as a single expression, and is x evaluated "
            "twice?"
        ),
        ("topic:comparisons",),
        ("once",),
    ),
    Question(
        "Why does -2**2 give -4 instead of 4?",
        ("topic:power",),
        ("more tightly", "precedence"),
    ),
    Question(
        (
            "What type do I get when I divide two integers with a single slash, compared with a "
            "double slash?"
        ),
        ("topic:binary",),
        ("float",),
    ),
    Question(
        (
            "How do I throw a new error within an exception handler while keeping the original "
            "exception linked to it as its cause?"
        ),
        ("topic:raise",),
        ("from", "__cause__"),
    ),
    Question(
        (
            "I'm writing a class that does setup and cleanup around a block of code. How can its "
            "cleanup hook stop an exception raised inside the block from propagating?"
        ),
        ("topic:context-managers", "topic:with"),
        ("__exit__", "true"),
    ),
    Question(
        "When does the else block attached to a loop actually run, and what makes it get skipped?",
        ("topic:for", "topic:while", "topic:break"),
        ("break",),
    ),
    Question(
        (
            "Inside a nested function, how do I rebind a variable that belongs to the enclosing "
            "function instead of creating a new local one?"
        ),
        ("topic:nonlocal", "topic:naming"),
        ("nonlocal",),
    ),
    Question(
        "What happens to an attribute name that starts with two underscores inside a class body?",
        ("topic:atom-identifiers", "topic:id-classes"),
        ("mangl", "_Ham__spam", "class name"),
    ),
    Question(
        "Which special method gets called only when looking up an attribute the normal way fails?",
        ("topic:attribute-access", "topic:attribute-references"),
        ("__getattr__",),
    ),
    Question(
        (
            "When subclassing an immutable built-in type like int or str, which special method "
            "should I override to customize how instances are created?"
        ),
        ("topic:customization",),
        ("__new__",),
    ),
    Question(
        (
            "What should my operator-overloading method such as the addition hook return when it "
            "can't handle the type of the other operand?"
        ),
        ("topic:numeric-types", "topic:types"),
        ("NotImplemented",),
    ),
    Question(
        (
            "If a dictionary literal lists the same key twice with different values, which value is"
            " kept?"
        ),
        ("topic:dict", "topic:typesmapping"),
        ("last",),
    ),
    Question(
        (
            "What's the most aggressive way to lower-case strings for case-insensitive comparison, "
            "so that the German letter ß matches 'ss'?"
        ),
        ("topic:string-methods",),
        ("casefold",),
    ),
    Question(
        (
            "In a string template with {} placeholders, how do I output a literal curly brace "
            "character?"
        ),
        ("topic:formatstrings",),
        ("{{", "doubl"),
    ),
    Question(
        "Why is a number written as 0755 in my source code a syntax error in Python 3?",
        ("topic:integers",),
        ("leading zero", "octal"),
    ),
    Question(
        "If a generator function finishes by returning a value, where does that value end up?",
        ("topic:return",),
        ("StopIteration",),
    ),
    Question(
        (
            "Do my debug-time sanity checks (the ones that fail with an error when a condition "
            "isn't true) still run when Python is launched with optimization turned on?"
        ),
        ("topic:assert",),
        ("-O", "__debug__"),
    ),
    Question(
        "How do I write a tuple that holds exactly one element?",
        ("topic:exprlists",),
        ("trailing comma", "comma"),
    ),
)

HELD_OUT_2_QUESTIONS: tuple[Question, ...] = (
    Question(
        (
            "My class decorator fills in implementations for the methods subclasses are required to"
            " override, after the class already exists, but instantiating it still fails. How do I "
            "make Python recompute which required methods are still missing?"
        ),
        ("py:abc.update_abstractmethods",),
        ("update_abstractmethods",),
    ),
    Question(
        (
            "In asyncio, how do I make a fixed number of tasks all wait at a checkpoint until every"
            " one of them has arrived, and then release them together?"
        ),
        ("py:asyncio.Barrier",),
        ("Barrier",),
    ),
    Question(
        (
            "From an asyncio stream I need to consume a fixed-size 16-byte header, no more and no "
            "fewer bytes. Which method does that, and what gets raised if the peer closes the "
            "connection before everything arrives?"
        ),
        ("py:asyncio.StreamReader.readexactly",),
        (
            "readexactly",
            "IncompleteReadError",
        ),
    ),
    Question(
        (
            "From a different OS-level worker (not the one running the event loop), how do I hand a"
            " plain non-coroutine callback to the asyncio loop so it runs at the next opportunity, "
            "without race conditions?"
        ),
        ("py:asyncio.BaseEventLoop.call_soon_threadsafe",),
        ("call_soon_threadsafe",),
    ),
    Question(
        (
            "Using a thread or process pool, how do I schedule a single function call with some "
            "arguments and immediately get back an object that represents its pending result?"
        ),
        (
            "py:concurrent.futures.Executor.submit",
            "py:concurrent.futures.ThreadPoolExecutor.submit",
            "py:concurrent.futures.ProcessPoolExecutor.submit",
        ),
        ("submit",),
    ),
    Question(
        (
            "When applying a function over a long iterable with a pool executor, there is an option"
            " to batch the items into pieces. Does that batching option have any effect when the "
            "pool is thread-based?"
        ),
        ("py:concurrent.futures.Executor.map",),
        (
            "chunksize",
            "ThreadPoolExecutor",
        ),
    ),
    Question(
        (
            "How can I build a class with auto-generated __init__/__repr__ from field declarations "
            "at runtime, given just a class name and a list of field names, and what annotation is "
            "assumed when I don't give a field's type?"
        ),
        ("py:dataclasses.make_dataclass",),
        (
            "make_dataclass",
            "typing.Any",
        ),
    ),
    Question(
        (
            "Given a code object, how do I find which bytecode offsets begin each new source line, "
            "as (offset, line number) pairs?"
        ),
        ("py:dis.findlinestarts",),
        ("findlinestarts",),
    ),
    Question(
        (
            "For a set of named constants, which base class should I use if every constant must "
            "itself be a string value, so it can be passed directly wherever a str is expected?"
        ),
        ("py:enum.StrEnum",),
        ("StrEnum",),
    ),
    Question(
        (
            "Inside an Enum class body, how do I define a constant attribute that should stay a "
            "plain attribute instead of being turned into one of the enumeration's choices?"
        ),
        ("py:enum.nonmember",),
        ("nonmember",),
    ),
    Question(
        (
            "I want to turn the float 0.3 into an exact rational number. Which alternate "
            "constructor does that, and will the result be equal to 3/10?"
        ),
        (
            "py:fractions.Fraction.from_float",
            "py:fractions.Fraction",
        ),
        (
            "from_float",
            "Fraction",
        ),
    ),
    Question(
        (
            "My file names contain characters like '[' and '*' that shell-style wildcard matching "
            "treats specially. How can I make such a name match literally when searching the "
            "filesystem with wildcard patterns?"
        ),
        ("py:glob.escape",),
        ("escape",),
    ),
    Question(
        (
            "How do I gzip a bytes object entirely in memory with one function call, and what "
            "values can the level argument take?"
        ),
        ("py:gzip.compress",),
        (
            "compress",
            "0-9",
        ),
    ),
    Question(
        (
            "What's a quick way to get the k lowest items from a large iterable, optionally using a"
            " key function, without fully sorting it myself?"
        ),
        ("py:heapq.nsmallest",),
        ("nsmallest",),
    ),
    Question(
        (
            "In a subclass of the standard library's HTML parser, how can I retrieve the exact "
            "original source of the most recently seen opening element, e.g. '<a href=x class=y>', "
            "attributes and all?"
        ),
        ("py:html.parser.HTMLParser.get_starttag_text",),
        ("get_starttag_text",),
    ),
    Question(
        (
            "Given the iterator returned by calling a function that uses yield, how can I tell "
            "whether it hasn't started yet, is paused, is currently running, or has already "
            "finished?"
        ),
        ("py:inspect.getgeneratorstate",),
        (
            "getgeneratorstate",
            "GEN_SUSPENDED",
        ),
    ),
    Question(
        (
            "After binding call arguments to a function's signature, how do I make the resulting "
            "mapping also contain the fallback values declared for parameters the caller left out?"
        ),
        ("py:inspect.BoundArguments.apply_defaults",),
        ("apply_defaults",),
    ),
    Question(
        (
            "A function has been decorated several times with functools.wraps-style decorators. How"
            " do I get at the innermost original function by following the __wrapped__ chain?"
        ),
        ("py:inspect.unwrap",),
        ("unwrap",),
    ),
    Question(
        (
            "How do I generate all unordered selections of r items from a sequence where the same "
            "item may be picked more than once, e.g. ('A','A'), ('A','B') from 'ABC'?"
        ),
        ("py:itertools.combinations_with_replacement",),
        ("combinations_with_replacement",),
    ),
    Question(
        (
            "How can I split one iterator into several independent iterators that can each be "
            "consumed separately?"
        ),
        ("py:itertools.tee",),
        ("tee",),
    ),
    Question(
        (
            "How do I skip the leading items of an iterable as long as a condition holds, and then "
            "yield every remaining item after that point?"
        ),
        ("py:itertools.dropwhile",),
        ("dropwhile",),
    ),
    Question(
        (
            "How do I get the exact floor of the square root of a huge integer as an int, without "
            "going through floating point?"
        ),
        ("py:math.isqrt",),
        ("isqrt",),
    ),
    Question(
        (
            "Which math function gives x minus the nearest integer multiple of y (with ties going "
            "to an even multiple), as opposed to the % operator or fmod?"
        ),
        ("py:math.remainder",),
        ("remainder",),
    ),
    Question(
        (
            "I need ln(1 + x) for extremely small x, and computing it naively loses precision. What"
            " should I call instead?"
        ),
        ("py:math.log1p",),
        ("log1p",),
    ),
    Question(
        (
            "How do I delete an empty leaf directory and then also prune each parent directory that"
            " becomes empty as a result?"
        ),
        ("py:os.removedirs",),
        ("removedirs",),
    ),
    Question(
        (
            "Given several filesystem locations like '/usr/lib/a.so' and '/usr/local/bin/b', how do"
            " I compute the deepest parent folder they all share?"
        ),
        ("py:os.path.commonpath",),
        ("commonpath",),
    ),
    Question(
        (
            "For multithreaded code I need a thread-safe container that hands back the most "
            "recently inserted item first (stack order). Which class should I use?"
        ),
        ("py:queue.LifoQueue",),
        ("LifoQueue",),
    ),
    Question(
        (
            "After matching a regex that uses named captures like (?P<year>\\d+), how do I get all "
            "of them at once as a mapping keyed by name?"
        ),
        ("py:re.Match.groupdict",),
        ("groupdict",),
    ),
    Question(
        (
            "How do I lazily loop over every non-overlapping regex match in a string, getting match"
            " objects (with positions) instead of a list of strings?"
        ),
        (
            "py:re.finditer",
            "py:re.Pattern.finditer",
        ),
        ("finditer",),
    ),
    Question(
        "What's a cryptographically secure way to pick a random integer in the range 0 to n-1?",
        ("py:secrets.randbelow",),
        ("randbelow",),
    ),
    Question(
        (
            "How can I copy a file's permission bits and its access/modification timestamps onto "
            "another existing file without touching its contents or owner?"
        ),
        ("py:shutil.copystat",),
        ("copystat",),
    ),
    Question(
        (
            "If Python can't query the real console dimensions (for example when output is piped), "
            "what column and line count does the standard helper fall back to by default?"
        ),
        ("py:shutil.get_terminal_size",),
        (
            "80",
            "24",
        ),
    ),
    Question(
        (
            "When recursively copying a directory, how can I skip files whose names match wildcards"
            " such as '*.pyc' or 'tmp*'?"
        ),
        ("py:shutil.ignore_patterns",),
        ("ignore_patterns",),
    ),
    Question(
        (
            "How do I create two network endpoints that are already connected to each other, for "
            "talking between parts of the same program, with a Unix-domain family used by default "
            "where available?"
        ),
        ("py:socket.socketpair",),
        ("socketpair",),
    ),
    Question(
        (
            "How can I close a socket object while leaving its underlying OS file descriptor open "
            "so I can reuse the descriptor elsewhere?"
        ),
        ("py:socket.socket.detach",),
        ("detach",),
    ),
    Question(
        (
            "Is there a simple standard-library way to substitute $name-style placeholders in a "
            "string, similar to shell variables?"
        ),
        ("py:string.Template",),
        ("Template",),
    ),
    Question(
        (
            "How do I send some data to a child process's standard input, then read everything it "
            "wrote to stdout and stderr and wait for it to exit?"
        ),
        ("py:subprocess.Popen.communicate",),
        ("communicate",),
    ),
    Question(
        (
            "I ran a command without check=True and got a finished-process result object back. How "
            "can I turn a nonzero exit status into an exception after the fact?"
        ),
        ("py:subprocess.CompletedProcess.check_returncode",),
        (
            "check_returncode",
            "CalledProcessError",
        ),
    ),
    Question(
        (
            "How do I add a prefix such as '> ' to the start of every non-blank line in a "
            "multi-line string?"
        ),
        ("py:textwrap.indent",),
        ("indent",),
    ),
    Question(
        (
            "How do I turn a date string like '2024-03-15 14:30' into a time tuple, given a format "
            "such as '%Y-%m-%d %H:%M'?"
        ),
        ("py:time.strptime",),
        ("strptime",),
    ),
    Question(
        (
            "In the 9-field tuple returned by localtime(), is the year stored as an offset from "
            "1900 the way the C library's tm record does it?"
        ),
        ("py:time.struct_time",),
        (
            "actual year",
            "tm_year",
        ),
    ),
    Question(
        (
            "How do I parse TOML text that I already have in a Python str rather than in a binary "
            "file?"
        ),
        ("py:tomllib.loads",),
        ("loads",),
    ),
    Question(
        (
            "How can I drop the references to local variables kept alive by each stack level of a "
            "traceback object, so that large objects can be freed?"
        ),
        ("py:traceback.clear_frames",),
        ("clear_frames",),
    ),
    Question(
        (
            "How can I snapshot a caught error, with its stack, into an intermediate object that "
            "keeps no references to the original but can still be fully rendered or printed later?"
        ),
        ("py:traceback.TracebackException",),
        ("TracebackException",),
    ),
    Question(
        (
            "How do I declare a distinct named wrapper like OrderId that static checkers treat as a"
            " special kind of int (not interchangeable with plain ints), while at runtime it costs "
            "almost nothing?"
        ),
        ("py:typing.NewType",),
        ("NewType",),
    ),
    Question(
        (
            "In a match statement over a union type, what can I call in the catch-all branch so the"
            " type checker reports an error if that branch could ever be reached?"
        ),
        ("py:typing.assert_never",),
        ("assert_never",),
    ),
    Question(
        (
            "How do I make mypy report what it inferred for a particular variable, and what does "
            "that helper call do if the code is actually run?"
        ),
        ("py:typing.reveal_type",),
        ("reveal_type",),
    ),
    Question(
        (
            "How do I get this machine's hardware (MAC) address as an integer, and what does Python"
            " use if it cannot determine the real one?"
        ),
        ("py:uuid.getnode",),
        (
            "getnode",
            "48-bit",
        ),
    ),
    Question(
        (
            "A plain non-owning reference to a bound callable such as obj.handler dies immediately "
            "because the bound object is temporary. What should I use instead?"
        ),
        ("py:weakref.WeakMethod",),
        ("WeakMethod",),
    ),
    Question(
        (
            "What error is raised when I ask for an IANA tz database key that doesn't exist on the "
            "system?"
        ),
        ("py:zoneinfo.ZoneInfoNotFoundError",),
        ("ZoneInfoNotFoundError",),
    ),
    Question(
        (
            "The intro paragraph shown at the top of my command-line tool's usage screen has line "
            "breaks and indentation I laid out by hand, but the parser reflows it. Which class can "
            "I hand to the parser so that intro paragraph keeps its original layout?"
        ),
        ("py:argparse.RawDescriptionHelpFormatter",),
        ("RawDescriptionHelpFormatter",),
    ),
    Question(
        (
            "My custom converter for a command-line option receives a string it can't turn into the"
            " value I need. Which exception class should the converter raise so the parser reports "
            "a clean message?"
        ),
        ("py:argparse.ArgumentTypeError",),
        ("ArgumentTypeError",),
    ),
    Question(
        (
            "Users keep typing the digits 0 and 1 in codes written with the RFC 3548 32-character "
            "alphabet. When decoding such text, is there an option that maps those digits to "
            "letters (for example 1 to L)?"
        ),
        ("py:base64.b32decode",),
        ("map01",),
    ),
    Question(
        (
            "How do I turn base64 text that uses '-' and '_' in place of '+' and '/' (for example "
            "tokens copied out of a web address) back into raw bytes?"
        ),
        ("py:base64.urlsafe_b64decode",),
        ("urlsafe_b64decode",),
    ),
    Question(
        (
            "I keep a tally of how often each word appears. How do I lower those tallies using "
            "another list of words, letting values drop below zero instead of disappearing?"
        ),
        ("py:collections.Counter.subtract",),
        ("subtract",),
    ),
    Question(
        (
            "I use a layered lookup over several dictionaries (like nested scopes). How do I put a "
            "fresh, empty dictionary in front of the existing layers and get a new view back?"
        ),
        ("py:collections.ChainMap.new_child",),
        ("new_child",),
    ),
    Question(
        (
            "How do I shift every element of a double-ended queue n places to the right (or to the "
            "left for a negative n) in place?"
        ),
        ("py:collections.deque.rotate",),
        ("rotate",),
    ),
    Question(
        (
            "Is there a with-block helper that switches the process into another folder and goes "
            "back to the previous one on exit? Is it safe to use from multiple threads?"
        ),
        ("py:contextlib.chdir",),
        (
            "chdir",
            "thread-safe",
        ),
    ),
    Question(
        (
            "I'm using an object that has a close() method but doesn't support the with statement. "
            "What wrapper lets me use it in a with block so close() is guaranteed to run at the "
            "end?"
        ),
        ("py:contextlib.closing",),
        ("closing",),
    ),
    Question(
        (
            "Which predefined CSV format class matches files saved by Microsoft's spreadsheet "
            "program where columns are split by the \\t character instead of commas?"
        ),
        ("py:csv.excel_tab",),
        ("excel_tab",),
    ),
    Question(
        (
            "I have a year, a week-of-year number and a day-of-week number from the international "
            "standard week numbering. How do I turn those three integers into a date object?"
        ),
        ("py:datetime.date.fromisocalendar",),
        ("fromisocalendar",),
    ),
    Question(
        "Which date method numbers the days so that Monday is 0 and Sunday is 6?",
        ("py:datetime.date.weekday",),
        ("weekday",),
    ),
    Question(
        (
            "If I create a fixed-offset zone object without giving it a name, what does asking it "
            "for its zone name return?"
        ),
        ("py:datetime.timezone.tzname",),
        (
            "tzname",
            "UTC",
        ),
    ),
    Question(
        (
            "I'm composing outgoing email and need a unique, standards-compliant value for the "
            "message identifier header. Which helper produces it, and what does it put after the @ "
            "by default?"
        ),
        ("py:email.utils.make_msgid",),
        (
            "make_msgid",
            "hostname",
        ),
    ),
    Question(
        (
            "From several raw To and Cc header values, how do I extract a list of (display name, "
            "address) pairs covering all of them?"
        ),
        ("py:email.utils.getaddresses",),
        ("getaddresses",),
    ),
    Question(
        (
            "How do I check a file name against a shell-style wildcard pattern so that upper/lower "
            "case always matters, regardless of the operating system's conventions?"
        ),
        (
            "py:fnmatch.fnmatchcase",
            "py:fnmatch",
            "py:fnmatch.fnmatch",
        ),
        ("fnmatchcase",),
    ),
    Question(
        (
            "Inside a class, I want one method to run different implementations depending on the "
            "type of the first argument after self. Which decorator supports that?"
        ),
        ("py:functools.singledispatchmethod",),
        ("singledispatchmethod",),
    ),
    Question(
        (
            "Is there a way to define a class attribute that behaves like an existing method with "
            "some of its arguments already filled in?"
        ),
        ("py:functools.partialmethod",),
        ("partialmethod",),
    ),
    Question(
        (
            "Ordering a dependency graph failed because some nodes depend on each other in a loop. "
            "How do I get the list of nodes forming that loop from the raised exception?"
        ),
        ("py:graphlib.CycleError",),
        (
            "CycleError",
            "args",
        ),
    ),
    Question(
        (
            "When processing a dependency graph in parallel, how do I tell the sorter that nodes it"
            " handed me are finished, so that the nodes depending on them become available?"
        ),
        (
            "py:graphlib.TopologicalSorter.done",
            "py:graphlib.TopologicalSorter.get_ready",
        ),
        ("done",),
    ),
    Question(
        (
            "What's the quickest one-shot way to compute a keyed-hash authentication code for a "
            "message, without creating and updating an object?"
        ),
        ("py:hmac.digest",),
        ("hmac.digest",),
    ),
    Question(
        (
            "I changed a module's source file while my interactive session is still running. How do"
            " I re-execute that already-imported module to pick up the edits?"
        ),
        ("py:importlib.reload",),
        ("reload",),
    ),
    Question(
        (
            "I'm writing a library function whose codec argument defaults to None. Which helper "
            "picks the default codec for reading and writing strings (locale or UTF-8, depending on"
            " UTF-8 mode) and can emit a warning when no codec was given?"
        ),
        ("py:io.text_encoding",),
        ("text_encoding",),
    ),
    Question(
        (
            "When parsing malformed JSON fails, which attributes of the raised exception tell me "
            "the line and column where it went wrong?"
        ),
        ("py:json.JSONDecodeError",),
        (
            "lineno",
            "colno",
        ),
    ),
    Question(
        (
            "To make the JSON serializer handle my own objects (for example arbitrary iterators), "
            "which method do I override in a subclass of the encoder class?"
        ),
        ("py:json.JSONEncoder.default",),
        ("default",),
    ),
    Question(
        (
            "With one call, how do I silence every log message at a given severity and below across"
            " the whole program?"
        ),
        ("py:logging.disable",),
        ("disable",),
    ),
    Question(
        (
            "I have a logger named after my package. How do I obtain a logger nested beneath it, "
            "e.g. 'abc.def.ghi' from 'abc', without spelling out the full dotted name?"
        ),
        ("py:logging.Logger.getChild",),
        ("getChild",),
    ),
    Question(
        (
            "I need a callable that, given an object, invokes a particular member function on it by"
            " name with preset arguments, e.g. to use as a sort key. What does the operator module "
            "offer?"
        ),
        ("py:operator.methodcaller",),
        ("methodcaller",),
    ),
    Question(
        (
            "Using a path object, how do I move a file to a new name so that an existing file at "
            "the destination gets overwritten?"
        ),
        ("py:pathlib.Path.replace",),
        ("replace",),
    ),
    Question(
        (
            "Given a path object, how do I change the file's base name while keeping its extension,"
            " e.g. report.txt to summary.txt?"
        ),
        ("py:pathlib.PurePath.with_stem",),
        ("with_stem",),
    ),
    Question(
        (
            "Which function produces a repr-style string that won't break on data structures that "
            "contain themselves?"
        ),
        (
            "py:pprint.saferepr",
            "py:pprint",
        ),
        ("saferepr",),
    ),
    Question(
        (
            "I want random numbers drawn from the OS's own entropy source (e.g. /dev/urandom) "
            "instead of the default pseudo-random generator. Which class should I instantiate?"
        ),
        ("py:random.SystemRandom",),
        ("SystemRandom",),
    ),
    Question(
        (
            "I need random floats between a lower and an upper bound that cluster around a chosen "
            "peak value in between. Which distribution function should I call?"
        ),
        (
            "py:random.triangular",
            "py:random.Random.triangular",
        ),
        ("triangular",),
    ),
    Question(
        (
            "With the standard event scheduler, how do I queue an action for a specific point in "
            "time rather than after a relative delay?"
        ),
        ("py:sched.scheduler.enterabs",),
        ("enterabs",),
    ),
    Question(
        (
            "Given a list of command arguments, how do I produce one shell-escaped command-line "
            "string from them (the reverse of splitting)?"
        ),
        ("py:shlex.join",),
        ("join",),
    ),
    Question(
        (
            "How can I get the set of signal numbers that are actually usable on the platform my "
            "program runs on?"
        ),
        ("py:signal.valid_signals",),
        ("valid_signals",),
    ),
    Question(
        (
            "How do I run a string holding several SQL statements separated by semicolons in one "
            "call with Python's built-in SQLite module?"
        ),
        (
            "py:sqlite3.Connection.executescript",
            "py:sqlite3.Cursor.executescript",
        ),
        ("executescript",),
    ),
    Question(
        (
            "If I shut down my SQLite connection object without committing first, are the pending "
            "changes saved automatically?"
        ),
        ("py:sqlite3.Connection.close",),
        (
            "close",
            "not committed",
        ),
    ),
    Question(
        (
            "Which function fits a straight line through paired x/y data by minimizing squared "
            "errors and gives back its slope and intercept?"
        ),
        ("py:statistics.linear_regression",),
        ("linear_regression",),
    ),
    Question(
        (
            "For a dataset with an even number of points, how do I pick the lesser of the two "
            "centre values rather than interpolating between them?"
        ),
        ("py:statistics.median_low",),
        ("median_low",),
    ),
    Question(
        (
            "Why is the tempfile function that just hands back an unused file name, without "
            "creating the file, considered dangerous?"
        ),
        (
            "py:tempfile.mktemp",
            "py:tempfile",
        ),
        ("mktemp",),
    ),
    Question(
        (
            "How do I make a fixed group of threads each pause at a sync point until all of them "
            "have reached it, and then let them all continue together?"
        ),
        (
            "py:threading.Barrier",
            "py:threading.Barrier.wait",
        ),
        ("Barrier",),
    ),
    Question(
        (
            "How can I have a function called once in the background after, say, 30 seconds, with "
            "the option of calling it off before it runs?"
        ),
        ("py:threading.Timer",),
        ("Timer",),
    ),
    Question(
        (
            "My benchmarked snippet raised an exception; how do I display a traceback that shows "
            "the lines of the timed source code?"
        ),
        ("py:timeit.Timer.print_exc",),
        ("print_exc",),
    ),
    Question(
        "What is a right bit-shift by n positions equivalent to, arithmetically, in Python?",
        ("topic:shifting",),
        ("floor division",),
    ),
    Question(
        (
            "In an arithmetic expression mixing an int and a float (no complex numbers involved), "
            "what common type are both operands converted to?"
        ),
        ("topic:conversions",),
        ("floating point",),
    ),
    Question(
        "At runtime, what class is the object produced by an annotation written as int | str?",
        ("py:types.UnionType",),
        ("UnionType",),
    ),
    Question(
        "How do I split a URL into the part before '#' and the anchor text after it?",
        ("py:urllib.parse.urldefrag",),
        ("urldefrag",),
    ),
    Question(
        "How do I wipe out every warning filter so that none remain in effect?",
        ("py:warnings.resetwarnings",),
        ("resetwarnings",),
    ),
    Question(
        (
            "When stream-decoding zlib data that was produced with a preset dictionary, what must I"
            " supply to the decoder object?"
        ),
        ("py:zlib.decompressobj",),
        ("zdict",),
    ),
)

QUESTION_SETS = ("tuned", "held-out", "held-out-2", "all")
"""`--questions` of the benches: the first set, a held-out set, or every set."""


def add_question_set_argument(parser: argparse.ArgumentParser, flag: str = "--questions") -> None:
    """The benches' option choosing a question set (`QUESTION_SETS`; default the first 48)."""
    parser.add_argument(
        flag,
        choices=QUESTION_SETS,
        default="tuned",
        help="the first 48 questions, the 150 held out, the 100 of session 22 or all "
        "(bench/answer_quality_questions.py)",
    )


def set_of(key: str) -> str:
    """The set a `question_set` key belongs to: `tuned`, `held-out` or `held-out-2`."""
    return {"h": "held-out", "n": "held-out-2"}.get(key[:1], "tuned")


def question_set(name: str) -> dict[str, Question]:
    """The questions of a set by stable key: `q01` … of the first set, `h001` … held out,
    `n001` … of the second held-out set."""
    if name not in QUESTION_SETS:
        raise ValueError(f"unknown question set {name!r}: one of {', '.join(QUESTION_SETS)}")
    out: dict[str, Question] = {}
    if name in ("tuned", "all"):
        out.update((f"q{i:02d}", q) for i, q in enumerate(QUESTIONS, start=1))
    if name in ("held-out", "all"):
        out.update((f"h{i:03d}", q) for i, q in enumerate(HELD_OUT_QUESTIONS, start=1))
    if name in ("held-out-2", "all"):
        out.update((f"n{i:03d}", q) for i, q in enumerate(HELD_OUT_2_QUESTIONS, start=1))
    return out
