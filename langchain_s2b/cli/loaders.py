"""Loaders: text, Markdown and JSONL files -> LangChain documents (for ``s2b index``).

- A ``.txt``/``.md``/``.markdown`` file is one document; its id is the file's
  absolute path, its metadata ``source`` (that path) and ``title`` (the stem).
- A ``.jsonl`` file holds one document per line, either ``{"id", "text", ...}``
  (other fields become metadata) or ``{"page_content", "metadata", "id"?}``.
  A row without an id is identified by a hash of its text.
- A folder is searched recursively for those files (hidden ones skipped).

Mistakes raise ``ValueError`` (or ``OSError`` for a missing or unreadable
file) with a one-line message that names the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

TEXT_SUFFIXES = (".txt", ".md", ".markdown")
JSONL_SUFFIXES = (".jsonl",)
SUFFIXES = TEXT_SUFFIXES + JSONL_SUFFIXES


def load_paths(paths: Iterable[str | Path], exclude: str | Path | None = None) -> list[Document]:
    """Every document in the given files and folders (not under ``exclude``); ids unique."""
    files = expand_paths([str(p) for p in paths])
    if exclude is not None:
        skip = Path(exclude).resolve()
        files = [f for f in files if not f.resolve().is_relative_to(skip)]
    docs = [doc for path in files for doc in read_documents(path)]
    check_unique(docs)
    return docs


def expand_paths(paths: Sequence[str]) -> list[Path]:
    """Files to index: the given files, and supported files under given folders."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
            )
            out.extend(p for p in found if not any(part.startswith(".") for part in p.parts))
        elif path.is_file():
            if path.suffix.lower() not in SUFFIXES:
                msg = f"cannot index {raw}: unsupported file type (use {', '.join(SUFFIXES)})"
                raise ValueError(msg)
            out.append(path)
        else:
            msg = f"cannot index {raw}: no such file or directory"
            raise FileNotFoundError(msg)
    return list(dict.fromkeys(out))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        msg = f"cannot read {path}: it is not UTF-8 text"
        raise ValueError(msg) from None
    except OSError as err:
        msg = f"cannot read {path}: {err.strerror or err}"
        raise OSError(msg) from None


def read_documents(path: Path) -> Iterator[Document]:
    """The documents of one file: a text/Markdown file is one, a JSONL line is one."""
    text = _read_text(path)
    if path.suffix.lower() in TEXT_SUFFIXES:
        source = str(path.resolve())
        meta = {"source": source, "title": path.stem}
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
        raise ValueError(msg) from None
    if isinstance(row, dict) and isinstance(row.get("text"), str):
        meta = {k: v for k, v in row.items() if k != "text"}
        return Document(page_content=row["text"], metadata=meta, id=_id(row.get("id")))
    if isinstance(row, dict) and isinstance(row.get("page_content"), str):
        meta = row.get("metadata") or {}
        if not isinstance(meta, dict):
            msg = f"{where}: 'metadata' must be an object"
            raise ValueError(msg)
        return Document(page_content=row["page_content"], metadata=meta, id=_id(row.get("id")))
    msg = f'{where}: expected {{"id", "text", ...}} or {{"page_content", "metadata"}}'
    raise ValueError(msg)


def _id(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def check_unique(docs: Sequence[Document]) -> None:
    """Raise ``ValueError`` when two documents share an id."""
    seen: set[str] = set()
    for doc in docs:
        if doc.id is not None and doc.id in seen:
            msg = f"document id {doc.id!r} appears more than once in the input"
            raise ValueError(msg)
        if doc.id is not None:
            seen.add(doc.id)
