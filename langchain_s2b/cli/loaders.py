"""Loaders: the user's files and folders -> LangChain documents (for ``s2b index``).

- ``.txt``, ``.md``, ``.markdown``, ``.rst``: one document, the file's text.
- ``.html``, ``.htm``: one document, the text BeautifulSoup takes from the page
  (scripts and styles dropped); the page's ``<title>`` is its title.
- ``.pdf``: one document per page (pypdf's text), with ``page`` (from 1) and
  ``pages`` in its metadata.
- ``.jsonl``: one document per line, ``{"id", "text", ...}`` (other fields become
  metadata) or ``{"page_content", "metadata", "id"?}``; a row without an id is
  identified by a hash of its text.

Text is read as UTF-8 and a byte-order mark is dropped, so offsets (``start``,
``end``) count characters of the text as read (for HTML and PDF: the extracted
text). A text document's id is its file's absolute path (a PDF page's: the path
and ``#page=N``); its metadata holds ``source`` (that path) and ``title``.

Paths are taken as given (``..``, ``~/.config/...``); inside a folder, hidden
files and folders (a name starting with ``.``) are skipped and counted. A file
that cannot be read raises :class:`SkippedFile` with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.cli.errors import UserError

TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst")
HTML_SUFFIXES = (".html", ".htm")
PDF_SUFFIXES = (".pdf",)
JSONL_SUFFIXES = (".jsonl",)
SUFFIXES = TEXT_SUFFIXES + HTML_SUFFIXES + PDF_SUFFIXES + JSONL_SUFFIXES


class SkippedFile(Exception):  # noqa: N818 - it is an outcome, not a failure of the run
    """A file that can not be indexed; the message says why."""


@dataclass
class Found:
    """The files a run looks at, and what it passed over inside folders."""

    files: list[Path] = field(default_factory=list)
    """Absolute paths, each once, in order."""
    folders: list[Path] = field(default_factory=list)
    """The folders given (absolute): the index mirrors them."""
    hidden: int = 0
    """Hidden files (or files in hidden folders) inside a given folder."""
    other: int = 0
    """Files of other types inside a given folder."""


def absolute(path: str | Path) -> Path:
    """``path`` made absolute without resolving symlinks (``..`` is folded)."""
    return Path(os.path.abspath(Path(path).expanduser()))


def find_files(paths: Iterable[str | Path], exclude: Path | None = None) -> Found:
    """Files to index: given files, and supported files under given folders."""
    found = Found()
    skip = None if exclude is None else absolute(exclude)
    for raw in paths:
        path = absolute(raw)
        if path.is_dir():
            found.folders.append(path)
            _walk(path, found, skip)
        elif path.is_file():
            if path.suffix.lower() not in SUFFIXES:
                msg = f"cannot index {raw}: unsupported file type (use {', '.join(SUFFIXES)})"
                raise UserError(msg)
            found.files.append(path)
        else:
            msg = f"cannot index {raw}: no such file or directory"
            raise UserError(msg)
    found.files = list(dict.fromkeys(found.files))
    return found


def _walk(root: Path, found: Found, skip: Path | None) -> None:
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        if skip is not None and (here == skip or skip in here.parents):
            dirs[:] = []
            continue
        hidden_dirs = [d for d in dirs if d.startswith(".") and here / d != skip]
        for name in hidden_dirs:
            found.hidden += sum(len(files) for _, _, files in os.walk(here / name))
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                found.hidden += 1
            elif Path(name).suffix.lower() in SUFFIXES:
                found.files.append(here / name)
            else:
                found.other += 1


def file_digest(data: bytes) -> str:
    """SHA-256 of a file's bytes (moves are recognised by it)."""
    return hashlib.sha256(data).hexdigest()


def read_documents(path: Path, data: bytes) -> list[Document]:
    """The documents of one file's bytes; :class:`SkippedFile` when they can't be read."""
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES:
        return _pdf(path, data)
    if suffix in HTML_SUFFIXES:
        text, title = _html(data)
        return [_text_document(path, text, title or path.stem)]
    text = _decode(data)
    if suffix in JSONL_SUFFIXES:
        return _jsonl(text)
    return [_text_document(path, text, path.stem)]


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        msg = f"not UTF-8 text (byte {err.start})"
        raise SkippedFile(msg) from None


def _text_document(path: Path, text: str, title: str, **extra: Any) -> Document:
    source = str(path)
    doc_id = source if "page" not in extra else f"{source}#page={extra['page']}"
    return Document(
        page_content=text, metadata={"source": source, "title": title, **extra}, id=doc_id
    )


def _html(data: bytes) -> tuple[str, str | None]:
    try:
        from bs4 import BeautifulSoup
    except ImportError:
        msg = 'reading HTML needs beautifulsoup4: pip install "langchain-s2b[cli]"'
        raise SkippedFile(msg) from None
    soup = BeautifulSoup(data, "html.parser")
    for tag in soup(["script", "style", "template", "noscript"]):
        tag.decompose()
    title = soup.title.get_text(" ", strip=True) if soup.title else None
    if soup.title:
        soup.title.decompose()
    lines = (line.strip() for line in soup.get_text("\n").splitlines())
    text = "\n".join(line for line in lines if line)
    return text.lstrip("\ufeff"), title or None


def _pdf(path: Path, data: bytes) -> list[Document]:
    try:
        import io

        from pypdf import PdfReader
        from pypdf.errors import PdfReadError
    except ImportError:
        msg = 'reading PDF needs pypdf: pip install "langchain-s2b[cli]"'
        raise SkippedFile(msg) from None
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError) as err:
        msg = f"not a readable PDF ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
        raise SkippedFile(msg) from None
    return [
        _text_document(path, text, path.stem, page=number, pages=len(pages))
        for number, text in enumerate(pages, 1)
    ]


def _jsonl(text: str) -> list[Document]:
    docs = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            docs.append(_jsonl_document(line, f"line {number}"))
    return docs


def _jsonl_document(line: str, where: str) -> Document:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        msg = f"{where} is not valid JSON ({err.msg})"
        raise SkippedFile(msg) from None
    if isinstance(row, dict) and isinstance(row.get("text"), str):
        meta = {k: v for k, v in row.items() if k != "text"}
        return Document(page_content=row["text"], metadata=meta, id=_id(row.get("id")))
    if isinstance(row, dict) and isinstance(row.get("page_content"), str):
        meta = row.get("metadata") or {}
        if not isinstance(meta, dict):
            msg = f"{where}: 'metadata' must be an object"
            raise SkippedFile(msg)
        return Document(page_content=row["page_content"], metadata=meta, id=_id(row.get("id")))
    msg = f'{where}: expected {{"id", "text", ...}} or {{"page_content", "metadata"}}'
    raise SkippedFile(msg)


def _id(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def check_unique(docs: Sequence[Document]) -> None:
    """Raise :class:`SkippedFile` when two documents of one file share an id."""
    seen: set[str] = set()
    for doc in docs:
        if doc.id is not None and doc.id in seen:
            msg = f"document id {doc.id!r} appears more than once"
            raise SkippedFile(msg)
        if doc.id is not None:
            seen.add(doc.id)
