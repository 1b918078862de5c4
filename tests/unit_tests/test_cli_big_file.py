"""One big file: ``s2b index`` holds bounded memory and speaks in every phase; any terminal size.

The memory test runs ``s2b index`` in a fresh process, as a user does, and
reads that process's own peak RSS (``ru_maxrss`` from ``os.wait4``). Why a
bound on the whole process and not ``tracemalloc`` in the test's process:
most of what one big file cost was outside Python's allocator (FAISS's
storage, grown by doubling, and SQLite's copies of a bound text), and a
bound on the process catches a cost wherever it comes back. Nothing is timed.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore

from langchain_s2b.cli import progress
from langchain_s2b.cli.commands import main
from langchain_s2b.core import lifecycle
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.sqlite import Database, SQLiteDocStore, SQLiteFaissIndex
from langchain_s2b.store.vectors.faiss_index import FaissIndex

ROOT = Path(__file__).resolve().parents[2]
IMPORTS = (
    "import langchain_s2b.cli.actions, langchain_s2b.cli.indexer, langchain_s2b.cli.index_dir, "
    "langchain_s2b.store.sqlite.sqlite_faiss, langchain_s2b.embeddings"
)
"""What ``s2b index`` has imported before it reads a file."""
RUN = "import sys; from langchain_s2b.cli.commands import main; sys.exit(main(sys.argv[1:]))"
MB = 10**6
SIZE = 4 * MB
"""The big file (text of ~25,000 sentences; a size the old code needed ~90x of)."""
GROWTH = 30
"""Peak RSS above a bare interpreter with the imports, per byte of text. d731aa7 took 86x
on 10 MB (`--embedding fake`); this code ~15x. The FAISS index alone is ~6x (256-d)."""


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("S2B_EMBEDDING", None)
    return env


def _prose(size: int, seed: int = 5) -> str:
    """``size`` characters of paragraphs of distinct sentences (a fixed seed: the same text)."""
    rng = np.random.default_rng(seed)
    words = np.array([f"{a}{b}" for a in ("ka", "lo", "mire", "tan", "usk") for b in "aeiou"] * 4)
    words = np.array([w + s for w, s in zip(words, "bcdfghjklmnpqrstvwxz" * 5, strict=False)])
    parts: list[str] = []
    total = 0
    n = 0
    while total < size:
        sentences = []
        for _ in range(int(rng.integers(3, 7))):
            picked = words[rng.integers(0, len(words), int(rng.integers(8, 22)))]
            n += 1
            sentences.append(f"Line {n} " + " ".join(picked.tolist()) + ".")
        paragraph = " ".join(sentences)
        parts.append(paragraph)
        total += len(paragraph) + 2
    return "\n\n".join(parts)[:size]


def _peak_mb(argv: list[str]) -> tuple[int, float]:
    """``python argv`` in a fresh process: its exit code and its own peak RSS in MB."""
    proc = subprocess.Popen(
        [sys.executable, *argv],
        env=_env(),
        cwd="/",  # ``python -c`` puts its working directory first on sys.path
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024


def test_one_big_file_needs_at_most_thirty_times_its_size(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text(_prose(SIZE), encoding="utf-8")
    code, bare = _peak_mb(["-c", IMPORTS])
    assert code == 0
    argv = ["-c", RUN, "index", str(big), "--store", str(tmp_path / "s"), "--embedding", "fake"]
    code, peak = _peak_mb(argv)
    assert code == 0
    growth = peak - bare
    assert growth <= GROWTH * SIZE / MB, f"peak {peak:.0f} MB, {growth / (SIZE / MB):.0f}x"


# Progress -----------------------------------------------------------------------------


def _wait_for(stream_text: callable, lines: int) -> None:  # type: ignore[valid-type]
    deadline = time.monotonic() + 60
    while stream_text().count("\n") < lines and time.monotonic() < deadline:
        time.sleep(0.01)


class _Stream:
    """A text stream (not a terminal) whose writes may come from another thread."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        with self.lock:
            self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        """Nothing buffered."""

    def isatty(self) -> bool:
        return False

    def text(self) -> str:
        with self.lock:
            return "".join(self.parts)


def test_a_step_that_reports_nothing_still_prints_its_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One large file split, or the FAISS file written: lines come while the step runs."""
    monkeypatch.setattr(progress, "EVERY", 0.01)
    stream = _Stream()
    bar = progress.bar(1, "file", "splitting", stream)  # type: ignore[arg-type]
    with progress.ticking(bar):
        _wait_for(stream.text, 2)  # the step: blocked until two lines were printed
    bar.close()
    lines = [line.rsplit(", ", 1)[0] for line in stream.text().splitlines()]
    assert lines[:2] == ["s2b: splitting: 0/1 file(s) (0%)"] * 2


def _drawn_on_a_pty(tmp_path: Path, rows: int, columns: int) -> str:
    """What ``s2b index`` draws on a pseudo-terminal that reports ``rows`` x ``columns``."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("One sentence here. Another one there.\n\nA second paragraph.\n")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    argv = ["-c", RUN, "index", str(folder), "--store", str(tmp_path / "s"), "--embedding", "fake"]
    proc = subprocess.Popen(
        [sys.executable, *argv],
        env=_env(),
        cwd="/",  # ``python -c`` puts its working directory first on sys.path
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    assert proc.wait() == 0
    return drawn.decode("utf-8", "replace")


@pytest.mark.parametrize(
    ("rows", "columns"),
    [(0, 0), (24, 0), (24, 65535)],
    ids=["size-never-set", "no-columns", "absurd-width"],
)
def test_a_terminal_of_no_size_or_an_absurd_one_gets_bars_80_columns_wide(
    tmp_path: Path, rows: int, columns: int
) -> None:
    drawn = _drawn_on_a_pty(tmp_path, rows, columns)
    frames = [frame for frame in drawn.split("\r") if frame.startswith("embedding:")]
    assert frames  # the bar was drawn
    assert {len(frame) for frame in frames} == {80}
    assert frames[-1].startswith("embedding: 100%|")


# Writing a source in batches ------------------------------------------------------------


ARTICLE = _prose(6_000, seed=9)
"""One source of ~40 sentences: with batches of 5 nodes, its write takes many requests."""


def _doc_store(tmp_path: Path) -> tuple[Database, SQLiteDocStore]:
    db = Database(tmp_path / "x.sqlite")
    db.create_tables()
    return db, SQLiteDocStore(db)


def test_a_source_written_in_batches_is_stored_once_and_comes_back_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One transaction, many ``Put`` batches: every span is a slice of the text stored once."""
    monkeypatch.setattr(lifecycle, "WRITE_BATCH", 5)
    docs = [Document(page_content=ARTICLE, metadata={"title": "t"}, id="big")]
    emb = HashingEmbeddings()
    memory = SmallToBigRetriever(
        vectorstore=FaissIndex(emb), docstore=InMemoryStore(), mode="multilevel"
    )
    memory.add_documents(docs)
    db, store = _doc_store(tmp_path)
    on_disk = SmallToBigRetriever(vectorstore=FaissIndex(emb), docstore=store, mode="multilevel")
    with db.write():
        on_disk.add_documents(docs)
    keys = sorted(memory.docstore.yield_keys())
    assert len(keys) > 40
    assert sorted(store.yield_keys()) == keys
    assert store.mget(keys) == memory.docstore.mget(keys)
    assert db.conn.execute("SELECT key FROM docs ORDER BY key").fetchall() == [
        ("big/doc/0",),
        ("big/manifest",),
    ]  # every other node is a span of the doc node's text


def _source() -> tuple[Document, Document]:
    source = Document(page_content="Hello world.", metadata={"source_id": "s"}, id="s/doc/0")
    span = {"source_id": "s", "source_key": "s", "level": "sentence", "split_id": 0}
    span |= {"start": 0, "end": 5, "split_idx_start": 0}
    return source, Document(page_content="Hello", metadata=span, id="s/sentence/0")


def test_a_source_that_was_rolled_back_or_deleted_is_no_span_s_source(tmp_path: Path) -> None:
    """The docstore knows the sources it wrote in the open transaction, and only those."""
    db, store = _doc_store(tmp_path)
    source, sliced = _source()

    def interrupted() -> None:
        with db.write():
            store.mset([("s/doc/0", source)])
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    store.mset([("s/sentence/0", sliced)])  # its source was rolled back: kept whole
    assert store.mget(["s/sentence/0", "s/doc/0"]) == [sliced, None]
    assert db.conn.execute("SELECT count(*) FROM nodes").fetchone() == (0,)
    with db.write():
        store.mset([("s/doc/0", source)])
        store.mdelete(["s/doc/0"])
        store.mset([("s/sentence/0", sliced)])  # its source was deleted: kept whole
    assert store.mget(["s/sentence/0", "s/doc/0"]) == [sliced, None]
    with db.write():
        store.mset([("s/doc/0", source)])
        store.mset([("s/sentence/0", sliced)])  # a later batch: a span of the source
    assert store.mget(["s/sentence/0", "s/doc/0"]) == [sliced, source]
    assert db.conn.execute("SELECT key FROM nodes").fetchall() == [("s/sentence/0",)]


@pytest.mark.parametrize("at", ["nodes", "leaves"])
def test_ctrl_c_in_a_batch_of_a_big_file_leaves_the_store_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    """A big file's write is one transaction however many batches: all of it, or nothing.

    The vectors embedded before the interruption are kept (the next run embeds none again).
    """
    monkeypatch.setattr(lifecycle, "WRITE_BATCH", 5)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("A first file. It stays.\n")
    store = tmp_path / "s"
    assert main(["index", str(folder), "--store", str(store), "--embedding", "fake"]) == 0
    before = _state(store)
    (folder / "big.txt").write_text(ARTICLE)
    (folder / "a.txt").write_text("A first file. It changed.\n")
    calls = {"n": 0}
    target = SQLiteDocStore.mset if at == "nodes" else SQLiteFaissIndex.add_texts
    owner = SQLiteDocStore if at == "nodes" else SQLiteFaissIndex

    def interrupted(self: object, *args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 3:  # a batch in the middle of the big file
            raise KeyboardInterrupt
        return target(self, *args, **kwargs)  # type: ignore[operator]

    monkeypatch.setattr(owner, "mset" if at == "nodes" else "add_texts", interrupted)
    code = main(["index", str(folder), "--store", str(store), "--embedding", "fake"])
    monkeypatch.undo()
    assert code == 130  # "s2b: interrupted; what was embedded and committed is kept"
    assert calls["n"] == 3
    after = _state(store)
    assert after["rows"] == before["rows"]  # nothing of either file's new version
    assert after["vectors"] > before["vectors"]  # but what was embedded stays
    assert main(["verify", "--store", str(store)]) == 0


def _state(store: Path) -> dict[str, object]:
    db = Database(store / "s2b.sqlite")
    try:
        rows = {
            table: db.conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("docs", "nodes", "children", "files")
        }
        rows["lexical"] = db.conn.execute("SELECT rowid, terms, key FROM lexical").fetchall()
        vectors = db.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    finally:
        db.close()
    return {"rows": rows, "vectors": vectors}


class _Clock:
    """A fake ``time`` for :mod:`langchain_s2b.cli.progress`: it moves only as work is done."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


SPLIT_SECONDS = {"SectionSplitter": 0.43, "BlockSplitter": 1.35, "SentenceSplitter": 0.67}
"""Seconds each level's splitter took over 12 MB of text (one file: 2,817 sections, 14,707
paragraphs, 69,559 sentences; measured on the 2-core machine of the benchmarks)."""
BIG = 52 * MB
"""The file the test's 300 kB stands for (a section level over it: one call, ~1.9 s)."""
_SHOWN = re.compile(r"^s2b: (.+): (\d+)/(\d+) \S+ \(\d+%\), (\d+):(\d\d) elapsed$")


def test_every_phase_of_one_big_file_moves_its_count_every_few_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow model, splitter and disk on one 300 kB file: no count stands for long.

    The work costs fake seconds (a batch embedded 0.5 s, a batch of nodes or
    chunks written 1 s, a split what it costs on 52 MB: :data:`SPLIT_SECONDS`
    scaled), and progress reads that clock
    and prints a line every :data:`~.progress.EVERY` (5) seconds of it. In every
    phase the shown count must move at least every 6 seconds (the first line
    of a phase is counted from when its step began: its elapsed time). Nothing is
    timed for real.
    """
    from langchain_s2b.core import tree

    clock = _Clock()
    monkeypatch.setattr(progress, "time", clock)

    def costs(seconds: Callable[..., float], real: Callable[..., Any]) -> Callable[..., Any]:
        def slow(*args: Any, **kwargs: Any) -> Any:
            clock.now += seconds(*args)
            return real(*args, **kwargs)

        return slow

    def split_cost(splitter: object, text: str) -> float:
        return len(text) * SPLIT_SECONDS[type(splitter).__name__] / (12 * MB) * BIG / 300_000

    monkeypatch.setattr(tree, "split_spans", costs(split_cost, tree.split_spans))
    monkeypatch.setattr(
        HashingEmbeddings,
        "embed_documents",
        costs(lambda *_: 0.5, HashingEmbeddings.embed_documents),
    )
    monkeypatch.setattr(SQLiteDocStore, "mset", costs(lambda *_: 1.0, SQLiteDocStore.mset))
    monkeypatch.setattr(SQLiteFaissIndex, "_add", costs(lambda *_: 1.0, SQLiteFaissIndex._add))
    monkeypatch.setattr(lifecycle, "WRITE_BATCH", 256)  # batches of a large file, at this size
    big = tmp_path / "big.txt"
    big.write_text(_prose(300_000), encoding="utf-8")
    stream = _Stream()
    monkeypatch.setattr(sys, "stderr", stream)
    assert main(["index", str(big), "--store", str(tmp_path / "s"), "--embedding", "fake"]) == 0
    shown: dict[str, list[tuple[int, int]]] = {}  # phase -> (elapsed seconds, count) per line
    for line in stream.text().splitlines():
        found = _SHOWN.match(line)
        assert found is not None, line
        phase, count, _, minutes, seconds = found.groups()
        shown.setdefault(phase, []).append((int(minutes) * 60 + int(seconds), int(count)))
    assert list(shown) == [
        "splitting",
        "embedding",
        "writing 1/3 (splitting)",
        "writing 2/3 (text)",
        "writing 3/3 (vectors)",
    ]
    still = {}
    for phase, lines in shown.items():
        moved = [0] + [t for i, (t, n) in enumerate(lines) if i == 0 or n != lines[i - 1][1]]
        still[phase] = max(b - a for a, b in itertools.pairwise(moved))
        assert len(lines) >= 2, (phase, lines)  # the phase lasted long enough to be seen
    assert all(seconds <= 6 for seconds in still.values()), still
