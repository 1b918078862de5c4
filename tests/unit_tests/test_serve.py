"""``s2b serve`` without a client: the live store, the tools' pure parts, the command line.

The real clients (stdio, HTTP, a LangChain agent) are in ``test_serve_clients.py``.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from mcp.types import CallToolResult
from pydantic import BaseModel, ValidationError

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import serve
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.live import Holdings, LiveStore, commit_stamp
from langchain_s2b.core.budget import TokenCounter, approximate_tokens, fitting_prefix
from langchain_s2b.core.filters import check_dict_filter, matches_filter
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.evaluation.scoring import whitespace_tokens
from langchain_s2b.store.sqlite import Database

NORMANS = (
    "# Normans\n\nThe Normans gave their name to Normandy. Their leader Rollo swore fealty "
    "to King Charles.\n\nNorman mercenaries served in Italy.\n"
)
STEAM = "A steam engine uses steam as its working fluid. James Watt added a separate condenser.\n"
WILLIAM = "Duke William of Normandy conquered England in 1066. He was crowned at Westminster.\n"
OPTIONS = {"mode": "parent", "k": 1}
TIMEOUT = 120


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "normans.md").write_text(NORMANS)
    (root / "steam.txt").write_text(STEAM)
    return root


def _index(corpus: Path, store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(corpus), "--store", str(store)]) == 0
    capsys.readouterr()


@pytest.fixture
def store(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    target = tmp_path / "store"
    _index(corpus, target, capsys)
    return target


def _top(live: LiveStore, query: str) -> tuple[str, int, int, str]:
    (doc,) = live.search(query, OPTIONS)
    meta = doc.metadata
    return meta["source_id"], meta["start"], meta["end"], doc.page_content


# The live store ------------------------------------------------------------------------


class TestLiveStore:
    def test_builds_its_index_once_per_commit_and_sees_each_commit(
        self, store: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        live = LiveStore(store)
        try:
            steam = (str(corpus / "steam.txt"), 0, len(STEAM), STEAM)
            assert _top(live, "steam condenser Watt") == steam
            assert _top(live, "steam engine fluid") == steam
            assert live.restores == 1  # no commit in between: the same index
            (corpus / "william.txt").write_text(WILLIAM)
            _index(corpus, store, capsys)  # another connection commits
            william = (str(corpus / "william.txt"), 0, len(WILLIAM), WILLIAM)
            assert _top(live, "Duke William conquered England") == william
            restores = live.restores
            assert _top(live, "Duke William conquered England") == william
            assert live.restores == restores  # again none in between
            assert live.holdings() == Holdings(
                files=3, documents=3, chunks=8, folder=str(corpus), embedding="fake"
            )
        finally:
            live.close()

    def test_never_waits_for_a_writer_and_sees_its_commit_whole(self, store: Path) -> None:
        live = LiveStore(store)
        writer = Database(store / "s2b.sqlite", timeout=0.1)
        try:
            before = live.search("steam condenser Watt", OPTIONS)
            writer.conn.execute("BEGIN IMMEDIATE")  # a writer in the middle of its transaction
            try:
                writer.conn.execute("DELETE FROM children")
                writer.conn.execute("DELETE FROM nodes")
                # a call answers at once, from the last commit (WAL: a reader never waits)
                assert live.search("steam condenser Watt", OPTIONS) == before
            finally:
                writer.conn.execute("ROLLBACK")
            assert live.search("steam condenser Watt", OPTIONS) == before
            with writer.write() as conn:  # now committed: the next call sees it
                conn.execute("DELETE FROM children")
            assert live.search("steam condenser Watt", OPTIONS) == []
        finally:
            writer.close()
            live.close()

    def test_a_store_that_appears_later_or_is_replaced_is_opened_again(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "later"
        live = LiveStore(store)
        try:
            with pytest.raises(UserError) as missing:
                live.search("steam", OPTIONS)
            assert str(missing.value) == (
                f"no index at --store {store} (run: s2b index PATH... --store {store})"
            )
            _index(corpus, store, capsys)
            assert _top(live, "steam condenser Watt")[0] == str(corpus / "steam.txt")
            shutil.rmtree(store)
            other = tmp_path / "other"
            other.mkdir()
            (other / "william.txt").write_text(WILLIAM)
            _index(other, store, capsys)
            assert _top(live, "steam condenser Watt")[0] == str(other / "william.txt")
            assert live.holdings().files == 1
        finally:
            live.close()

    def test_another_embedding_and_a_damaged_store_are_one_line(self, store: Path) -> None:
        with pytest.raises(UserError) as other:
            LiveStore(store, "local:e5").search("steam", OPTIONS)
        assert str(other.value) == (
            f"{store} was indexed with embedding 'fake', not 'local:e5'; "
            "query it with --embedding fake (or none)"
        )
        live = LiveStore(store)
        try:
            live.search("steam", OPTIONS)
            with sqlite3.connect(store / "s2b.sqlite") as conn:
                conn.execute("DELETE FROM nodes WHERE key LIKE '%/section/%'")
            with pytest.raises(UserError) as damaged:
                live.search("steam condenser", OPTIONS)
            assert str(damaged.value).startswith(f"the index in {store} is damaged (node '")
            assert str(damaged.value).endswith(f"run: s2b verify --repair --store {store}")
        finally:
            live.close()

    def test_read_returns_a_source_of_the_index_only(self, store: Path, corpus: Path) -> None:
        live = LiveStore(store)
        try:
            doc = live.read(str(corpus / "normans.md"))
            assert (doc.page_content, doc.metadata["title"]) == (NORMANS, "normans")
            for outside in ("/etc/passwd", str(corpus), str(store / "s2b.sqlite")):
                with pytest.raises(UserError, match="is not a source in the index"):
                    live.read(outside)
        finally:
            live.close()

    def test_a_jsonl_row_shared_by_two_files_counts_once_as_in_s2b_list(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        corpus = tmp_path / "rows"
        corpus.mkdir()
        shared = json.dumps({"id": "rollo", "text": "Rollo swore fealty to King Charles."})
        (corpus / "a.jsonl").write_text(shared + "\n")
        other = json.dumps({"id": "watt", "text": "James Watt added a condenser."})
        (corpus / "b.jsonl").write_text(f"{shared}\n{other}\n")
        store = tmp_path / "store"
        _index(corpus, store, capsys)
        assert main(["list", "--store", str(store), "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        live = LiveStore(store)
        try:
            held = live.holdings()
            description = serve.describe_now(live)
        finally:
            live.close()
        # two files, two documents (rollo once, watt), one sentence each: two chunks
        assert held == Holdings(
            files=2, documents=2, chunks=2, folder=str(corpus), embedding="fake"
        )
        assert (listed["files"], listed["documents"], listed["chunks"]) == (2, 2, 2)
        assert description.startswith(
            f"Search 2 indexed file(s) under {corpus}: 2 document(s) in 2 chunk(s) (sentences). "
        )

    def test_a_slow_search_holds_up_no_other_call(
        self, store: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The model works outside the store's lock: while it is slow, other calls answer."""
        entered, release = threading.Event(), threading.Event()
        plain = HashingEmbeddings.embed_query

        def embed_query(self: HashingEmbeddings, text: str) -> list[float]:
            if "slow" in text:
                entered.set()
                release.wait()
            return plain(self, text)

        monkeypatch.setattr(HashingEmbeddings, "embed_query", embed_query)
        live = LiveStore(store)
        slow: list[tuple[str, int, int, str]] = []
        meanwhile: list[object] = []
        answered = threading.Event()

        def others() -> None:
            meanwhile.append(live.holdings())
            meanwhile.append(_top(live, "steam condenser Watt"))
            meanwhile.append(live.read(str(corpus / "steam.txt")).page_content)
            answered.set()

        searcher = threading.Thread(target=lambda: slow.append(_top(live, "slow Rollo fealty")))
        helper = threading.Thread(target=others)
        try:
            searcher.start()
            assert entered.wait(TIMEOUT)
            helper.start()
            assert answered.wait(TIMEOUT)  # (a guard against a hang, not a time limit)
            assert slow == []  # the slow search is still in its model
            release.set()
            searcher.join()
        finally:
            release.set()
            live.close()
        assert meanwhile == [
            Holdings(files=2, documents=2, chunks=6, folder=str(corpus), embedding="fake"),
            (str(corpus / "steam.txt"), 0, len(STEAM), STEAM),
            STEAM,
        ]
        assert slow == [(str(corpus / "normans.md"), 0, len(NORMANS), NORMANS)]  # its one section

    def test_commit_stamp_changes_only_when_another_connection_commits(self, store: Path) -> None:
        db, other = Database(store / "s2b.sqlite"), Database(store / "s2b.sqlite")
        try:
            with db.read():
                first = commit_stamp(db)
            with db.read():
                assert commit_stamp(db) == first
            with other.write() as conn:
                conn.execute("DELETE FROM files")
            with db.read():
                assert commit_stamp(db) != first
        finally:
            db.close()
            other.close()


# The tools' pure parts -----------------------------------------------------------------


DOC = Document(page_content="0123456789abcdefghij", metadata={"title": "t", "page": 2})


@pytest.mark.parametrize(
    ("start", "end", "max_tokens", "span", "truncated"),
    [
        (0, None, 100, (0, 20), False),
        (5, 9, 100, (5, 9), False),
        (5, 500, 100, (5, 20), False),  # an end past the source stops at its end
        (0, None, 2, (0, 8), True),  # 2 tokens: 8 characters
        (20, None, 5, (20, 20), False),
        (3, 3, 5, (3, 3), False),
    ],
)
def test_read_span(
    start: int, end: int | None, max_tokens: int, span: tuple[int, int], truncated: bool
) -> None:
    result = serve.read_span(DOC, "s", start, end, max_tokens)
    text = DOC.page_content[span[0] : span[1]]
    assert result == serve.ReadResult(
        source="s",
        title="t",
        page=2,
        start=span[0],
        end=span[1],
        length=20,
        truncated=truncated,
        tokens=approximate_tokens(text),
        text=text,
    )


@pytest.mark.parametrize(
    ("start", "end", "max_tokens", "message"),
    [
        (-1, None, 5, "start must be 0 or more; got -1"),
        (5, 4, 5, "end must be at least start (5); got 4"),
        (0, None, 0, "max_tokens must be at least 1; got 0"),
        (21, None, 5, "start 21 is past the end of 's' (20 characters)"),
    ],
)
def test_read_span_bad_input(start: int, end: int | None, max_tokens: int, message: str) -> None:
    with pytest.raises(UserError) as err:
        serve.read_span(DOC, "s", start, end, max_tokens)
    assert str(err.value) == message


def test_read_text_is_safe_and_says_where_it_stopped() -> None:
    doc = Document(page_content="a\x1b[2Jb\x07c d e f g h i j k l", metadata={})
    result = serve.read_span(doc, "s\x1b]0;x\x07", 0, None, 2)
    assert serve.read_text(result) == (
        "s  chars 0-8 of 26; cut at the token limit, read on from 8\nabc"
    )


@pytest.mark.parametrize("counter", [approximate_tokens, whitespace_tokens])
@pytest.mark.parametrize("text", ["", "a", "abcdefghij", "one two  three four\nfive", "x " * 50])
@pytest.mark.parametrize("max_tokens", [0, 1, 2, 3, 7, 100])
def test_fitting_prefix_is_the_longest_prefix_that_fits(
    counter: TokenCounter, text: str, max_tokens: int
) -> None:
    brute = max(n for n in range(len(text) + 1) if counter(text[:n]) <= max_tokens)
    assert fitting_prefix(text, max_tokens, counter) == brute


@pytest.mark.parametrize(
    "flt",
    [
        {},
        {"title": "a"},
        {"page": {"$gte": 2, "$lt": 5}},
        {"$and": [{"a": 1}, {"$or": [{"b": {"$in": [1, 2]}}, {"$not": {"c": 3}}]}]},
        {"tags": {"$nin": []}},
    ],
)
def test_check_dict_filter_accepts_what_matches_filter_reads(flt: dict[str, object]) -> None:
    check_dict_filter(flt)
    assert matches_filter({"a": 1, "b": 2, "c": 4, "page": 3, "title": "a"}, flt) in (True, False)


ALLOWED = "allowed: $eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $and, $or, $not."


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ("title", "a filter must be an object such as {'year': {'$gte': 2020}}; got 'title'."),
        ({"$and": 5}, "$and takes a non-empty list of filters; got 5."),
        ({"$or": []}, "$or takes a non-empty list of filters; got []."),
        ({"$and": [{"a": 1}, 3]}, "a filter must be an object such as {'year': {'$gte': 2020}}; "
         "got 3."),
        ({"$not": [1]}, "a filter must be an object such as {'year': {'$gte': 2020}}; got [1]."),
        ({"$where": "1"}, f"unknown filter operator '$where' at the top of a filter; {ALLOWED}"),
        ({"a": {"$regex": "x"}}, f"unknown filter operator '$regex' for field 'a'; {ALLOWED}"),
        ({"a": {"b": 1}}, f"unknown filter operator 'b' for field 'a'; {ALLOWED}"),
        ({"a": {"$in": "xy"}}, "$in for field 'a' takes a list; got 'xy'."),
    ],
)  # fmt: skip
def test_check_dict_filter_names_the_first_bad_part(flt: object, message: str) -> None:
    with pytest.raises(ValueError) as err:
        check_dict_filter(flt)
    assert str(err.value) == message


def test_search_result_and_text_from_documents() -> None:
    doc = Document(
        page_content="Rollo led.\x1b[31m Red.",
        metadata={
            "source_id": "/d/a.pdf#page=2", "source": "/d/a.pdf", "title": "a", "page": 2,
            "start": 10, "end": 30, "score": 0.5, "fused_score": 1.25, "mode": "window",
            "level": "sentence",
            "matches": [{"key": "k", "split_id": 1, "score": 0.5, "start": 10, "end": 20}],
        },
    )  # fmt: skip
    result = serve.search_result("q", {"mode": "window", "k": 3}, [doc])
    assert result.model_dump() == {
        "query": "q",
        "query_cut": False,
        "mode": "window",
        "k": 3,
        "max_tokens": None,
        "min_score": None,
        "contexts": [
            {
                "rank": 1, "source": "/d/a.pdf#page=2", "title": "a", "heading": None,
                "page": 2, "start": 10,
                "end": 30, "score": 0.5, "fused_score": 1.25, "mode": "window",
                "level": "sentence", "tokens": None,
                "text": "Rollo led.\x1b[31m Red.",
                "matches": [{"start": 10, "end": 20, "score": 0.5}],
            }
        ],
    }  # fmt: skip
    assert serve.search_text([doc]) == (
        "#1  fused 1.250  cosine 0.500  a  page 2  source /d/a.pdf#page=2  "
        "[window/sentence, chars 10-30]\n"
        "**Rollo led.** Red.\n"
    )
    assert serve.search_text([]) == "no results"
    assert serve.search_text([], "the query was\ncut") == "note: the query was cut\nno results"


def test_description_says_what_the_index_holds() -> None:
    held = Holdings(files=3, documents=5, chunks=120, folder="/docs", embedding="fake")
    assert serve.describe(Path("/s"), held).startswith(
        "Search 3 indexed file(s) under /docs: 5 document(s) in 120 chunk(s) (sentences). "
        "Returns the contexts that answer the query, best first."
    )
    assert serve.describe(Path("/s"), None, "no index at --store /s").startswith(
        "Search the index at /s; it can not be read now: no index at --store /s. Returns"
    )


class _Model(BaseModel):
    k: int


def test_error_line() -> None:
    with pytest.raises(ValidationError) as bad:
        _Model.model_validate({"k": "x\ny"})
    assert serve.error_line(bad.value) == (
        "k: Input should be a valid integer, unable to parse string as an integer; got 'x\\ny'"
    )
    assert serve.error_line(UserError("two\nlines")) == "two lines"
    assert serve.error_line(ZeroDivisionError("boom")) == "ZeroDivisionError: boom"
    long = serve.error_line(ValueError("x" * 1000))
    assert (len(long), long[-1]) == (400, "…")


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        (":0", ("127.0.0.1", 0)),
        ("8765", ("127.0.0.1", 8765)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("[::1]:9000", ("::1", 9000)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_parse_address(text: str, address: tuple[str, int]) -> None:
    assert serve.parse_address(text) == address


@pytest.mark.parametrize("text", ["host:", "host:70000", "x", "1.2.3.4:-1", ""])
def test_parse_address_refuses(text: str) -> None:
    with pytest.raises(UserError) as err:
        serve.parse_address(text)
    assert str(err.value) == (
        f"--http {text!r} is not HOST:PORT (e.g. 127.0.0.1:8765; port 0 picks a free one)"
    )


# The command line ----------------------------------------------------------------------


def test_token_needs_http_and_a_bad_address_is_one_line(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--store", str(store), "--token", "t"]) == 1
    assert capsys.readouterr().err == (
        "s2b: error: --token protects --http; over stdio only the client that starts s2b "
        "can reach it\n"
    )
    assert main(["serve", "--store", str(store), "--http", "nowhere:port"]) == 1
    assert capsys.readouterr().err == (
        "s2b: error: --http 'nowhere:port' is not HOST:PORT (e.g. 127.0.0.1:8765; port 0 "
        "picks a free one)\n"
    )


def test_a_missing_sdk_names_the_extra(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "mcp.server.fastmcp", None)
    assert main(["serve", "--store", str(store), "--http", ":0"]) == 1
    assert capsys.readouterr().err == (
        's2b: error: s2b serve needs the MCP SDK: pip install "langchain-s2b[mcp]"\n'
    )


def test_other_commands_do_not_load_the_sdk() -> None:
    code = (
        "import sys\n"
        "from langchain_s2b.cli.commands import build_parser\n"
        "build_parser().parse_args(['serve', '--store', 'x'])\n"
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


def test_stdout_belongs_to_the_protocol_alone() -> None:
    code = (
        "import os, sys\n"
        "from langchain_s2b.cli.serve import _stdout_for_protocol\n"
        "with _stdout_for_protocol() as protocol:\n"
        "    print('a stray print')\n"
        "    os.write(1, b'a C library writing to fd 1\\n')\n"
        '    protocol.write(b\'{"jsonrpc": "2.0"}\\n\')\n'
        "    protocol.flush()\n"
        "print('after')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == '{"jsonrpc": "2.0"}\nafter\n'
    assert done.stderr == "a stray print\na C library writing to fd 1\n"


def test_a_search_without_k_or_mode_packs_as_many_as_fit() -> None:
    """The defaults: pack mode, and ``k`` not named (4, or under max_tokens as many as fit)."""
    options = serve.query_options(max_tokens=300)
    assert (options["mode"], options["k"], options["max_tokens"]) == ("pack", None, 300)
    result = serve.search_result("q", options, [])
    assert (result.mode, result.k, result.max_tokens, result.contexts) == ("pack", None, 300, [])


async def test_integer_arguments_are_integers_not_booleans_nor_strings(store: Path) -> None:
    """The schema says integer: ``true`` (a bool) and ``"3"`` are refused, not read as 1 and 3."""
    from mcp.server.fastmcp.exceptions import ToolError

    server = serve.build_server(LiveStore(store))
    bad: list[tuple[str, dict[str, Any]]] = [
        ("search", {"query": "Rollo", "k": True}),
        ("search", {"query": "Rollo", "k": "3"}),
        ("search", {"query": "Rollo", "k": 2.5}),
        ("search", {"query": "Rollo", "max_tokens": "30"}),
        ("read", {"source": "x", "start": False}),
        ("read", {"source": "x", "end": "3"}),
        ("read", {"source": "x", "max_tokens": True}),
    ]
    errors = []
    for name, arguments in bad:
        with pytest.raises(ToolError) as caught:
            await server.call_tool(name, arguments)
        errors.append(str(caught.value))
    assert errors == [
        "search: k: Input should be a valid integer; got True",
        "search: k: Input should be a valid integer; got '3'",
        "search: k: Input should be a valid integer; got 2.5",
        "search: max_tokens: Input should be a valid integer; got '30'",
        "read: start: Input should be a valid integer; got False",
        "read: end: Input should be a valid integer; got '3'",
        "read: max_tokens: Input should be a valid integer; got True",
    ]
    found = await server.call_tool("search", {"query": "Rollo", "k": 1, "mode": "parent"})
    assert isinstance(found, CallToolResult)
    assert [c["source"] for c in found.structuredContent["contexts"]] == [
        str(store.parent / "corpus" / "normans.md")
    ]
