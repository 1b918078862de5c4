"""The ``s2b`` command and its subcommands: index, query, list, delete, verify, eval, serve.

.. code-block:: bash

    s2b index docs/ notes.md articles.jsonl --store .s2b
    s2b query "who was Rollo?" --store .s2b --mode window -k 3
    s2b query "who was Rollo?" --store .s2b --json | jq '.results[0].score'
    s2b list --store .s2b --json
    s2b delete docs/old --store .s2b
    s2b verify --store .s2b --repair
    s2b eval --store .s2b --questions questions.jsonl
    s2b serve --store .s2b                 # an MCP server over stdio (or --http HOST:PORT)

One index serves every mode: it is built on the multilevel tree (sentences
inside paragraphs inside sections inside the document), so ``--mode parent``
returns the paragraph around the best sentences, ``window`` a window of
sentences and ``multilevel`` the smallest node that covers the evidence.
Defaults (``k``, ``mode``, ``window_size``) are the Python API's, read from
:class:`~langchain_s2b.retriever.SmallToBigRetriever`'s fields.

Exit status: 0 done, 1 error (one line on stderr, never a traceback), 2 bad
command line, 3 done but some files could not be read (each one named), 130
interrupted. A closed pipe (``s2b query ... | head``) ends the command quietly.
Warnings (a library's, the retriever's) are one line each, after the command.

This module is the parser and ``main`` only: it imports a command's module
when that command runs (:data:`COMMANDS`), so ``s2b --version`` and ``s2b
list`` load neither numpy, FAISS nor LangChain.

Counts mean the same in every command: a *file* is an indexed file, a
*document* a source (a text file, a PDF page, a JSONL row), a *chunk* a leaf the
index searches (a sentence), a *vector* a distinct chunk text with its stored
embedding (identical chunks share one).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sqlite3
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from langchain_s2b import __version__
from langchain_s2b.cli.errors import UserError, one_line
from langchain_s2b.cli.folder import store_error
from langchain_s2b.cli.options import (
    BUDGETS,
    COUNTERS,
    DEFAULT_COUNTER,
    DEFAULT_K,
    DEFAULT_MODE,
    EMBEDDING_ENV,
    MAX_K,
    MODES,
    PARENT_LEVEL,
    PARENT_LEVELS,
    PROXY_CHOICES,
    TOKEN_ENV,
)

__all__ = ["COMMANDS", "EMBEDDING_ENV", "build_parser", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "index": ("langchain_s2b.cli.actions", "cmd_index"),
    "query": ("langchain_s2b.cli.actions", "cmd_query"),
    "list": ("langchain_s2b.cli.listing", "cmd_list"),
    "delete": ("langchain_s2b.cli.actions", "cmd_delete"),
    "verify": ("langchain_s2b.cli.actions", "cmd_verify"),
    "eval": ("langchain_s2b.cli.actions", "cmd_eval"),
    "serve": ("langchain_s2b.cli.actions", "cmd_serve"),
}
"""Each command's function, by module and name: the module is imported when the command
runs (the way ``langchain_s2b``'s public names load, by name, never by a function-level
import)."""


def command(name: str) -> Callable[[argparse.Namespace, TextIO], int]:
    """The function that runs command ``name`` (its module imported now)."""
    home, attribute = COMMANDS[name]
    found: Callable[[argparse.Namespace, TextIO], int] = getattr(
        importlib.import_module(home), attribute
    )
    return found


def __getattr__(name: str) -> Any:
    """``cmd_query`` and the other command functions, imported on first use."""
    for home, attribute in COMMANDS.values():
        if attribute == name:
            return getattr(importlib.import_module(home), attribute)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def _check_query(args: argparse.Namespace) -> str | None:
    """What is wrong with a query's command line (an empty question, an unused option)."""
    if not args.question.strip():
        return "the question is empty; ask something, e.g. s2b query 'who was Rollo?'"
    unused = [
        (
            args.window_size is not None and args.mode not in ("window", "pack"),
            "--window-size",
            "window or pack",
        ),
        (args.parent_level is not None and args.mode != "parent", "--parent-level", "parent"),
    ]
    for wrong, option, mode in unused:
        if wrong:
            return f"{option} is for --mode {mode}; --mode {args.mode} does not use it"
    return None


# Command line ----------------------------------------------------------------------


def _int(minimum: int, maximum: int | None = None) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum or (maximum is not None and value > maximum):
            allowed = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            msg = f"must be an integer {allowed}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _cosine(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not -1 <= value <= 1:  # NaN fails it too
        msg = f"must be a number from -1 to 1 (a cosine), got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        msg = f"invalid mode(s) {bad or text!r}; choose from {', '.join(MODES)}"
        raise argparse.ArgumentTypeError(msg)
    return modes


def _budgets(text: str) -> list[int]:
    return [_int(1)(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The ``s2b`` argument parser."""
    parser = _Parser(prog="s2b", description="Small-to-big retrieval from the command line.")
    parser.add_argument("--version", action="version", version=f"s2b {__version__}")
    common = _Parser(add_help=False)
    common.add_argument("--store", required=True, metavar="DIR", help="the index directory")
    common.add_argument(
        "--embedding", metavar="PROVIDER:MODEL",
        help="local:e5 (offline, the default), fake, or e.g. openai:text-embedding-3-small, "
        "ollama:nomic-embed-text (init_embeddings names); the store keeps its choice",
    )  # fmt: skip
    writer = _Parser(add_help=False)
    writer.add_argument(
        "--no-wait", action="store_true",
        help="if another run writes to the store, stop at once instead of waiting",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add = commands.add_parser

    index = add("index", parents=[common, writer], help="index files and folders")
    index.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index")
    index.add_argument(
        "--strict", action="store_true", help="stop at the first file that cannot be read"
    )
    index.add_argument(
        "--headers", action=argparse.BooleanOptionalAction, default=None,
        help="embed and search each chunk under its title and section path (default: the "
        "store's setting; a new store's: on); a change indexes every file again, reusing "
        "the vectors of any text embedded before",
    )  # fmt: skip
    index.add_argument(
        "--context-model", metavar="PROVIDER:MODEL", default=None,
        help="a chat model (init_chat_model names, e.g. anthropic:claude-3-5-haiku-latest) "
        "that writes a context for each paragraph, embedded with its chunks; the store "
        "keeps it (--no-context-model: none)",
    )  # fmt: skip
    index.add_argument(
        "--no-context-model", dest="context_model", action="store_const", const="",
        help="no context model from now on",
    )  # fmt: skip
    index.add_argument(
        "--proxies", choices=PROXY_CHOICES, default=None,
        help="a chat model (--proxy-model) writes propositions per paragraph (Dense X), a "
        "summary per section or questions per paragraph, searched in place of the text they "
        "stand for; the store keeps the setting (--no-proxies: none)",
    )  # fmt: skip
    index.add_argument(
        "--no-proxies", dest="proxies", action="store_const", const="",
        help="no model-written proxies from now on",
    )  # fmt: skip
    index.add_argument(
        "--proxy-model", metavar="PROVIDER:MODEL", default=None,
        help="the chat model that writes the --proxies (init_chat_model names); the store keeps it",
    )  # fmt: skip

    query = add("query", parents=[common], help="print the contexts that answer a question")
    query.add_argument("question")
    query.add_argument("--mode", choices=MODES, default=DEFAULT_MODE, help="what one result is")
    query.add_argument(
        "-k", type=_int(1, MAX_K), default=None,
        help=f"results (default {DEFAULT_K}; with --max-tokens, as many as fit; at most {MAX_K})",
    )  # fmt: skip
    query.add_argument("--window-size", type=_int(0), metavar="N", help="window: neighbours")
    query.add_argument("--max-tokens", type=_int(1), metavar="N", help="token ceiling, all results")
    query.add_argument(
        "--min-score", type=_cosine, metavar="X",
        help="drop contexts whose best match's cosine is below X, -1 to 1, in the model's own "
        "units (default: off; see the README for what a value means per model)",
    )  # fmt: skip
    _token_counter_option(query)
    query.add_argument(
        "--parent-level",
        choices=PARENT_LEVELS,
        help=f"parent: the level a result is (default {PARENT_LEVEL}: about section size)",
    )
    query.add_argument("--json", action="store_true", help="machine-readable output")
    query.add_argument(
        "--max-chars", type=_int(0), default=1200, metavar="N",
        help="show N characters of each context around its best match (0: all)",
    )  # fmt: skip

    listing = add("list", parents=[common], help="the indexed files, the model, the store's size")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    delete = add("delete", parents=[common, writer], help="remove files or folders from the index")
    delete.add_argument("paths", nargs="+", metavar="PATH", help="indexed files or folders")
    verify = add("verify", parents=[common, writer], help="check (and repair) the index")
    verify.add_argument("--repair", action="store_true", help="fix what the check finds")

    ev = add("eval", parents=[common], help="hit rate, evidence recall and tokens per mode")
    ev.add_argument("--questions", required=True, metavar="FILE", help="questions JSONL")
    ev.add_argument("--modes", type=_modes, default=list(MODES), help="comma-separated modes")
    ev.add_argument(
        "-k", type=_int(1), default=DEFAULT_K, help=f"results per question (default {DEFAULT_K})"
    )
    ev.add_argument("--limit", type=_int(1), metavar="N", help="only the first N questions")
    ev.add_argument(
        "--budgets", type=_budgets, metavar="N,N...",
        help=f"token budgets (default {','.join(map(str, BUDGETS))})",
    )  # fmt: skip
    ev.add_argument("--json", action="store_true", help="machine-readable output")
    _token_counter_option(ev)

    srv = add("serve", parents=[common], help="serve the index to agents over MCP (search, read)")
    srv.add_argument(
        "--http", metavar="HOST:PORT",
        help="streamable HTTP at HOST:PORT (host 127.0.0.1 unless given; port 0: any free "
        "one), instead of stdio",
    )  # fmt: skip
    srv.add_argument(
        "--token", metavar="TOKEN",
        help=f"with --http: require this bearer token (or set ${TOKEN_ENV})",
    )  # fmt: skip
    return parser


def _token_counter_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token-counter",
        choices=sorted(COUNTERS),
        default=DEFAULT_COUNTER,
        help="how budgets count tokens: LangChain's count_tokens_approximately "
        f"('{DEFAULT_COUNTER}', the Python default) or whitespace-separated words",
    )


def _validation_line(err: Any) -> str:
    first = err.errors()[0] if err.errors() else {"loc": (), "msg": str(err)}
    where = ".".join(str(p) for p in first.get("loc", ())) or err.title
    return f"bad configuration: {where}: {first.get('msg')}"


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    problem = _check_query(args) if args.command == "query" else None
    if problem is not None:
        parser.exit(2, f"s2b query: error: {one_line(problem)} (see s2b query --help)\n")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``s2b``; returns the exit status (see the module docstring)."""
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    try:
        with warnings.catch_warnings(record=True) as caught:
            _record_warnings()
            code = command(args.command)(args, sys.stdout)
            sys.stdout.flush()
        _print_warnings(caught)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except (sqlite3.Error, OSError) as err:
        print(f"s2b: error: {one_line(_io_line(err, args))}", file=sys.stderr)
    except (UserError, ValueError, ImportError, LookupError) as err:
        text = _validation_line(err) if _is_validation_error(err) else str(err)
        print(f"s2b: error: {one_line(text) or type(err).__name__}", file=sys.stderr)
    except KeyboardInterrupt:
        print(
            "s2b: interrupted; what was embedded and committed is kept "
            "(run the same command again to finish)",
            file=sys.stderr,
        )
        return 130
    else:
        return code
    return 1


def _is_validation_error(err: BaseException) -> bool:
    """A pydantic ``ValidationError`` (a ``ValueError``), known without importing pydantic."""
    kind = type(err)
    return kind.__name__ == "ValidationError" and kind.__module__.startswith("pydantic")


def _io_line(err: sqlite3.Error | OSError, args: argparse.Namespace) -> str:
    """A database or disk error in one line: a full disk says so, naming the store."""
    line = store_error(err, Path(args.store)) if hasattr(args, "store") else ""
    if isinstance(err, sqlite3.Error) or line.startswith("the disk holding"):
        return line
    return str(err) or type(err).__name__


def _record_warnings() -> None:
    """Warnings that Python shows by default are kept, to be printed one line each."""
    warnings.simplefilter("ignore")
    for category in (UserWarning, RuntimeWarning, FutureWarning):
        warnings.simplefilter("always", category)


def _print_warnings(caught: list[warnings.WarningMessage]) -> None:
    """After a command that succeeded: each distinct warning, in one line."""
    for text in dict.fromkeys(str(w.message) for w in caught):
        print(f"s2b: warning: {one_line(text)}", file=sys.stderr)


def _silence_stdout() -> None:
    """After a broken pipe: send what is left to /dev/null so Python's exit stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
