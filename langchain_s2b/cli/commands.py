"""The ``s2b`` command: its arguments and its commands (index, query, eval).

.. code-block:: bash

    s2b index docs/ notes.md articles.jsonl --store .s2b
    s2b query "who was Rollo?" --store .s2b --mode window -k 3
    s2b query "who was Rollo?" --store .s2b --json | jq '.results[0].score'
    s2b eval --store .s2b --questions questions.jsonl

One index serves every mode: it is built on the multilevel tree (sentences
inside paragraphs inside sections inside the document), so ``--mode parent``
returns the paragraph around the best sentences, ``window`` a window of
sentences and ``multilevel`` the smallest node that covers the evidence.
A user mistake prints one line on stderr and exits with status 1 (2 for a bad
command line); it never shows a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from langchain_core.documents import Document

from langchain_s2b import __version__, evaluation
from langchain_s2b.cli import display
from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.index_dir import (
    CONFIG_FILE,
    EMBEDDINGS,
    create_store,
    open_store,
    save_store,
)
from langchain_s2b.cli.loaders import SUFFIXES, load_paths
from langchain_s2b.core.ingest import IndexingResult
from langchain_s2b.core.params import MODES
from langchain_s2b.retriever import SmallToBigRetriever

MARKER = "INDEXING"
EMBEDDING_ENV = "S2B_EMBEDDING"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _wanted_embedding(args: argparse.Namespace) -> str | None:
    """``--embedding``, else ``$S2B_EMBEDDING`` (empty means unset), else ``None``."""
    return args.embedding or os.environ.get(EMBEDDING_ENV) or None


# Commands --------------------------------------------------------------------------


def _progress(total: int, unit: str) -> Any:
    """A tqdm bar on a terminal; a silent stand-in otherwise (or without tqdm)."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not sys.stderr.isatty():
        return _NoBar()
    return tqdm(total=total, unit=unit, file=sys.stderr, leave=False)


class _NoBar:
    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


def cmd_index(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b index PATH... --store DIR``."""
    store = Path(args.store)
    wanted = _wanted_embedding(args)
    docs = load_paths(args.paths, exclude=store)
    if not docs:
        msg = f"nothing to index in {' '.join(args.paths)} (looked for {', '.join(SUFFIXES)})"
        raise UserError(msg)
    if (store / CONFIG_FILE).exists():
        retriever = open_store(store, wanted)
    else:
        retriever = create_store(store, wanted or "e5")
    marker = store / MARKER
    repaired = marker.exists() and _repair(retriever, out)
    marker.write_text("an s2b index run is writing, or was interrupted\n", encoding="utf-8")
    total = _add(retriever, docs)
    if total.added or total.updated or repaired:
        save_store(retriever, store)
    marker.unlink()
    if total.added or total.updated:
        print(
            f"indexed {len(docs)} document(s) into {store}: {len(total.added)} added, "
            f"{len(total.updated)} updated, {len(total.unchanged)} unchanged, "
            f"{total.num_children} chunk(s) embedded",
            file=out,
        )
    else:
        print(f"nothing to do: all {len(docs)} document(s) unchanged in {store}", file=out)
    if total.empty:
        print(f"skipped {len(total.empty)} empty document(s)", file=out)
    return 0


def _add(retriever: SmallToBigRetriever, docs: Sequence[Document]) -> IndexingResult:
    """Add documents one by one (a progress bar on a terminal); sum the results."""
    total = IndexingResult()
    bar = _progress(len(docs), "doc")
    try:
        for doc in docs:
            step = retriever.add_documents([doc])
            for name in ("added", "updated", "unchanged", "empty"):
                getattr(total, name).extend(getattr(step, name))
            total.num_children += step.num_children
            bar.update(1)
    finally:
        bar.close()
    return total


def _repair(retriever: SmallToBigRetriever, out: TextIO) -> bool:
    """After an interrupted run: make the parents and the child index agree again."""
    report = retriever.verify(repair=True)
    if report.ok and not report.repaired:
        return False
    print(
        f"repaired an interrupted index: {len(report.rebuilt)} source(s) re-indexed, "
        f"{len(report.removed)} removed, "
        f"{len(report.orphan_nodes) + len(report.orphan_children)} orphan(s) deleted",
        file=out,
    )
    if report.removed:
        print(f"add these again: {', '.join(report.removed)}", file=out)
    return True


def cmd_query(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b query QUESTION --store DIR``."""
    store = Path(args.store)
    retriever = open_store(store, _wanted_embedding(args))
    if (store / MARKER).exists():
        print(
            f"s2b: warning: indexing {store} was interrupted; run s2b index again", file=sys.stderr
        )
    options: dict[str, Any] = {"mode": args.mode, "k": args.k}
    if args.window_size is not None:
        options["window_size"] = args.window_size
    if args.max_tokens is not None:
        options["max_tokens"] = args.max_tokens
    docs = retriever.invoke(args.question, **options)
    if args.json:
        payload = {
            "query": args.question,
            **options,
            "results": [display.result_json(d, i) for i, d in enumerate(docs, 1)],
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2), file=out)
    elif not docs:
        print("no results", file=out)
    elif out.isatty() and display.has_rich():
        display.print_rich(docs, args.max_chars, out)
    else:
        for i, doc in enumerate(docs, 1):
            print(display.plain(doc, i, args.max_chars), file=out)
    return 0


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b eval --store DIR --questions FILE``."""
    retriever = open_store(Path(args.store), _wanted_embedding(args))
    try:
        questions = evaluation.load_questions(args.questions, limit=args.limit)
    except OSError as err:
        msg = f"cannot read {args.questions}: {err.strerror or err}"
        raise UserError(msg) from None
    if not questions:
        msg = f"no questions in {args.questions}"
        raise UserError(msg)
    leaf = retriever.vectorstore.as_retriever()
    rows: dict[str, Any] = {"sentences (plain chunks)": leaf}
    for mode in args.modes:
        rows[mode] = retriever.model_copy(update={"mode": mode})
    budgets = tuple(args.budgets)
    reports = []
    bar = _progress(len(questions) * len(rows), "question")
    try:
        for name, row in rows.items():
            reports.append(
                evaluation.evaluate(
                    row, questions, name=name, k=args.k, budgets=budgets, progress=bar.update
                )
            )
    finally:
        bar.close()
    if args.json:
        fields = ("name", "k", "n", "hit_rate", "answer_rate", "evidence_recall", "mean_tokens")
        data = [{f: getattr(r, f) for f in fields} | {"hit_at": r.hit_at} for r in reports]
        print(json.dumps(data, indent=2), file=out)
    else:
        print(f"{len(questions)} questions, k={args.k}; rates in %\n", file=out)
        print(evaluation.markdown_table(reports), file=out)
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
    common.add_argument("--embedding", choices=EMBEDDINGS, help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add = commands.add_parser

    index = add("index", parents=[common], help="index .txt/.md files and JSONL documents")
    index.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index")

    query = add("query", parents=[common], help="print the contexts that answer a question")
    query.add_argument("question")
    query.add_argument("--mode", choices=MODES, default="parent", help="what one result is")
    query.add_argument("-k", type=_int(1), default=3, help="results (default 3)")
    query.add_argument("--window-size", type=_int(0), metavar="N", help="window: neighbours")
    query.add_argument("--max-tokens", type=_int(1), metavar="N", help="budget for all results")
    query.add_argument("--json", action="store_true", help="machine-readable output")
    query.add_argument(
        "--max-chars", type=_int(0), default=1200, metavar="N",
        help="show N characters of each context around its best match (0: all)",
    )  # fmt: skip

    ev = add("eval", parents=[common], help="hit rate, evidence recall and tokens per mode")
    ev.add_argument("--questions", required=True, metavar="FILE", help="questions JSONL")
    ev.add_argument("--modes", type=_modes, default=list(MODES), help="comma-separated modes")
    ev.add_argument("-k", type=_int(1), default=4, help="results per question (default 4)")
    ev.add_argument("--limit", type=_int(1), metavar="N", help="only the first N questions")
    ev.add_argument("--budgets", type=_budgets, default=list(evaluation.BUDGETS))
    ev.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


COMMANDS = {"index": cmd_index, "query": cmd_query, "eval": cmd_eval}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``s2b``; returns the exit status (0 ok, 1 error, 2 bad command line)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return int(stop.code or 0)
    try:
        return COMMANDS[args.command](args, sys.stdout)
    except (UserError, ValueError, OSError, ImportError) as err:
        print(f"s2b: error: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        print("s2b: interrupted", file=sys.stderr)
        return 130
    return 1
