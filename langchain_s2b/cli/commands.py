"""The ``s2b`` command and its subcommands: index, query, list, delete, verify, eval, serve.

.. code-block:: bash

    s2b index docs/ notes.md articles.jsonl --store .s2b
    s2b query "who was Rollo?" --store .s2b --mode window -k 3
    s2b query "who was Rollo?" --store .s2b --json | jq '.results[0].score'
    s2b list --store .s2b
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
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pydantic import ValidationError

from langchain_s2b import __version__, evaluation
from langchain_s2b.cli import display, indexer, serve
from langchain_s2b.cli.errors import UserError, one_line, safe, safe_json
from langchain_s2b.cli.index_dir import (
    PARENT_LEVEL,
    PARENT_LEVELS,
    Store,
    open_or_create,
    open_store,
    writer_lock,
)
from langchain_s2b.cli.loaders import SUFFIXES, absolute, find_files
from langchain_s2b.cli.querying import (
    DEFAULT_COUNTER,
    DEFAULT_K,
    DEFAULT_MODE,
    TOKEN_COUNTERS,
    damaged,
    query_options,
)
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.keys import encode_source_key, is_manifest_key, source_key_of
from langchain_s2b.core.params import MODES

EMBEDDING_ENV = "S2B_EMBEDDING"
EXIT_SKIPPED = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def _wanted_embedding(args: argparse.Namespace) -> str | None:
    """``--embedding``, else ``$S2B_EMBEDDING`` (empty means unset), else ``None``."""
    return args.embedding or os.environ.get(EMBEDDING_ENV) or None


# Progress --------------------------------------------------------------------------


def _progress(total: int, unit: str, desc: str | None = None) -> Any:
    """A tqdm bar (with its ETA) on a terminal; a silent stand-in otherwise."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not sys.stderr.isatty() or total == 0:
        return _NoBar()
    return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, leave=False, mininterval=0)


class _NoBar:
    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


@contextmanager
def _reading(store: Store) -> Iterator[Store]:
    """One snapshot of the store for the whole command; a damaged store is one line."""
    try:
        with store.db.read():
            store.restore()
            yield store
    except MissingNodeError as err:
        raise damaged(store.directory, err) from None
    finally:
        store.close()


# Commands --------------------------------------------------------------------------


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b index PATH... --store DIR``."""
    directory = Path(args.store)
    found = find_files(args.paths, exclude=directory)
    if not found.files and not found.folders:
        msg = f"nothing to index in {' '.join(args.paths)} (looked for {', '.join(SUFFIXES)})"
        raise UserError(msg)
    if not found.files and not (directory / "s2b.sqlite").exists():
        msg = f"nothing to index in {' '.join(args.paths)} (looked for {', '.join(SUFFIXES)})"
        raise UserError(msg)

    def on_skip(path: str, reason: str) -> None:
        print(one_line(f"s2b: skipped {path}: {reason}"), file=sys.stderr)

    with writer_lock(directory, wait=not args.no_wait):
        store = open_or_create(directory, _wanted_embedding(args), search=False)
        try:
            store.restore()
            done = indexer.run(
                store,
                found,
                strict=args.strict,
                on_skip=on_skip,
                progress=lambda total: _progress(total, "chunk", "embedding"),
            )
        finally:
            store.close()
    _report_index(done, found, directory, out)
    if done.skipped:
        print(
            f"s2b: {len(done.skipped)} file(s) could not be read and were skipped", file=sys.stderr
        )
        return EXIT_SKIPPED
    return 0


def _report_index(done: indexer.Outcome, found: Any, directory: Path, out: TextIO) -> None:
    files = done.added + done.updated + done.unchanged
    if done.added or done.updated or done.removed:
        reused = done.chunks - done.embedded
        print(
            one_line(
                f"indexed {files} file(s) into {directory}: {done.added} added, "
                f"{done.updated} updated, {done.removed} removed, {done.unchanged} unchanged; "
                f"{done.documents} document(s), {done.chunks} chunk(s) "
                f"({done.embedded} embedded, {reused} reused)"
            ),
            file=out,
        )
    else:
        print(one_line(f"nothing to do: all {files} file(s) unchanged in {directory}"), file=out)
    if found.hidden:
        print(f"skipped {found.hidden} hidden file(s) (names starting with '.')", file=out)


def cmd_query(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b query QUESTION --store DIR``."""
    options = query_options(
        mode=args.mode,
        k=args.k,
        window_size=args.window_size,
        max_tokens=args.max_tokens,
        parent_level=args.parent_level,
        token_counter=args.token_counter,
    )
    with _reading(open_store(Path(args.store), _wanted_embedding(args))) as store:
        docs = store.retriever.invoke(args.question, **options)
    if args.json:
        payload = {
            "query": args.question,
            **options,
            "token_counter": args.token_counter,
            "results": [display.result_json(d, i) for i, d in enumerate(docs, 1)],
        }
        print(safe_json(json.dumps(payload, ensure_ascii=False, indent=2)), file=out)
    elif not docs:
        print("no results", file=out)
    elif out.isatty() and display.has_rich():
        display.print_rich(docs, args.max_chars, out)
    else:
        for i, doc in enumerate(docs, 1):
            print(display.plain(doc, i, args.max_chars), file=out)
    return 0


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b list --store DIR``: the indexed files."""
    store = open_store(Path(args.store), _wanted_embedding(args))
    try:
        rows = store.files()
    finally:
        store.close()
    for row in rows.values():
        state = "" if os.path.exists(row.path) else "  (file no longer exists)"
        print(
            one_line(f"{row.path}  {len(row.sources)} document(s), {row.chunks} chunk(s){state}"),
            file=out,
        )
    docs = sum(len(r.sources) for r in rows.values())
    chunks = sum(r.chunks for r in rows.values())
    print(
        one_line(f"{len(rows)} file(s), {docs} document(s), {chunks} chunk(s) in {args.store}"),
        file=out,
    )
    return 0


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b delete PATH... --store DIR``: remove files (or every file under folders)."""
    directory = Path(args.store)
    with writer_lock(directory, wait=not args.no_wait):
        store = open_store(directory, _wanted_embedding(args), search=False)
        try:
            rows = store.files()
            chosen: dict[str, Any] = {}
            missing = []
            for raw in args.paths:
                path = str(absolute(raw))
                hits = [p for p in rows if p == path or p.startswith(path.rstrip(os.sep) + os.sep)]
                chosen.update((p, rows[p]) for p in hits)
                if not hits:
                    missing.append(raw)
            kept = {s for p, r in rows.items() if p not in chosen for s in r.sources}
            sources = [s for r in chosen.values() for s in r.sources if s not in kept]
            with store.db.write():
                store.restore()
                store.retriever.delete(sources)
                for path in chosen:
                    store.drop_file(path)
            store.cache.collect_garbage(store.index.released)
        finally:
            store.close()
    print(
        one_line(f"deleted {len(chosen)} file(s) ({len(sources)} document(s)) from {directory}"),
        file=out,
    )
    for raw in missing:
        print(one_line(f"s2b: error: {raw} is not in the index (see s2b list)"), file=sys.stderr)
    return 1 if missing else 0


def cmd_verify(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b verify --store DIR [--repair]``: nodes, manifests and vectors agree."""
    directory = Path(args.store)
    lock = writer_lock(directory, wait=not args.no_wait) if args.repair else nullcontext()
    with lock:
        store = open_store(directory, _wanted_embedding(args))
        try:
            with store.db.write() if args.repair else store.db.read():
                store.restore()
                report = store.retriever.verify(repair=args.repair)
                lost = _files_without_sources(store)
                if args.repair:
                    for path in lost:
                        store.drop_file(path)
            if args.repair:
                store.cache.collect_garbage()
        finally:
            store.close()
    damaged = len(report.missing_nodes) + len(report.missing_children)
    orphans = len(report.orphan_nodes) + len(report.orphan_children)
    print(
        f"{report.sources} source(s), {report.nodes} node(s), {report.children} vector(s); "
        f"{damaged} damaged source(s), {orphans} orphan(s), "
        f"{len(report.bad_manifests)} bad manifest(s), {len(lost)} file(s) with lost documents",
        file=out,
    )
    if args.repair and (not report.ok or lost):
        print(
            f"repaired: {len(report.rebuilt)} source(s) rebuilt, {len(report.removed)} removed, "
            f"{orphans} orphan(s) deleted; {len(lost)} file(s) will be read again by s2b index",
            file=out,
        )
        return 0
    if report.ok and not lost:
        print("ok", file=out)
        return 0
    print(
        f"s2b: error: {directory} is damaged; run: s2b verify --repair --store {directory}",
        file=sys.stderr,
    )
    return 1


def _files_without_sources(store: Store) -> list[str]:
    """Indexed files one of whose documents has no manifest (it was lost)."""
    present = {source_key_of(k) for k in store.docstore.yield_keys() if is_manifest_key(k)}
    return [
        path
        for path, row in store.files().items()
        if any(encode_source_key(s) not in present for s in row.sources)
    ]


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b eval --store DIR --questions FILE``."""
    try:
        questions = evaluation.load_questions(args.questions, limit=args.limit)
    except OSError as err:
        msg = f"cannot read {args.questions}: {err.strerror or err}"
        raise UserError(msg) from None
    if not questions:
        msg = f"no questions in {args.questions}"
        raise UserError(msg)
    with _reading(open_store(Path(args.store), _wanted_embedding(args))) as store:
        retriever = store.retriever
        rows: dict[str, Any] = {"sentences (plain chunks)": retriever.vectorstore.as_retriever()}
        for mode in args.modes:
            rows[mode] = retriever.model_copy(update={"mode": mode})
        reports = []
        bar = _progress(len(questions) * len(rows), "question")
        try:
            for name, row in rows.items():
                reports.append(
                    evaluation.evaluate(
                        row, questions, name=name, k=args.k, budgets=tuple(args.budgets),
                        token_counter=TOKEN_COUNTERS[args.token_counter], progress=bar.update,
                    )
                )  # fmt: skip
        finally:
            bar.close()
    if args.json:
        fields = ("name", "k", "n", "hit_rate", "answer_rate", "evidence_recall", "mean_tokens")
        data = [{f: getattr(r, f) for f in fields} | {"hit_at": r.hit_at} for r in reports]
        print(json.dumps(data, indent=2), file=out)
    else:
        print(f"{len(questions)} questions, k={args.k}; rates in %\n", file=out)
        print(safe(evaluation.markdown_table(reports)), file=out)
    return 0


def cmd_serve(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b serve --store DIR [--http HOST:PORT] [--token T]``: the index as an MCP server."""
    token = args.token or os.environ.get(serve.TOKEN_ENV) or None
    if args.token and args.http is None:
        msg = "--token protects --http; over stdio only the client that starts s2b can reach it"
        raise UserError(msg)
    try:
        return serve.run(Path(args.store), _wanted_embedding(args), http=args.http, token=token)
    except KeyboardInterrupt:
        return 0


# Command line ----------------------------------------------------------------------


def _int(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            msg = f"must be an integer >= {minimum}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


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

    query = add("query", parents=[common], help="print the contexts that answer a question")
    query.add_argument("question")
    query.add_argument("--mode", choices=MODES, default=DEFAULT_MODE, help="what one result is")
    query.add_argument("-k", type=_int(1), default=DEFAULT_K, help=f"results (default {DEFAULT_K})")
    query.add_argument("--window-size", type=_int(0), metavar="N", help="window: neighbours")
    query.add_argument("--max-tokens", type=_int(1), metavar="N", help="token ceiling, all results")
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

    add("list", parents=[common], help="the indexed files")
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
    ev.add_argument("--budgets", type=_budgets, default=list(evaluation.BUDGETS))
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
        help=f"with --http: require this bearer token (or set ${serve.TOKEN_ENV})",
    )  # fmt: skip
    return parser


def _token_counter_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--token-counter",
        choices=sorted(TOKEN_COUNTERS),
        default=DEFAULT_COUNTER,
        help="how budgets count tokens: LangChain's count_tokens_approximately "
        f"('{DEFAULT_COUNTER}', the Python default) or whitespace-separated words",
    )


COMMANDS = {
    "index": cmd_index,
    "query": cmd_query,
    "list": cmd_list,
    "delete": cmd_delete,
    "verify": cmd_verify,
    "eval": cmd_eval,
    "serve": cmd_serve,
}


def _validation_line(err: ValidationError) -> str:
    first = err.errors()[0] if err.errors() else {"loc": (), "msg": str(err)}
    where = ".".join(str(p) for p in first.get("loc", ())) or err.title
    return f"bad configuration: {where}: {first.get('msg')}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``s2b``; returns the exit status (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    try:
        code = COMMANDS[args.command](args, sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except ValidationError as err:
        print(f"s2b: error: {one_line(_validation_line(err))}", file=sys.stderr)
    except (UserError, ValueError, OSError, ImportError, LookupError, sqlite3.Error) as err:
        print(f"s2b: error: {one_line(str(err)) or type(err).__name__}", file=sys.stderr)
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


def _silence_stdout() -> None:
    """After a broken pipe: send what is left to /dev/null so Python's exit stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
