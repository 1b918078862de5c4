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

Counts mean the same in every command: a *file* is an indexed file, a
*document* a source (a text file, a PDF page, a JSONL row), a *chunk* a leaf the
index searches (a sentence), a *vector* a distinct chunk text with its stored
embedding (identical chunks share one).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pydantic import ValidationError

from langchain_s2b import __version__, evaluation
from langchain_s2b.cli import display, health, indexer, progress, serve
from langchain_s2b.cli.errors import UserError, one_line, safe, safe_json
from langchain_s2b.cli.index_dir import (
    PARENT_LEVEL,
    PARENT_LEVELS,
    Store,
    open_or_create,
    open_store,
    store_error,
    writer_lock,
)
from langchain_s2b.cli.loaders import SUFFIXES, Found, find_files, resolved
from langchain_s2b.cli.querying import (
    DEFAULT_COUNTER,
    DEFAULT_K,
    DEFAULT_MODE,
    TOKEN_COUNTERS,
    damaged,
    damaged_store,
    query_options,
)
from langchain_s2b.core.hits import MissingNodeError
from langchain_s2b.core.keys import encode_source_key, manifest_key
from langchain_s2b.core.params import MODES

EMBEDDING_ENV = "S2B_EMBEDDING"
EXIT_SKIPPED = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def _wanted_embedding(args: argparse.Namespace) -> str | None:
    """``--embedding``, else ``$S2B_EMBEDDING`` (empty means unset), else ``None``."""
    return args.embedding or os.environ.get(EMBEDDING_ENV) or None


def _damaged(store: Store, what: str) -> UserError:
    return damaged_store(store.directory, what)


def _restore(store: Store) -> None:
    """Fill FAISS from the store; a chunk left out (its node or vector damaged) is one line."""
    store.restore()
    left = store.index.unrestored
    if left:
        raise _damaged(
            store, f"{len(left)} chunk(s) without their text or vector, e.g. {left[0]!r}"
        )


@contextmanager
def _reading(store: Store) -> Iterator[Store]:
    """One snapshot of the store for the whole command; a damaged store is one line."""
    try:
        with store.db.read():
            _restore(store)
            yield store
    except MissingNodeError as err:
        raise damaged(store.directory, err) from None
    except (LookupError, TypeError) as err:  # a stored value that is not what it should be
        where = store.directory
        msg = (
            f"the index in {where} could not be read ({type(err).__name__}: {err}); "
            f"check it: s2b verify --store {where}"
        )
        raise UserError(msg) from None
    finally:
        store.close()


# Commands --------------------------------------------------------------------------


def _on_skip(path: str, reason: str) -> None:
    print(one_line(f"s2b: skipped {path}: {reason}"), file=sys.stderr)


def _on_note(path: str, note: str) -> None:
    print(one_line(f"s2b: note: {path}: {note}"), file=sys.stderr)


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b index PATH... --store DIR``."""
    clock = progress.Clock()
    directory = Path(args.store)
    found = find_files(args.paths, exclude=directory)
    if not found.files and (not found.folders or not (directory / "s2b.sqlite").exists()):
        raise UserError(_nothing_to_index(args.paths, found, directory))
    with writer_lock(directory, wait=not args.no_wait):
        store = open_or_create(directory, _wanted_embedding(args), search=False)
        try:
            _restore(store)
            done = indexer.run(
                store,
                found,
                strict=args.strict,
                on_skip=_on_skip,
                on_note=_on_note,
                progress=progress.bar,
            )
        finally:
            store.close()
    if not found.files and not done.removed:  # a folder with nothing to index (nor to remove)
        raise UserError(_nothing_to_index(args.paths, found, directory))
    _report_index(done, found, directory, out)
    if done.added or done.updated or done.removed:
        print(clock.summary(done.chunks, "chunk"), file=out)
    if done.skipped:
        print(
            f"s2b: {len(done.skipped)} file(s) could not be read and were skipped", file=sys.stderr
        )
        return EXIT_SKIPPED
    return 0


def _nothing_to_index(paths: list[str], found: Found, directory: Path) -> str:
    where = " ".join(paths)
    if found.store:
        return (
            f"nothing to index in {where}: the only files there are the store's own "
            f"(--store {directory} is inside it)"
        )
    return f"nothing to index in {where} (looked for {', '.join(SUFFIXES)}){_passed_over(found)}"


def _passed_over(found: Found) -> str:
    parts = [
        f"{found.hidden} hidden (names starting with '.')" if found.hidden else "",
        f"{found.other} of another type" if found.other else "",
    ]
    listed = ", ".join(p for p in parts if p)
    return f"; passed over {listed}" if listed else ""


def _report_index(done: indexer.Outcome, found: Found, directory: Path, out: TextIO) -> None:
    files = done.added + done.updated + done.unchanged
    if done.added or done.updated or done.removed:
        reused = done.vectors - done.embedded
        print(
            one_line(
                f"indexed {files} file(s) into {directory}: {done.added} added, "
                f"{done.updated} updated, {done.removed} removed, {done.unchanged} unchanged; "
                f"{done.documents} document(s), {done.chunks} chunk(s), {done.vectors} "
                f"vector(s) ({done.embedded} embedded, {reused} reused)"
            ),
            file=out,
        )
    else:
        print(one_line(f"nothing to do: all {files} file(s) unchanged in {directory}"), file=out)
    parts = [
        f"{found.hidden} hidden (names starting with '.')" if found.hidden else "",
        f"{found.other} of an unsupported type" if found.other else "",
        f"{len(done.skipped)} unreadable" if done.skipped else "",
    ]
    skipped = found.hidden + found.other + len(done.skipped)
    if skipped:
        print(f"skipped {skipped} file(s): {', '.join(p for p in parts if p)}", file=out)


def _check_query(args: argparse.Namespace) -> str | None:
    """What is wrong with a query's command line (an empty question, an unused option)."""
    if not args.question.strip():
        return "the question is empty; ask something, e.g. s2b query 'who was Rollo?'"
    unused = [
        (args.window_size is not None and args.mode != "window", "--window-size", "window"),
        (args.parent_level is not None and args.mode != "parent", "--parent-level", "parent"),
    ]
    for wrong, option, mode in unused:
        if wrong:
            return f"{option} is for --mode {mode}; --mode {args.mode} does not use it"
    return None


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
    """``s2b list --store DIR [--json]``: the indexed files, the model and the store's size."""
    store = open_store(Path(args.store), _wanted_embedding(args))
    try:
        with store.db.read():
            rows = store.files()
            counts = store.counts()
            dangling = store.dangling_chunks()
            damaged_rows = len(store.damaged_files())
    finally:
        store.close()
    size = store.size()  # closed: the write-ahead log is merged into the database file
    files = [
        {
            "path": row.path,
            "documents": len(row.sources),
            "chunks": row.chunks,
            "exists": os.path.exists(row.path),
        }
        for row in rows.values()
    ]
    if args.json:
        payload = {"store": str(args.store), "embedding": store.spec, "bytes": size, **counts}
        payload["files_indexed"] = files
        print(safe_json(json.dumps(payload, ensure_ascii=False, indent=2)), file=out)
    else:
        for f in files:
            state = "" if f["exists"] else "  (file no longer exists)"
            print(
                one_line(
                    f"{f['path']}  {f['documents']} document(s), {f['chunks']} chunk(s){state}"
                ),
                file=out,
            )
        print(one_line(f"{_counts_line(counts)} in {args.store}"), file=out)
        print(one_line(f"embedding {store.spec}; {_size(size)} on disk"), file=out)
    problems = [
        f"{dangling} chunk(s) without their vector" if dangling else "",
        f"{damaged_rows} damaged file record(s)" if damaged_rows else "",
    ]
    if dangling or damaged_rows:
        raise _damaged(store, ", ".join(p for p in problems if p))
    return 0


def _counts_line(counts: dict[str, int]) -> str:
    return ", ".join(
        f"{counts[name]} {name[:-1]}(s)" for name in ("files", "documents", "chunks", "vectors")
    )


def _size(size: int) -> str:
    """``912 bytes``, ``1.3 MB``."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b delete PATH... --store DIR``: remove files (or every file under folders)."""
    directory = Path(args.store)
    with writer_lock(directory, wait=not args.no_wait):
        store = open_store(directory, _wanted_embedding(args), search=False, writer=True)
        try:
            rows = store.files()
            chosen: dict[str, Any] = {}
            missing = []
            for raw in args.paths:
                path = str(resolved(raw))
                hits = [p for p in rows if p == path or p.startswith(path.rstrip(os.sep) + os.sep)]
                chosen.update((p, rows[p]) for p in hits)
                if not hits:
                    missing.append(raw)
            kept = {s for p, r in rows.items() if p not in chosen for s in r.sources}
            sources = [s for r in chosen.values() for s in r.sources if s not in kept]
            with store.db.write():
                _restore(store)
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
    """``s2b verify --store DIR [--repair]``: every row, digest and document checked."""
    directory = Path(args.store)
    lock = writer_lock(directory, wait=not args.no_wait) if args.repair else nullcontext()
    with lock:
        store = open_store(directory, _wanted_embedding(args), writer=args.repair)
        try:
            found, counts = health.check(store, repair=args.repair)
            _report_health(found, counts, out)
            if found.damage.database:
                return _damaged_file(store, found, out, repair=args.repair)
            if not args.repair:
                if found.ok:
                    print("ok", file=out)
                    return 0
                repair = f"s2b verify --repair --store {directory}"
                print(f"s2b: error: {directory} is damaged; run: {repair}", file=sys.stderr)
                return 1
            return _after_repair(store, found, out)
        finally:
            store.close()


def _report_health(found: health.Health, counts: dict[str, int] | None, out: TextIO) -> None:
    report = found.report
    nodes = f", {report.nodes} node(s)" if report is not None else ""
    if counts is not None:
        print(f"{_counts_line(counts)}{nodes}", file=out)
    problems = _problems(found)
    if problems:
        print(f"damaged: {', '.join(problems)}", file=out)
    if found.damage.unchecked:
        print(
            f"{found.damage.unchecked} vector(s) have no digest yet (an older store): "
            "the next s2b index or verify --repair adds them",
            file=out,
        )


def _problems(found: health.Health) -> list[str]:
    damage, report = found.damage, found.report
    counted = [
        (len(damage.database), "problem(s) in the database file"),
        (len(damage.unreadable), "unreadable row(s)"),
        (len(damage.vectors), "vector(s) whose bytes changed"),
        (len(damage.children), "chunk(s) without their vector"),
        (len(found.bad_files), "damaged file record(s)"),
    ]
    if report is not None:
        missing = {*report.missing_nodes, *report.missing_children}
        counted += [
            (len(report.bad_digests), "document(s) whose text, metadata or manifest changed"),
            (len(report.bad_nodes), "document(s) with changed nodes"),
            (len(missing), "document(s) with missing pieces"),
            (len(report.orphan_nodes) + len(report.orphan_children), "orphan(s)"),
            (len(report.bad_manifests), "bad manifest(s)"),
        ]
    counted += [
        (len(found.lost), "file(s) with lost documents"),
        (len(found.unowned), "document(s) no indexed file holds"),
    ]
    return [f"{n} {what}" for n, what in counted if n]


def _damaged_file(store: Store, found: health.Health, out: TextIO, *, repair: bool) -> int:
    """The database file itself is damaged: say so, or index the files into a new one."""
    where = store.directory
    first = one_line(found.damage.database[0])
    if not repair:
        msg = (
            f"the database file in {where} is damaged ({first}); run: s2b verify --repair "
            f"--store {where} (it indexes the files again into a new database file)"
        )
        raise UserError(msg)
    done = health.rebuild(store, on_skip=_on_skip, progress=progress.bar)
    print(
        f"rebuilt: {done.done.added} file(s) indexed again into a new database file "
        f"({done.vectors} vector(s) kept from the damaged one, {done.done.embedded} embedded)",
        file=out,
    )
    for path in done.gone:
        print(one_line(f"s2b: could not rebuild {path}: the file is gone"), file=sys.stderr)
    if not done.complete:
        print(
            "s2b: the list of indexed files could be read only in part: index your folders "
            f"again into --store {where} to add the rest",
            file=sys.stderr,
        )
    return EXIT_SKIPPED if done.gone or done.done.skipped or not done.complete else 0


def _after_repair(store: Store, found: health.Health, out: TextIO) -> int:
    """Read the files of lost documents again; name those that are gone."""
    report = found.report
    assert report is not None
    files = list(dict.fromkeys(found.lost + found.bad_files))
    done, gone = health.reread(store, files, on_skip=_on_skip, progress=progress.bar)
    store.cache.collect_garbage()
    if found.ok:
        print("ok", file=out)
        return 0
    rows = len(found.damage.unreadable) + len(found.damage.vectors) + len(found.damage.children)
    orphans = len(report.orphan_nodes) + len(report.orphan_children)
    print(
        f"repaired: {len(report.rebuilt)} document(s) rebuilt from their stored text, "
        f"{len(report.removed) + len(found.unowned)} removed, {rows} damaged row(s) and "
        f"{orphans} orphan(s) deleted; {len(files) - len(gone)} file(s) read again from disk",
        file=out,
    )
    for path in gone:
        print(
            one_line(
                f"s2b: could not rebuild {path}: the file is gone; its documents left the index"
            ),
            file=sys.stderr,
        )
    return EXIT_SKIPPED if gone or done.skipped else 0


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
        _warn_absent_documents(store, questions)
        retriever = store.retriever
        rows: dict[str, Any] = {"sentences (plain chunks)": retriever.vectorstore.as_retriever()}
        for mode in args.modes:
            rows[mode] = retriever.model_copy(update={"mode": mode})
        reports = []
        bar = progress.bar(len(questions) * len(rows), "question", "evaluating")
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


def _warn_absent_documents(store: Store, questions: Sequence[evaluation.Question]) -> None:
    """One line naming the questions whose document is not in the store (they score 0)."""
    wanted = list(dict.fromkeys(q.doc_id for q in questions))
    manifests = store.docstore.mget([manifest_key(encode_source_key(d)) for d in wanted])
    absent = {d for d, m in zip(wanted, manifests, strict=True) if m is None}
    if absent:
        about = [q for q in questions if q.doc_id in absent]
        print(
            one_line(
                f"s2b: warning: {len(about)} of {len(questions)} question(s) are about "
                f"{len(absent)} document(s) not in {store.directory} (e.g. doc_id "
                f"{about[0].doc_id!r}); they score 0"
            ),
            file=sys.stderr,
        )


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
            code = COMMANDS[args.command](args, sys.stdout)
            sys.stdout.flush()
        _print_warnings(caught)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except ValidationError as err:
        print(f"s2b: error: {one_line(_validation_line(err))}", file=sys.stderr)
    except (sqlite3.Error, OSError) as err:
        print(f"s2b: error: {one_line(_io_line(err, args))}", file=sys.stderr)
    except (UserError, ValueError, ImportError, LookupError) as err:
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
