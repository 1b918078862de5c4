"""The ``s2b`` command line: index files, query them, evaluate retrieval.

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
import re
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_s2b import display, evaluation
from langchain_s2b.index import FaissIndex
from langchain_s2b.ingest import IndexingResult
from langchain_s2b.loaders import SUFFIXES, load_paths
from langchain_s2b.params import MODES
from langchain_s2b.retrievers import SmallToBigRetriever

CONFIG_FILE = "s2b-cli.json"
INDEX_DIR = "index"
PARENTS_DIR = "parents"
MARKER = "INDEXING"
EMBEDDINGS = ("e5", "fake")
EMBEDDING_ENV = "S2B_EMBEDDING"
INDEX_MODE = "multilevel"
"""The tree the CLI builds: sentences < paragraphs < sections < document."""


class UserError(Exception):
    """A mistake in the command line or its inputs: one line, no traceback."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# Embeddings ------------------------------------------------------------------


class HashingEmbeddings(Embeddings):
    """Hashed bag of words (offline, instant): ``--embedding fake`` for tests."""

    def __init__(self, size: int = 256) -> None:
        self.size = size

    def _one(self, text: str) -> list[float]:
        vec = [0.0] * self.size
        for word in re.findall(r"\w+", text.lower()):
            vec[zlib.crc32(word.encode()) % self.size] += 1.0
        vec[0] += 1e-3
        return vec

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text."""
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """The query's vector."""
        return self._one(text)


def _wanted_embedding(args: argparse.Namespace) -> str | None:
    """``--embedding``, else ``$S2B_EMBEDDING`` (empty means unset), else ``None``."""
    return args.embedding or os.environ.get(EMBEDDING_ENV) or None


def make_embedding(name: str) -> Embeddings:
    """The embedding called ``name``: ``e5`` (the offline default) or ``fake``."""
    if name == "fake":
        return HashingEmbeddings()
    if name == "e5":
        from langchain_s2b.embeddings import LocalE5Embeddings

        return LocalE5Embeddings()
    msg = f"unknown embedding {name!r}; allowed: {', '.join(EMBEDDINGS)}"
    raise UserError(msg)


# The on-disk index -------------------------------------------------------------
#
# DIR/s2b-cli.json   the embedding the index was built with
# DIR/index/         the child index and retriever config (SmallToBigRetriever.save)
# DIR/parents/       every node, one JSON file each (a LocalFileStore)
# DIR/INDEXING       present while ``s2b index`` writes; left behind by a crash


def _config_path(store: Path) -> Path:
    return store / CONFIG_FILE


def _parent_store(store: Path) -> Any:
    try:
        from langchain_classic.storage import LocalFileStore
    except ImportError as err:
        msg = 's2b keeps the parents in a LocalFileStore: pip install "langchain-s2b[cli]"'
        raise ImportError(msg) from err
    return LocalFileStore(store / PARENTS_DIR)


def create_store(store: Path, embedding_name: str) -> SmallToBigRetriever:
    """A new, empty index in ``store`` (a new or empty directory)."""
    if store.exists() and not store.is_dir():
        msg = f"--store {store} exists and is not a directory"
        raise UserError(msg)
    if store.is_dir() and any(store.iterdir()):
        msg = f"--store {store} is a non-empty directory that is not an s2b index"
        raise UserError(msg)
    embedding = make_embedding(embedding_name)
    store.mkdir(parents=True, exist_ok=True)
    config = {"version": 1, "embedding": embedding_name, "tree": INDEX_MODE}
    _config_path(store).write_text(json.dumps(config) + "\n", encoding="utf-8")
    return SmallToBigRetriever(
        vectorstore=FaissIndex(embedding), byte_store=_parent_store(store), mode=INDEX_MODE
    )


def open_store(store: Path, embedding_name: str | None = None) -> SmallToBigRetriever:
    """Load the index in ``store`` with the embedding it was built with."""
    name = str(read_config(store).get("embedding", "e5"))
    if embedding_name is not None and embedding_name != name:
        msg = f"{store} was indexed with embedding {name!r}, not {embedding_name!r}"
        raise UserError(msg)
    embedding = make_embedding(name)
    parents = _parent_store(store)
    if not (store / INDEX_DIR).is_dir():  # the first ``s2b index`` never finished
        return SmallToBigRetriever(
            vectorstore=FaissIndex(embedding), byte_store=parents, mode=INDEX_MODE
        )
    return SmallToBigRetriever.load(store / INDEX_DIR, embedding, byte_store=parents)


def save_store(retriever: SmallToBigRetriever, store: Path) -> None:
    """Write the child index atomically (the parents are already on disk)."""
    retriever.save(store / INDEX_DIR)


def read_config(store: Path) -> dict[str, Any]:
    """The CLI note of an index directory; a clear error when there is no index."""
    path = _config_path(store)
    if not store.is_dir():
        msg = f"no index at --store {store} (run: s2b index PATH... --store {store})"
        raise UserError(msg)
    if not path.exists():
        msg = f"{store} is not an s2b index (no {CONFIG_FILE}); run s2b index first"
        raise UserError(msg)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        msg = f"cannot read {path}: {err}"
        raise UserError(msg) from None
    if not isinstance(config, dict):
        msg = f"{path} is not an s2b index note"
        raise UserError(msg)
    return config


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
    if _config_path(store).exists():
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
            try:
                reports.append(
                    evaluation.evaluate(
                        row, questions, name=name, k=args.k, budgets=budgets, progress=bar.update
                    )
                )
            except NotImplementedError:
                print(f"skipped {name}: not available in this version", file=sys.stderr)
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
    from langchain_s2b import __version__

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
    except NotImplementedError as err:
        print(f"s2b: error: not available in this version: {err}", file=sys.stderr)
    except KeyboardInterrupt:
        print("s2b: interrupted", file=sys.stderr)
        return 130
    return 1
