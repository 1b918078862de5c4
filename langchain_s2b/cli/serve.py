"""``s2b serve``: the index as a Model Context Protocol server, for any agent, with citations.

.. code-block:: bash

    s2b serve --store .s2b                               # stdio: the client starts it
    s2b serve --store .s2b --http 127.0.0.1:8765 --token "$TOKEN"   # streamable HTTP

Two tools, built with the official ``mcp`` SDK (the ``mcp`` extra):

- ``search(query, mode?, k?, max_tokens?, filter?, min_score?)``: the contexts that answer
  the query. The text, for the model, is each context as ``s2b query`` prints
  it (rank, score, title, source id, page and span, the matched sentences in
  ``**bold**``, no escape sequences); the structured content is a
  :class:`SearchResult` (source, start, end, score and matches per context)
  for the client to cite and highlight. As ``s2b query``, it refuses an empty
  query and a ``k`` outside ``1..MAX_K``, and searches the part of a long
  query that the embedding model reads (``querying.cut_question``).
- ``read(source, start?, end?, max_tokens?)``: the text of an indexed source
  between two offsets, capped by ``max_tokens``, to read around a citation.
  Only sources of this index can be read, and only as they were indexed.

The tool description says what the index holds (files, documents, chunks), as
of the client's last ``tools/list``, counted as ``s2b list`` counts. Each call
sees the store's last commit (:class:`~langchain_s2b.cli.live.LiveStore`), and
runs in a worker thread: a slow search holds up no other call. Bad input (an
argument the tool does not take, too), a missing store or one built with
another embedding model is a tool error in one line; the server keeps
running. The input schemas say the bounds (``minLength``, ``maximum``,
``additionalProperties: false``). Over stdio, the protocol owns the process's
standard output: anything else written there (a stray print, a library's C
code) goes to standard error instead. Over HTTP the server binds to ``127.0.0.1`` unless told
otherwise, and ``--token`` makes it refuse any request without that bearer token.

The SDK is imported only here, inside the functions that need it, so other
commands do not load it. This module does not use ``from __future__ import
annotations``: the SDK reads the tool functions' annotations, which name types
imported inside :func:`build_server`.
"""

import hmac
import inspect
import io
import os
import socket
import sqlite3
import sys
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

from langchain_core.documents import Document
from pydantic import BaseModel, Field, ValidationError

from langchain_s2b.cli import display
from langchain_s2b.cli.errors import UserError, one_line, safe
from langchain_s2b.cli.live import Holdings, LiveStore
from langchain_s2b.cli.options import TOKEN_ENV as TOKEN_ENV
from langchain_s2b.cli.querying import (
    DEFAULT_K,
    DEFAULT_MODE,
    MAX_K,
    cut_question,
    no_results,
    query_options,
)
from langchain_s2b.core.budget import approximate_tokens, fitting_prefix
from langchain_s2b.core.filters import check_dict_filter
from langchain_s2b.core.params import MODES, Mode

if TYPE_CHECKING:
    from mcp.server.fastmcp import FastMCP

INSTALL = 's2b serve needs the MCP SDK: pip install "langchain-s2b[mcp]"'
DEFAULT_HOST = "127.0.0.1"
MCP_PATH = "/mcp"
READ_TOKENS = 2000
"""``read``'s default cap: about 8,000 characters."""
"""The bearer token, when ``--token`` is not given (keeps it out of process listings)."""
_MAX_ERROR = 400


# What the tools return --------------------------------------------------------------


class Match(BaseModel):
    """A matched sentence inside a context: its span in the source, and its score."""

    start: int
    end: int
    score: float | None = None


class Context(BaseModel):
    """One search result: where it is in its source, how it scored, what matched."""

    rank: int = Field(description="1 for the best context")
    source: str = Field(description="the source id: what read takes")
    title: str | None = None
    heading: str | None = Field(
        default=None,
        description="the title and section path of its best match (title > section > ...), "
        "when the store was indexed with --headers",
    )
    page: int | None = Field(default=None, description="the PDF page, for PDF files")
    start: int = Field(description="first character of the context in its source")
    end: int = Field(description="end of the context in its source (exclusive)")
    score: float | None = Field(default=None, description="cosine similarity of its best match")
    fused_score: float | None = Field(
        default=None, description="its best match's hybrid score: what ranks the contexts"
    )
    mode: str | None = None
    level: str | None = Field(default=None, description="sentence, paragraph, section or doc")
    tokens: int | None = Field(default=None, description="its size, when max_tokens was given")
    text: str = Field(description="the context's text: source_text[start:end]")
    matches: list[Match] = Field(description="the matched sentences inside it, for highlighting")

    @classmethod
    def of(cls, doc: Document, rank: int) -> "Context":
        """The structured form of a retrieved document."""
        meta = doc.metadata
        page, tokens = meta.get("page"), meta.get("tokens")
        return cls(
            rank=rank,
            source=str(meta.get("source_id", "")),
            title=None if meta.get("title") is None else str(meta["title"]),
            heading=None if meta.get("heading") is None else str(meta["heading"]),
            page=page if isinstance(page, int) else None,
            start=int(meta.get("start", 0)),
            end=int(meta.get("end", len(doc.page_content))),
            score=_number(meta.get("score")),
            fused_score=_number(meta.get("fused_score")),
            mode=meta.get("mode"),
            level=meta.get("level"),
            tokens=tokens if isinstance(tokens, int) else None,
            text=doc.page_content,
            matches=[
                Match(start=int(m["start"]), end=int(m["end"]), score=_number(m.get("score")))
                for m in meta.get("matches", [])
            ],
        )


class SearchResult(BaseModel):
    """The ``search`` tool's structured content."""

    query: str = Field(description="the query as searched: cut to what the model reads")
    query_cut: bool = Field(
        default=False, description="the query was longer than the model reads, and was cut"
    )
    mode: str
    k: int | None = Field(
        default=None, description="the cap asked for (none: 4, or with max_tokens as many as fit)"
    )
    max_tokens: int | None = None
    min_score: float | None = Field(
        default=None,
        description="the floor asked for: contexts whose best match scored less are left out",
    )
    contexts: list[Context]


class ReadResult(BaseModel):
    """The ``read`` tool's structured content."""

    source: str
    title: str | None = None
    page: int | None = None
    start: int
    end: int = Field(description="where the text returned ends (exclusive)")
    length: int = Field(description="the whole source's length in characters")
    truncated: bool = Field(description="max_tokens stopped it before the end asked for")
    tokens: int
    text: str


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def search_result(
    query: str, options: dict[str, Any], docs: Sequence[Document], *, cut: bool = False
) -> SearchResult:
    """The structured content of one search (``query`` as searched; ``cut``: it was cut)."""
    return SearchResult(
        query=query,
        query_cut=cut,
        mode=options["mode"],
        k=options["k"],
        max_tokens=options.get("max_tokens"),
        min_score=options.get("score_threshold"),
        contexts=[Context.of(doc, rank) for rank, doc in enumerate(docs, 1)],
    )


def search_text(
    docs: Sequence[Document], note: str | None = None, min_score: float | None = None
) -> str:
    """The text for the model: every context as ``s2b query`` prints it, whole, with its id.

    ``note``: a first line saying how the query was cut, when it was. No context:
    one line that says so (and, with ``min_score``, that nothing reached it).
    """
    first = [f"note: {one_line(note)}"] if note else []
    contexts = [display.plain(doc, rank, 0, cite=True) for rank, doc in enumerate(docs, 1)]
    return "\n".join(first + (contexts or [no_results(min_score, "min_score")]))


def check_query(query: str) -> None:
    """Refuse a query without a word (as ``s2b query`` does)."""
    if not query.strip():
        msg = f"query is empty (got {query!r}); give a question or keywords, e.g. 'who was Rollo?'"
        raise UserError(msg)


def check_arguments(tool: str, arguments: Mapping[str, Any], takes: Collection[str]) -> None:
    """Refuse an argument that the tool does not take (the SDK would ignore it)."""
    unknown = sorted(set(arguments) - set(takes))
    if unknown:
        msg = (
            f"unknown argument(s) {', '.join(map(repr, unknown))}; {tool} takes {', '.join(takes)}"
        )
        raise UserError(msg)


def ask(
    live: LiveStore, query: str, options: Mapping[str, Any]
) -> tuple[str, str | None, list[Document]]:
    """One search, in a worker thread: the query cut to what the model reads, then searched.

    Returns the query as searched, the note saying how it was cut (if it was)
    and the contexts.
    """
    searched, note = cut_question(live.embedding(), query)
    return searched, note, live.search(searched, options)


def read_span(
    doc: Document, source: str, start: int, end: int | None, max_tokens: int
) -> ReadResult:
    """``[start, end)`` of a source's text, cut where ``max_tokens`` is reached."""
    text = doc.page_content
    if start < 0:
        msg = f"start must be 0 or more; got {start}"
        raise UserError(msg)
    if end is not None and end < start:
        msg = f"end must be at least start ({start}); got {end}"
        raise UserError(msg)
    if max_tokens < 1:
        msg = f"max_tokens must be at least 1; got {max_tokens}"
        raise UserError(msg)
    if start > len(text):
        msg = f"start {start} is past the end of {source!r} ({len(text)} characters)"
        raise UserError(msg)
    stop = len(text) if end is None else min(end, len(text))
    piece = text[start:stop]
    piece = piece[: fitting_prefix(piece, max_tokens)]
    meta = doc.metadata
    page = meta.get("page")
    return ReadResult(
        source=source,
        title=None if meta.get("title") is None else str(meta["title"]),
        page=page if isinstance(page, int) else None,
        start=start,
        end=start + len(piece),
        length=len(text),
        truncated=start + len(piece) < stop,
        tokens=approximate_tokens(piece),
        text=piece,
    )


def read_text(result: ReadResult) -> str:
    """The text for the model: a header with the span, then the text (escape sequences removed)."""
    header = f"{result.source}  chars {result.start}-{result.end} of {result.length}"
    if result.truncated:
        header += f"; cut at the token limit, read on from {result.end}"
    return f"{one_line(header)}\n{safe(result.text)}"


# Descriptions -----------------------------------------------------------------------

SEARCH_HOW = (
    "Returns the contexts that answer the query, best first. Each is headed by its rank, "
    "score, title, source id, page and character span [start-end) in its source (and, "
    "after §, the section path of its best match), and "
    "the sentences that matched are in **bold**. Cite a context by its source and span; "
    "call read with the source and a span to see the text around it. "
    "mode: pack (default: the best sentences and their neighbours, 1,024 tokens unless "
    "max_tokens says otherwise), parent (the section around the best sentences), window "
    "(the sentences around each match) or multilevel (the smallest part of the document "
    f"that covers the evidence). k: how many contexts (default {DEFAULT_K}; with "
    f"max_tokens as many as fit; at most {MAX_K}). max_tokens: a ceiling on all contexts "
    "together. min_score: leave out contexts whose best match's cosine is below it (off "
    "unless given; with it, no context can be the answer). filter: on the "
    "documents' metadata (source: the file path; title; page for PDFs), e.g. "
    '{"source": "/docs/a.md"} or {"page": {"$lte": 3}}; operators $eq $ne $gt $gte $lt '
    "$lte $in $nin $and $or $not. A query longer than the embedding model reads is cut "
    "to what it reads (512 word pieces, about 400 English words, for the offline model), "
    "and the result says so."
)
READ_HOW = (
    "Read the text of an indexed source between two character offsets [start, end), as "
    "it was indexed: to see more around a context that search returned. source is the "
    "source id that search names; start and end are characters of that source (end "
    f"defaults to its end). At most max_tokens tokens (default {READ_TOKENS}) come back; "
    "the header says where the text stops, and where to read on."
)


def describe(directory: Path, holdings: Holdings | None, problem: str | None = None) -> str:
    """The ``search`` tool's description: what the index holds, then how to call it."""
    if holdings is None:
        held = f"Search the index at {directory}; it can not be read now: {problem}."
    else:
        under = f" under {holdings.folder}" if holdings.folder else ""
        held = (
            f"Search {holdings.files} indexed file(s){under}: {holdings.documents} "
            f"document(s) in {holdings.chunks} chunk(s) (sentences)."
        )
    return f"{one_line(held)} {SEARCH_HOW}"


def describe_now(live: LiveStore) -> str:
    """:func:`describe` of the store as it is now (a store that can not be read says why)."""
    try:
        return describe(live.directory, live.holdings())
    except (UserError, ValueError, LookupError, OSError, sqlite3.Error) as err:
        return describe(live.directory, None, error_line(err))


def error_line(err: BaseException) -> str:
    """An exception as one short line: what came in, what is allowed."""
    if isinstance(err, ValidationError) and err.errors():
        first = err.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "input"
        text = f"{where}: {first.get('msg')}; got {first.get('input')!r}"
    elif isinstance(err, UserError | ValueError | LookupError | OSError | sqlite3.Error):
        text = str(err) or type(err).__name__
    else:
        text = f"{type(err).__name__}: {err}"
    line = one_line(text)
    return line if len(line) <= _MAX_ERROR else line[: _MAX_ERROR - 1] + "…"


# The server -------------------------------------------------------------------------


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host ``127.0.0.1``); ``[::1]:PORT`` for IPv6."""
    host, sep, port_text = text.strip().rpartition(":")
    host = host.strip().removeprefix("[").removesuffix("]") if sep else ""
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        msg = f"--http {text!r} is not HOST:PORT (e.g. 127.0.0.1:8765; port 0 picks a free one)"
        raise UserError(msg)
    return host or DEFAULT_HOST, port


def build_server(
    live: LiveStore, *, host: str = DEFAULT_HOST, token: str | None = None
) -> "FastMCP[Any]":
    """The MCP server of ``live``: its tools, one-line errors, and the bearer token if any.

    Args:
        live: the store to serve.
        host: the HTTP host (``127.0.0.1``, ``localhost``, ``::1`` turn on the
            SDK's DNS-rebinding protection).
        token: a bearer token every HTTP request must carry.
    """
    try:
        import anyio.to_thread
        from mcp.server.auth.provider import AccessToken
        from mcp.server.auth.settings import AuthSettings
        from mcp.server.fastmcp import FastMCP
        from mcp.server.fastmcp.exceptions import ToolError
        from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
    except ImportError:
        raise ImportError(INSTALL) from None

    class Bearer:
        """Accepts exactly one token (compared in constant time)."""

        def __init__(self, secret: str) -> None:
            self._secret = secret.encode()

        async def verify_token(self, token: str) -> AccessToken | None:
            if hmac.compare_digest(token.encode(), self._secret):
                return AccessToken(token=token, client_id="s2b", scopes=[])
            return None

    takes: dict[str, list[str]] = {}  # each tool's arguments, by its name

    class Server(FastMCP[Any]):
        """FastMCP: one-line tool errors, no unknown argument, a search that says what it holds."""

        async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
            try:
                if name in takes:
                    check_arguments(name, arguments, takes[name])
                return await super().call_tool(name, arguments)
            except UserError as err:
                raise ToolError(f"{name}: {error_line(err)}") from None
            except ToolError as err:
                raise ToolError(f"{name}: {error_line(err.__cause__ or err)}") from None

        async def list_tools(self) -> list[Tool]:
            tools = await super().list_tools()
            description = await anyio.to_thread.run_sync(describe_now, live)
            for tool in tools:
                tool.inputSchema["additionalProperties"] = False
                if tool.name == "search":
                    tool.description = description
            return tools

    auth = None
    if token is not None:
        issuer = f"http://[{host}]" if ":" in host else f"http://{host}"  # we issue the token
        auth = AuthSettings(issuer_url=issuer, resource_server_url=None)
    server = Server(
        "s2b",
        instructions=one_line(
            f"Small-to-big retrieval over the documents indexed in {live.directory}. Call "
            "search with a question; every context names its source and character span. "
            "Call read with a source and a span to see the text around a citation."
        ),
        host=host,
        stateless_http=True,  # no session state to keep: each request stands alone
        json_response=True,
        log_level="WARNING",
        token_verifier=Bearer(token) if token is not None else None,
        auth=auth,
    )
    readonly = ToolAnnotations(readOnlyHint=True, openWorldHint=False)

    async def search(
        query: Annotated[
            str,
            Field(
                description="A self-contained question or keywords.",
                json_schema_extra={"minLength": 1, "pattern": r"\S"},
            ),
        ],
        mode: Annotated[
            Mode | None, Field(description=f"{', '.join(MODES)} (default {DEFAULT_MODE})")
        ] = None,
        k: Annotated[
            int | None,
            Field(
                description=(
                    f"contexts (default {DEFAULT_K}; with max_tokens as many as fit; "
                    f"at most {MAX_K})"
                ),
                json_schema_extra={"minimum": 1, "maximum": MAX_K},
                strict=True,  # an integer: not true, not "3"
            ),
        ] = None,
        max_tokens: Annotated[
            int | None,
            Field(
                description="a ceiling on all contexts",
                json_schema_extra={"minimum": 1},
                strict=True,
            ),
        ] = None,
        filter: Annotated[
            dict[str, Any] | None, Field(description='metadata filter, e.g. {"source": "/a.md"}')
        ] = None,
        min_score: Annotated[
            float | None,
            Field(
                description=(
                    "leave out contexts whose best match's cosine is below this, in the "
                    "store's model's units (default: none left out)"
                ),
                json_schema_extra={"minimum": -1, "maximum": 1},
                strict=True,  # a number: not true, not "0.5"
            ),
        ] = None,
    ) -> Annotated[CallToolResult, SearchResult]:
        check_query(query)
        options = query_options(
            mode=mode, k=k, max_tokens=max_tokens, filter=filter, min_score=min_score
        )
        if filter is not None:
            check_dict_filter(filter)
        searched, note, docs = await anyio.to_thread.run_sync(ask, live, query, options)
        result = search_result(searched, options, docs, cut=note is not None)
        return CallToolResult(
            content=[TextContent(type="text", text=search_text(docs, note, min_score))],
            structuredContent=result.model_dump(mode="json"),
        )

    async def read(
        source: Annotated[str, Field(description="a source id, as search names it")],
        start: Annotated[
            int,
            Field(
                description="first character (0-based)",
                json_schema_extra={"minimum": 0},
                strict=True,
            ),
        ] = 0,
        end: Annotated[
            int | None,
            Field(
                description="end, exclusive (default: the end of the source)",
                json_schema_extra={"minimum": 0},
                strict=True,
            ),
        ] = None,
        max_tokens: Annotated[
            int,
            Field(
                description=f"at most this many tokens (default {READ_TOKENS})",
                json_schema_extra={"minimum": 1},
                strict=True,
            ),
        ] = READ_TOKENS,
    ) -> Annotated[CallToolResult, ReadResult]:
        doc = await anyio.to_thread.run_sync(live.read, source)
        result = read_span(doc, source, start, end, max_tokens)
        return CallToolResult(
            content=[TextContent(type="text", text=read_text(result))],
            structuredContent=result.model_dump(mode="json"),
        )

    for tool, how in ((search, SEARCH_HOW), (read, READ_HOW)):
        server.add_tool(tool, description=how, annotations=readonly, structured_output=True)
        takes[tool.__name__] = list(inspect.signature(tool).parameters)
    return server


def run(directory: Path, wanted: str | None, *, http: str | None, token: str | None) -> int:
    """Serve ``directory`` over stdio, or over streamable HTTP at ``http`` (``HOST:PORT``).

    The store is opened and its index built before the first call (a store
    that can not be read yet is not an error here: each call will say why).
    """
    live = LiveStore(directory, wanted)
    try:
        if http is None:
            with _stdout_for_protocol() as protocol:
                describe_now(live)
                _run_stdio(build_server(live), protocol)
            return 0
        host, port = parse_address(http)
        server = build_server(live, host=host, token=token)
        with _listen(host, port) as sock:
            name = f"[{host}]" if ":" in host else host
            url = f"http://{name}:{sock.getsockname()[1]}{MCP_PATH}"
            describe_now(live)
            guard = "a bearer token is required" if token else "no token: anyone who can connect"
            print(f"s2b: serving {directory} at {url} ({guard})", file=sys.stderr)
            sys.stderr.flush()
            _run_http(server, sock)
        return 0
    finally:
        live.close()


@contextmanager
def _stdout_for_protocol() -> Iterator[BinaryIO]:
    """The real standard output for the protocol alone; fd 1 and ``sys.stdout`` go to stderr.

    A stray ``print`` or a library writing to fd 1 would break the stdio
    transport; for the block, both reach standard error instead.
    """
    out_fd = sys.stdout.fileno()
    sys.stdout.flush()
    protocol = os.fdopen(os.dup(out_fd), "wb")
    saved_fd, saved_stdout = os.dup(out_fd), sys.stdout
    os.dup2(sys.stderr.fileno(), out_fd)
    sys.stdout = sys.stderr
    try:
        yield protocol
    finally:
        sys.stdout = saved_stdout
        os.dup2(saved_fd, out_fd)
        os.close(saved_fd)
        protocol.close()


def _run_stdio(server: "FastMCP[Any]", protocol: BinaryIO) -> None:
    """The SDK's stdio transport, writing to ``protocol``, until the client closes stdin."""
    import anyio
    from mcp.server.stdio import stdio_server

    lowlevel = server._mcp_server  # FastMCP.run_stdio_async, given our standard output

    async def main() -> None:
        stdout = anyio.wrap_file(io.TextIOWrapper(protocol, encoding="utf-8"))
        async with stdio_server(stdout=stdout) as (read, write):
            await lowlevel.run(read, write, lowlevel.create_initialization_options())

    anyio.run(main)


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as err:
        msg = f"cannot listen on {host}:{port}: {err.strerror or err}"
        raise UserError(msg) from None


def _run_http(server: "FastMCP[Any]", sock: socket.socket) -> None:
    """Streamable HTTP with uvicorn on an already bound socket (warnings only on stderr)."""
    import uvicorn

    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
