"""``s2b serve`` through real clients: the MCP SDK's own over stdio and HTTP, and a LangChain agent.

Every server here is a real ``python -m langchain_s2b serve`` process started by
the test (or ``_slow_serve.py``: the same, with a model that stops inside a
query until the test lets it go); the store is a real one written by ``s2b
index`` (``--embedding fake``). The expected contexts are worked out from the indexed text by hand:
the query ``leader Rollo fealty`` is answered by the first section of
``normans.md``, characters 0-178, whose best match is the sentence at 52-102.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli.commands import main

NORMANS = """# Normans

The Normans gave their name to Normandy. Their leader Rollo swore fealty to King Charles.

Norman mercenaries served in Italy. They founded states in southern Italy.

# Language

The Normans adopted the Gallo-Romance language. Their dialect became Norman French.
"""
STEAM = "A steam engine uses steam as its working fluid. James Watt added a separate condenser.\n"
WILLIAM = "Duke William of Normandy conquered England in 1066. He was crowned at Westminster.\n"
QUERY = "leader Rollo fealty"
SECTION_END = NORMANS.index("# Language")  # 178: the first section, the expected context
ROLLO_SENTENCE = "Their leader Rollo swore fealty to King Charles."
ROLLO = (NORMANS.index(ROLLO_SENTENCE), NORMANS.index("Norman mercenaries"))
"""The best match: the Rollo sentence with the blank line after it (sentences tile the text)."""
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


@pytest.fixture
def store(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    target = tmp_path / "store"
    assert main(["index", str(corpus), "--store", str(target)]) == 0
    capsys.readouterr()
    return target


def _env() -> dict[str, str]:
    return {**os.environ, cli.EMBEDDING_ENV: "fake"}


def _serve_argv(store: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "langchain_s2b", "serve", "--store", str(store), *extra]


SLOW_SERVER = Path(__file__).with_name("_slow_serve.py")


def _slow_argv(store: Path, fifos: tuple[Path, Path], *extra: str) -> list[str]:
    """``s2b serve`` whose model stops inside a query with the word ``slow`` (``_slow_serve``)."""
    entered, release = fifos
    return [sys.executable, str(SLOW_SERVER), str(entered), str(release), "serve",
            "--store", str(store), *extra]  # fmt: skip


@asynccontextmanager
async def stdio_session(
    store: Path, errlog: Path, argv: list[str] | None = None
) -> AsyncIterator[ClientSession]:
    """A session with a server that the SDK's stdio client starts (its stderr kept in errlog)."""
    argv = argv or _serve_argv(store)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=_env())
    with errlog.open("w") as err:
        async with (
            stdio_client(params, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@pytest.fixture
def http_server(store: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``s2b serve --http :0 --token secret``: its URL (from its first stderr line) and process."""
    with serving_http(store, _serve_argv(store, "--http", ":0", "--token", "secret")) as server:
        yield server


@contextmanager
def serving_http(store: Path, argv: list[str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The server ``argv`` starts (``--http :0 --token secret``): its URL and process."""
    proc = subprocess.Popen(
        argv,
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        prefix = f"s2b: serving {store} at "
        assert line.startswith(prefix), line
        url, _, rest = line[len(prefix) :].partition(" ")
        assert rest == "(a bearer token is required)\n"
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(30)


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=60) as client,
        streamable_http_client(url, http_client=client) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _expected_first_context(path: Path) -> dict[str, Any]:
    """The context that answers QUERY, from the indexed text (scores checked separately)."""
    return {
        "rank": 1,
        "source": str(path),
        "title": "normans",
        "page": None,
        "start": 0,
        "end": SECTION_END,
        "mode": "parent",
        "level": "section",
        "tokens": -(-SECTION_END // 4),  # every result carries its tokens: ceil(chars / 4)
        "text": NORMANS[:SECTION_END],
    }


def _check_rollo_context(context: dict[str, Any], path: Path) -> None:
    """The first section of normans.md, its best match the Rollo sentence."""
    assert {k: context[k] for k in _expected_first_context(path)} == _expected_first_context(path)
    best = max(context["matches"], key=lambda m: m["score"])
    assert (best["start"], best["end"]) == ROLLO
    assert context["score"] == best["score"]
    assert NORMANS[best["start"] : best["end"]] == f"{ROLLO_SENTENCE}\n\n"


def _query_json(store: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["query", QUERY, "--store", str(store), "--json", *extra]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _text(result: Any) -> str:
    assert len(result.content) == 1
    text: str = result.content[0].text
    return text


# stdio ----------------------------------------------------------------------------------


async def test_stdio_search_returns_the_right_context_as_s2b_query_does(
    store: Path, corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = _query_json(store, capsys, "-k", "2", "--mode", "parent")["results"]
    normans = corpus / "normans.md"
    errlog = tmp_path / "server.err"
    with anyio.fail_after(TIMEOUT):
        async with stdio_session(store, errlog) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            result = await session.call_tool("search", {"query": QUERY, "k": 2, "mode": "parent"})

    assert sorted(tools) == ["read", "search"]
    assert tools["search"].description.startswith(
        f"Search 2 indexed file(s) under {corpus}: 2 document(s) in 10 chunk(s) (sentences). "
    )
    assert tools["search"].inputSchema["properties"]["mode"]["anyOf"][0]["enum"] == [
        "parent",
        "window",
        "multilevel",
        "pack",
    ]
    assert not result.isError
    contexts = result.structuredContent["contexts"]
    _check_rollo_context(contexts[0], normans)
    # the same contexts, scores and matches as `s2b query --json`
    assert [(c["source"], c["start"], c["end"], c["text"], c["score"]) for c in contexts] == [
        (r["metadata"]["source_id"], r["metadata"]["start"], r["metadata"]["end"], r["text"],
         r["score"]) for r in reference
    ]  # fmt: skip
    assert [c["matches"] for c in contexts] == [
        [{k: m[k] for k in ("start", "end", "score")} for m in r["metadata"]["matches"]]
        for r in reference
    ]
    # the text for the model: `s2b query`'s plain form, whole, naming each source id
    text = _text(result)
    first = text.splitlines()[0]
    fused, score = contexts[0]["fused_score"], contexts[0]["score"]
    assert first == (  # the heading path (headers are on by default) after §
        f"#1  fused {fused:.3f}  cosine {score:.3f}  normans  § normans  source {normans}  "
        "[parent/section, chars 0-178]"
    )
    assert f"**{ROLLO_SENTENCE}**" in text
    assert text.count("#2  fused") == 1
    assert errlog.read_text() == ""


async def test_stdio_read_and_bad_input_are_one_line_errors_and_the_server_goes_on(
    store: Path, corpus: Path, tmp_path: Path
) -> None:
    normans = str(corpus / "normans.md")
    errlog = tmp_path / "server.err"
    bad = [
        ("search", {"query": QUERY, "mode": "bogus"}),
        ("search", {"query": QUERY, "k": -1}),
        ("search", {"query": QUERY, "filter": {"$and": 5}}),
        ("search", {"query": QUERY, "filter": {"title": {"$regex": "x"}}}),
        ("search", {"query": QUERY, "k": "three"}),
        ("read", {"source": "/etc/passwd"}),
        ("read", {"source": normans, "start": -1}),
        ("read", {"source": normans, "start": 500}),
    ]
    with anyio.fail_after(TIMEOUT):
        async with stdio_session(store, errlog) as session:
            errors = [_text(await session.call_tool(name, args)) for name, args in bad]
            read = await session.call_tool(
                "read", {"source": normans, "start": ROLLO[0], "end": 999}
            )
            capped = await session.call_tool(
                "read", {"source": normans, "start": ROLLO[0], "max_tokens": 3}
            )
            filtered = await session.call_tool(
                "search", {"query": QUERY, "filter": {"title": "steam"}, "k": 1, "mode": "parent"}
            )
    allowed = "allowed: $eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $and, $or, $not."
    assert errors == [
        "search: mode: Input should be 'parent', 'window', 'multilevel' or 'pack'; got 'bogus'",
        "search: k must be from 1 to 100; got -1",
        "search: $and takes a non-empty list of filters; got 5.",
        f"search: unknown filter operator '$regex' for field 'title'; {allowed}",
        "search: k: Input should be a valid integer; got 'three'",
        f"read: '/etc/passwd' is not a source in the index at {store}; "
        "read takes a source id from the search results",
        "read: start must be 0 or more; got -1",
        f"read: start 500 is past the end of {normans!r} (274 characters)",
    ]
    assert not read.isError
    assert read.structuredContent == {
        "source": normans,
        "title": "normans",
        "page": None,
        "start": ROLLO[0],
        "end": len(NORMANS),
        "length": len(NORMANS),
        "truncated": False,
        "tokens": -(-(len(NORMANS) - ROLLO[0]) // 4),
        "text": NORMANS[ROLLO[0] :],
    }
    assert _text(read) == f"{normans}  chars 52-274 of 274\n{NORMANS[ROLLO[0] :]}"
    assert capped.structuredContent["text"] == "Their leader"  # 3 tokens: 12 characters
    assert (capped.structuredContent["end"], capped.structuredContent["truncated"]) == (64, True)
    assert _text(capped).splitlines()[0] == (
        f"{normans}  chars 52-64 of 274; cut at the token limit, read on from 64"
    )
    assert [c["source"] for c in filtered.structuredContent["contexts"]] == [
        str(corpus / "steam.txt")
    ]
    assert errlog.read_text() == ""


async def test_stdio_sees_what_s2b_index_commits_while_it_runs(
    tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "later"  # does not exist when the server starts
    errlog = tmp_path / "server.err"
    william = corpus / "william.txt"
    with anyio.fail_after(TIMEOUT):
        async with stdio_session(store, errlog) as session:
            missing = await session.call_tool("search", {"query": QUERY})
            assert main(["index", str(corpus), "--store", str(store)]) == 0
            first = await session.call_tool("search", {"query": QUERY, "k": 1, "mode": "parent"})
            before = await session.call_tool(
                "search", {"query": "Duke William England", "k": 1, "mode": "parent"}
            )
            william.write_text(WILLIAM)
            assert main(["index", str(corpus), "--store", str(store)]) == 0
            after = await session.call_tool(
                "search", {"query": "Duke William England", "k": 1, "mode": "parent"}
            )
            tools = {t.name: t for t in (await session.list_tools()).tools}
            read = await session.call_tool("read", {"source": str(william)})
    capsys.readouterr()
    assert missing.isError
    assert _text(missing) == (
        f"search: no index at --store {store} (run: s2b index PATH... --store {store})"
    )
    _check_rollo_context(first.structuredContent["contexts"][0], corpus / "normans.md")
    assert before.structuredContent["contexts"][0]["source"] != str(william)
    (context,) = after.structuredContent["contexts"]
    assert (context["source"], context["start"], context["end"], context["text"]) == (
        str(william),
        0,
        len(WILLIAM),
        WILLIAM,
    )
    assert tools["search"].description.startswith(f"Search 3 indexed file(s) under {corpus}: ")
    assert read.structuredContent["text"] == WILLIAM
    assert errlog.read_text() == ""


async def test_stdio_refuses_an_empty_query_a_k_out_of_bounds_and_unknown_arguments(
    store: Path, corpus: Path, tmp_path: Path
) -> None:
    normans = str(corpus / "normans.md")
    errlog = tmp_path / "server.err"
    bad = [
        ("search", {"query": ""}),
        ("search", {"query": " \n\t"}),
        ("search", {"query": QUERY, "k": 10**18}),
        ("search", {"query": QUERY, "k": 101}),
        ("search", {"query": QUERY, "k": 0}),
        ("search", {"query": QUERY, "limit": 3}),
        ("search", {"query": QUERY, "k": 2, "top_k": 5, "Query": QUERY}),
        ("read", {"source": normans, "length": 5}),
    ]
    with anyio.fail_after(TIMEOUT):
        async with stdio_session(store, errlog) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            results = [await session.call_tool(name, args) for name, args in bad]
            most = await session.call_tool("search", {"query": QUERY, "k": 100, "mode": "parent"})
    takes = "search takes query, mode, k, max_tokens, filter, min_score"
    keywords = "give a question or keywords, e.g. 'who was Rollo?'"
    assert [(r.isError, _text(r)) for r in results] == [
        (True, f"search: query is empty (got ''); {keywords}"),
        (True, f"search: query is empty (got ' \\n\\t'); {keywords}"),
        (True, "search: k must be from 1 to 100; got 1000000000000000000"),
        (True, "search: k must be from 1 to 100; got 101"),
        (True, "search: k must be from 1 to 100; got 0"),
        (True, f"search: unknown argument(s) 'limit'; {takes}"),
        (True, f"search: unknown argument(s) 'Query', 'top_k'; {takes}"),
        (True, "read: unknown argument(s) 'length'; read takes source, start, end, max_tokens"),
    ]  # fmt: skip
    assert not most.isError  # k at the bound: every section there is (normans.md has two)
    assert len(most.structuredContent["contexts"]) == 3
    # the schemas say so, for clients that check before they call
    search, read = tools["search"].inputSchema, tools["read"].inputSchema
    assert (search["additionalProperties"], read["additionalProperties"]) == (False, False)
    query = search["properties"]["query"]
    assert (query["type"], query["minLength"], query["pattern"]) == ("string", 1, "\\S")
    k = search["properties"]["k"]
    assert (k["minimum"], k["maximum"]) == (1, 100)
    bounds = {name: read["properties"][name]["minimum"] for name in ("start", "end", "max_tokens")}
    assert bounds == {"start": 0, "end": 0, "max_tokens": 1}
    assert (
        "k: how many contexts (default 4; with max_tokens as many as fit; at most 100)"
        in tools["search"].description
    )
    assert errlog.read_text() == ""


async def test_stdio_a_long_query_is_searched_as_the_part_the_model_reads(
    store: Path, corpus: Path, tmp_path: Path
) -> None:
    """The fake model says no window: 8,192 tokens counted approximately, 32,768 characters."""
    head = "leader Rollo fealty " * 1700  # 34,000 characters
    question = head + "steam condenser Watt engine " * 3000  # then 84,000 about steam
    cut = "leader Rollo fealty " * 1638 + "leader"  # 32,766; ' Rollo' would end at 32,772
    errlog = tmp_path / "server.err"
    with anyio.fail_after(TIMEOUT):
        async with stdio_session(store, errlog) as session:
            long = await session.call_tool("search", {"query": question, "k": 2, "mode": "parent"})
            short = await session.call_tool("search", {"query": cut, "k": 2, "mode": "parent"})
    assert not long.isError
    assert long.structuredContent == {**short.structuredContent, "query_cut": True}
    assert (short.structuredContent["query"], short.structuredContent["query_cut"]) == (cut, False)
    _check_rollo_context(long.structuredContent["contexts"][0], corpus / "normans.md")
    note, _, contexts = _text(long).partition("\n")
    assert note == (
        "note: the query is longer than s2b searches with a model whose input window it does "
        "not know: searched its first 32,766 of 118,000 characters (8,192 tokens, counted "
        "approximately)"
    )
    assert contexts == _text(short)
    assert errlog.read_text() == ""


# While one search is slow -----------------------------------------------------------------


@pytest.fixture
def fifos(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """ENTERED and RELEASE of ``_slow_serve.py``; whatever still waits on them is let go after."""
    entered, release = tmp_path / "entered", tmp_path / "release"
    os.mkfifo(entered)
    os.mkfifo(release)
    yield entered, release
    _let_go((entered, release))


def _let_go(fifos: tuple[Path, Path]) -> None:
    """Whoever waits on the FIFOs goes on (a test that failed must not leave a server stuck)."""
    entered, release = fifos
    for path, flags in (  # a reader waiting for a writer, then a writer waiting for a reader
        (entered, os.O_WRONLY),
        (entered, os.O_RDONLY),
        (release, os.O_WRONLY),
    ):
        with contextlib.suppress(OSError):  # ENXIO: nobody is waiting on that end
            os.close(os.open(path, flags | os.O_NONBLOCK))


async def _calls_while_a_search_is_slow(
    session: ClientSession, fifos: tuple[Path, Path], corpus: Path
) -> None:
    """A search stops inside the model; list, another search and read are answered meanwhile."""
    entered, release = fifos
    slow: dict[str, Any] = {}

    async def search_slowly() -> None:
        slow["result"] = await session.call_tool(
            "search", {"query": "slow steam Watt", "k": 1, "mode": "parent"}
        )

    async with anyio.create_task_group() as group:
        group.start_soon(search_slowly)
        assert await anyio.to_thread.run_sync(entered.read_text, abandon_on_cancel=True) == (
            "in the model\n"
        )
        tools = {t.name: t for t in (await session.list_tools()).tools}
        other = await session.call_tool("search", {"query": QUERY, "k": 1, "mode": "parent"})
        read = await session.call_tool("read", {"source": str(corpus / "steam.txt")})
        assert slow == {}  # still inside the model: it can not finish before it is let go
        await anyio.to_thread.run_sync(release.write_text, "go\n", abandon_on_cancel=True)
    assert tools["search"].description.startswith(f"Search 2 indexed file(s) under {corpus}: ")
    _check_rollo_context(other.structuredContent["contexts"][0], corpus / "normans.md")
    assert read.structuredContent["text"] == STEAM
    (context,) = slow["result"].structuredContent["contexts"]
    assert (context["source"], context["start"], context["end"], context["text"]) == (
        str(corpus / "steam.txt"),
        0,
        len(STEAM),
        STEAM,
    )


async def test_stdio_answers_other_calls_while_a_search_is_slow(
    store: Path, corpus: Path, tmp_path: Path, fifos: tuple[Path, Path]
) -> None:
    errlog = tmp_path / "server.err"
    with anyio.fail_after(TIMEOUT):
        async with stdio_session(store, errlog, _slow_argv(store, fifos)) as session:
            await _calls_while_a_search_is_slow(session, fifos, corpus)
    assert errlog.read_text() == ""


async def test_http_answers_other_calls_while_a_search_is_slow(
    store: Path, corpus: Path, fifos: tuple[Path, Path]
) -> None:
    argv = _slow_argv(store, fifos, "--http", ":0", "--token", "secret")
    with serving_http(store, argv) as (url, proc):
        try:
            with anyio.fail_after(TIMEOUT):
                async with http_session(url, "secret") as session:
                    await _calls_while_a_search_is_slow(session, fifos, corpus)
            assert proc.poll() is None
        finally:
            _let_go(fifos)  # before the server is stopped: it waits for the calls it holds


# streamable HTTP ------------------------------------------------------------------------


async def test_http_needs_the_token_and_answers_with_it(
    http_server: tuple[str, subprocess.Popen[str]], corpus: Path
) -> None:
    url, proc = http_server
    assert url.startswith("http://127.0.0.1:")  # loopback unless told otherwise
    assert url.endswith("/mcp")
    with anyio.fail_after(TIMEOUT):
        statuses = []
        for token in (None, "wrong"):
            async with httpx.AsyncClient(headers=_bearer(token)) as client:
                response = await client.post(url, json=_initialize(), headers=_ACCEPT)
                statuses.append((response.status_code, response.headers["www-authenticate"]))
        async with http_session(url, "secret") as session:
            result = await session.call_tool("search", {"query": QUERY, "k": 1, "mode": "parent"})
            error = await session.call_tool("search", {"query": QUERY, "mode": "nope"})
            again = await session.call_tool(
                "search", {"query": "steam condenser", "k": 1, "mode": "parent"}
            )
    assert (
        statuses
        == [(401, 'Bearer error="invalid_token", error_description="Authentication required"')] * 2
    )
    _check_rollo_context(result.structuredContent["contexts"][0], corpus / "normans.md")
    assert error.isError
    assert _text(error).startswith("search: mode: Input should be")
    assert again.structuredContent["contexts"][0]["source"] == str(corpus / "steam.txt")
    assert proc.poll() is None


_ACCEPT = {"Accept": "application/json, text/event-stream"}


def _bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }


# A LangChain agent through langchain-mcp-adapters ---------------------------------------


class CitingModel(BaseChatModel):
    """A fake chat model: searches for the question, then cites the first context's header.

    Its answer depends on what the tool returned, so the test fails when the
    server returns the wrong context, or none.
    """

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> CitingModel:
        return self

    @property
    def _llm_type(self) -> str:
        return "citing-fake"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            args = {"query": last.text, "k": 1, "mode": "parent"}
            call = {"name": "search", "args": args, "id": "call-1"}
            message = AIMessage(content="", tool_calls=[call])
        else:
            assert isinstance(last, ToolMessage)
            message = AIMessage(content=f"According to {last.text.splitlines()[0]}")
        return ChatResult(generations=[ChatGeneration(message=message)])


async def test_langchain_agent_cites_the_context_through_mcp_adapters(
    store: Path, corpus: Path, tmp_path: Path
) -> None:
    from langchain.agents import create_agent
    from langchain_mcp_adapters.tools import load_mcp_tools

    errlog = tmp_path / "server.err"
    with anyio.fail_after(TIMEOUT):
        async with stdio_session(store, errlog) as session:
            tools = await load_mcp_tools(session)
            agent = create_agent(CitingModel(), tools)
            state = await agent.ainvoke({"messages": [HumanMessage(QUERY)]})
    assert sorted(t.name for t in tools) == ["read", "search"]
    messages = state["messages"]
    tool_message = next(m for m in messages if isinstance(m, ToolMessage))
    (context,) = tool_message.artifact["structured_content"]["contexts"]
    normans = corpus / "normans.md"
    _check_rollo_context(context, normans)
    assert messages[-1].text == (
        f"According to #1  fused {context['fused_score']:.3f}  cosine {context['score']:.3f}  "
        f"normans  § normans  source {normans}  [parent/section, chars 0-178]"
    )
    assert errlog.read_text() == ""
