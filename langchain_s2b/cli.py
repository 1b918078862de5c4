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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_s2b import evaluation
from langchain_s2b.index import FaissIndex
from langchain_s2b.ingest import IndexingResult
from langchain_s2b.params import MODES
from langchain_s2b.retrievers import SmallToBigRetriever
from langchain_s2b.tools import source_label

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
JSONL_SUFFIXES = (".jsonl",)
CONFIG_FILE = "s2b-cli.json"
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


def _config_path(store: Path) -> Path:
    return store / CONFIG_FILE


def create_store(store: Path, embedding_name: str) -> SmallToBigRetriever:
    """A new, empty index that will be saved in ``store``."""
    if store.exists() and not store.is_dir():
        msg = f"--store {store} exists and is not a directory"
        raise UserError(msg)
    if store.is_dir() and any(store.iterdir()) and not _config_path(store).exists():
        msg = f"--store {store} is a non-empty directory that is not an s2b index"
        raise UserError(msg)
    embedding = make_embedding(embedding_name)
    return SmallToBigRetriever(vectorstore=FaissIndex(embedding), mode=INDEX_MODE)


def open_store(store: Path, embedding_name: str | None = None) -> SmallToBigRetriever:
    """Load the index saved in ``store`` with the embedding it was built with."""
    config = read_config(store)
    name = str(config.get("embedding", "e5"))
    if embedding_name is not None and embedding_name != name:
        msg = f"{store} was indexed with embedding {name!r}, not {embedding_name!r}"
        raise UserError(msg)
    return SmallToBigRetriever.load(store, embedding=make_embedding(name))  # type: ignore[attr-defined, no-any-return]


def save_store(retriever: SmallToBigRetriever, store: Path, embedding_name: str) -> None:
    """Write the index (persist API) and the CLI's own note of its embedding."""
    retriever.save(store)  # type: ignore[attr-defined]
    config = {"version": 1, "embedding": embedding_name, "tree": INDEX_MODE}
    _config_path(store).write_text(json.dumps(config) + "\n", encoding="utf-8")


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


# Reading input files -------------------------------------------------------------


def expand_paths(paths: Sequence[str]) -> list[Path]:
    """Files to index: the given files, and supported files under given folders."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in _SUFFIXES
            )
            out.extend(p for p in found if not any(part.startswith(".") for part in p.parts))
        elif path.is_file():
            if path.suffix.lower() not in _SUFFIXES:
                msg = f"cannot index {raw}: unsupported file type (use {', '.join(_SUFFIXES)})"
                raise UserError(msg)
            out.append(path)
        else:
            msg = f"cannot index {raw}: no such file or directory"
            raise UserError(msg)
    return list(dict.fromkeys(out))


_SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        msg = f"cannot read {path}: it is not UTF-8 text"
        raise UserError(msg) from None
    except OSError as err:
        msg = f"cannot read {path}: {err.strerror or err}"
        raise UserError(msg) from None


def read_documents(path: Path) -> Iterator[Document]:
    """The documents of one file: a text/Markdown file is one, a JSONL line is one."""
    text = _read_text(path)
    if path.suffix.lower() in TEXT_SUFFIXES:
        source = str(path.resolve())
        meta = {"source": str(path), "title": path.stem}
        yield Document(page_content=text, metadata=meta, id=source)
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            yield _jsonl_document(line, f"{path}:{number}")


def _jsonl_document(line: str, where: str) -> Document:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        msg = f"{where} is not valid JSON ({err.msg})"
        raise UserError(msg) from None
    if isinstance(row, dict) and isinstance(row.get("text"), str):
        meta = {k: v for k, v in row.items() if k != "text"}
        return Document(page_content=row["text"], metadata=meta, id=_id(row.get("id")))
    if isinstance(row, dict) and isinstance(row.get("page_content"), str):
        meta = row.get("metadata") or {}
        if not isinstance(meta, dict):
            msg = f"{where}: 'metadata' must be an object"
            raise UserError(msg)
        return Document(page_content=row["page_content"], metadata=meta, id=_id(row.get("id")))
    msg = f'{where}: expected {{"id", "text", ...}} or {{"page_content", "metadata"}}'
    raise UserError(msg)


def _id(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def _check_unique(docs: Sequence[Document]) -> None:
    seen: set[str] = set()
    for doc in docs:
        if doc.id is not None and doc.id in seen:
            msg = f"document id {doc.id!r} appears more than once in the input"
            raise UserError(msg)
        if doc.id is not None:
            seen.add(doc.id)


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
    wanted = args.embedding or os.environ.get(EMBEDDING_ENV) or None
    docs = [doc for path in expand_paths(args.paths) for doc in read_documents(path)]
    if not docs:
        msg = f"nothing to index in {' '.join(args.paths)} (looked for {', '.join(_SUFFIXES)})"
        raise UserError(msg)
    _check_unique(docs)
    if _config_path(store).exists():
        name = str(read_config(store).get("embedding", "e5"))
        retriever = open_store(store, wanted)
    else:
        name = wanted or "e5"
        retriever = create_store(store, name)
    total = IndexingResult()
    bar = _progress(len(docs), "doc")
    try:
        for doc in docs:
            step = retriever.add_documents([doc])
            for field in ("added", "updated", "unchanged", "empty"):
                getattr(total, field).extend(getattr(step, field))
            total.num_children += step.num_children
            bar.update(1)
    finally:
        bar.close()
    if total.added or total.updated:
        save_store(retriever, store, name)
        print(
            f"indexed {len(docs)} document(s) into {store}: {len(total.added)} added, "
            f"{len(total.updated)} updated, {len(total.unchanged)} unchanged, "
            f"{total.num_children} sentence(s) embedded",
            file=out,
        )
    else:
        print(f"nothing to do: all {len(docs)} document(s) unchanged in {store}", file=out)
    if total.empty:
        print(f"skipped {len(total.empty)} empty document(s)", file=out)
    return 0


def cmd_query(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b query QUESTION --store DIR``."""
    retriever = open_store(Path(args.store), args.embedding or os.environ.get(EMBEDDING_ENV))
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
            "results": [_json(d, i) for i, d in enumerate(docs, 1)],
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2), file=out)
    elif not docs:
        print("no results", file=out)
    elif out.isatty() and _has_rich():
        _print_rich(docs, args.max_chars, out)
    else:
        for i, doc in enumerate(docs, 1):
            print(_plain(doc, i, args.max_chars), file=out)
    return 0


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b eval --store DIR --questions FILE``."""
    retriever = open_store(Path(args.store), args.embedding or os.environ.get(EMBEDDING_ENV))
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


# Output ----------------------------------------------------------------------------


def _json(doc: Document, rank: int) -> dict[str, Any]:
    meta = doc.metadata
    return {
        "rank": rank,
        "score": meta.get("score"),
        "source": source_label(meta),
        "text": doc.page_content,
        "metadata": meta,
    }


def _spans(doc: Document) -> list[tuple[int, int]]:
    """Matched spans in ``page_content`` coordinates, clipped to it."""
    base, size = int(doc.metadata.get("start", 0)), len(doc.page_content)
    out = []
    for match in doc.metadata.get("matches", []):
        lo, hi = max(0, int(match["start"]) - base), min(size, int(match["end"]) - base)
        if hi > lo:
            out.append((lo, hi))
    return sorted(out)


def _excerpt(doc: Document, max_chars: int) -> tuple[int, int]:
    """``[lo, hi)`` of ``page_content`` to show: all of it, or ``max_chars`` around the best match."""
    size = len(doc.page_content)
    if max_chars <= 0 or size <= max_chars:
        return 0, size
    matches = doc.metadata.get("matches", [])
    spans = _spans(doc)
    centre = spans[0][0] if spans else 0
    if matches:
        best = max(matches, key=lambda m: m.get("score", 0))
        centre = max(0, int(best["start"]) - int(doc.metadata.get("start", 0)))
    lo = max(0, min(centre - max_chars // 4, size - max_chars))
    return lo, lo + max_chars


def _header(doc: Document, rank: int) -> str:
    meta = doc.metadata
    score = meta.get("score")
    parts = [
        f"#{rank}",
        f"score {score:.3f}" if isinstance(score, float) else "",
        source_label(meta),
    ]
    where = f"{meta.get('mode', '?')}/{meta.get('level', '?')}"
    if "start" in meta:
        where += f", chars {meta['start']}-{meta['end']}"
    if meta.get("escalation"):
        where += f", {meta['escalation']}"
    return "  ".join(p for p in parts if p) + f"  [{where}]"


def _plain(doc: Document, rank: int, max_chars: int) -> str:
    """A result as plain text; matched spans marked ``**like this**``."""
    lo, hi = _excerpt(doc, max_chars)
    text, cursor, parts = doc.page_content, lo, []
    for start, end in _spans(doc):
        start, end = max(start, cursor), min(end, hi)
        if end > start:
            parts += [text[cursor:start], "**", text[start:end], "**"]
            cursor = end
    parts.append(text[cursor:hi])
    body = ("… " if lo > 0 else "") + "".join(parts).strip() + (" …" if hi < len(text) else "")
    return f"{_header(doc, rank)}\n{body}\n"


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _print_rich(docs: Sequence[Document], max_chars: int, out: TextIO) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.text import Text

    console = Console(file=out)
    for rank, doc in enumerate(docs, 1):
        lo, hi = _excerpt(doc, max_chars)
        body = Text(doc.page_content[lo:hi])
        for start, end in _spans(doc):
            if min(end, hi) > max(start, lo):
                body.stylize("bold yellow", max(start, lo) - lo, min(end, hi) - lo)
        if lo > 0:
            body = Text("… ") + body
        if hi < len(doc.page_content):
            body.append(" …")
        console.print(Panel(body, title=_header(doc, rank), title_align="left"))


# Command line ----------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        msg = f"must be a positive integer, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        msg = f"must be 0 or a positive integer, got {text!r}"
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
    return [_positive(part) for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    """The ``s2b`` argument parser."""
    from langchain_s2b import __version__

    parser = _Parser(prog="s2b", description="Small-to-big retrieval from the command line.")
    parser.add_argument("--version", action="version", version=f"s2b {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    hidden = {"choices": EMBEDDINGS, "default": None, "help": argparse.SUPPRESS}

    index = commands.add_parser("index", help="index .txt/.md files and JSONL documents")
    index.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to index")
    index.add_argument("--store", required=True, metavar="DIR", help="index directory")
    index.add_argument("--embedding", **hidden)  # type: ignore[arg-type]

    query = commands.add_parser("query", help="print the contexts that answer a question")
    query.add_argument("question")
    query.add_argument("--store", required=True, metavar="DIR", help="index directory")
    query.add_argument("--mode", choices=MODES, default="parent", help="what one result is")
    query.add_argument("-k", type=_positive, default=3, help="results (default 3)")
    query.add_argument(
        "--window-size", type=_non_negative, metavar="N", help="window mode: neighbours per side"
    )
    query.add_argument(
        "--max-tokens", type=_positive, metavar="N", help="token budget for all results"
    )
    query.add_argument("--json", action="store_true", help="machine-readable output")
    query.add_argument(
        "--max-chars",
        type=_non_negative,
        default=1200,
        metavar="N",
        help="show at most N characters of each context, around its best match (0: all)",
    )
    query.add_argument("--embedding", **hidden)  # type: ignore[arg-type]

    ev = commands.add_parser("eval", help="hit rate, evidence recall and tokens per mode")
    ev.add_argument("--store", required=True, metavar="DIR", help="index directory")
    ev.add_argument("--questions", required=True, metavar="FILE", help="questions JSONL")
    ev.add_argument("--modes", type=_modes, default=list(MODES), help="comma-separated modes")
    ev.add_argument("-k", type=_positive, default=4, help="results per question (default 4)")
    ev.add_argument("--limit", type=_positive, metavar="N", help="only the first N questions")
    ev.add_argument(
        "--budgets", type=_budgets, default=list(evaluation.BUDGETS), help="token budgets"
    )
    ev.add_argument("--json", action="store_true", help="machine-readable output")
    ev.add_argument("--embedding", **hidden)  # type: ignore[arg-type]
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
    except NotImplementedError:
        print(
            f"s2b: error: mode {getattr(args, 'mode', '')!r} is not available in this version",
            file=sys.stderr,
        )
    except KeyboardInterrupt:
        print("s2b: interrupted", file=sys.stderr)
        return 130
    return 1
