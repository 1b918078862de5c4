"""Loaders: the user's files and folders -> LangChain documents (for ``s2b index``).

- ``.txt``, ``.md``, ``.markdown``, ``.rst``: one document, the file's text.
- ``.html``, ``.htm``: one document, the page's text as a reader reads it
  (:mod:`langchain_s2b.cli.html_text`: blocks as paragraphs, inline elements in
  their sentence, headings as Markdown heading lines, navigation, headers,
  footers and link lists dropped; decoded as a browser decodes it,
  :mod:`langchain_s2b.cli.html_charset`); its ``<title>`` (HTML's, not an SVG's;
  else its first heading) is its title.
- ``.pdf``: one document per page (pypdf's text), with ``page`` (from 1) and
  ``pages`` in its metadata.
- ``.jsonl``: one document per line, ``{"id", "text", ...}`` (other fields become
  metadata) or ``{"page_content", "metadata", "id"?}``; a row without an id is
  identified by a hash of its text. A row repeated in the file is kept once.

Text is read as UTF-8 and a byte-order mark is dropped, so offsets (``start``,
``end``) count characters of the text as read (for HTML and PDF: the extracted
text). A text document's id is its file's path (a PDF page's: the path and
``#page=N``); its metadata holds ``source`` (that path) and ``title``.

Paths given are resolved (``..``, ``~`` and symlinks): a file or folder given
is known by its real path, so one reached twice, through a symlinked folder
too, is read once. Inside a folder the index mirrors what the folder holds:
a symlink to a file is known by its own path there (its text read through
it), so it leaves the index when the link goes, and ``s2b delete FOLDER``
removes it; a link whose target the same run reaches by its real path is read
once, under that path; a link to a folder is not followed. Only regular files
are read: a FIFO, socket or device (or a link to one, or to nothing) is passed
over and counted, and a file that has become one since it was listed is
skipped and named (:func:`read_file` opens it without waiting). Hidden files
and folders (a name starting with ``.``) and files of other types are skipped
and counted. A file that cannot be read (its name is not UTF-8, its bytes are
not text, a bad JSONL row, a PDF without text) raises :class:`SkippedFile` with
the reason; what a library logs while reading (pypdf on a damaged PDF) is
captured and handed back as notes, never printed raw.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.html_text import page_text
from langchain_s2b.core.ingest import source_id_of
from langchain_s2b.core.tree import NODE_FIELDS

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
    """Resolved paths, each once, in order."""
    folders: list[Path] = field(default_factory=list)
    """The folders given (resolved): the index mirrors them."""
    hidden: int = 0
    """Hidden files (or files in hidden folders) inside a given folder."""
    other: int = 0
    """Files of other types inside a given folder."""
    store: int = 0
    """Files of the store itself inside a given folder (never indexed)."""
    special: int = 0
    """Entries inside a given folder that are not regular files (FIFOs, sockets, devices,
    links to none), with a supported suffix."""
    links: int = 0
    """Links inside a given folder to a file this run reads by its real path (read once)."""


def resolved(path: str | Path) -> Path:
    """``path`` made absolute with ``~``, ``..`` and every symlink resolved: a file's one name."""
    return Path(os.path.realpath(Path(path).expanduser()))


def own_path(path: str | Path) -> Path:
    """``path`` made absolute with its folder resolved but not its last part (a link's own name)."""
    given = Path(path).expanduser()
    if given.name in ("", ".", ".."):
        return resolved(given)
    return resolved(given.parent) / given.name


def find_files(paths: Iterable[str | Path], exclude: Path | None = None) -> Found:
    """Files to index: given files, and supported files under given folders."""
    found = Found()
    skip = None if exclude is None else resolved(exclude)
    for raw in paths:
        path = resolved(raw)
        if skip is not None and (path == skip or skip in path.parents):
            msg = f"cannot index {raw}: it is the store (--store {exclude}) or inside it"
            raise UserError(msg)
        kind = _kind(path)
        if kind == "folder":
            found.folders.append(path)
            _walk(path, found, skip)
        elif kind == "file":
            if path.suffix.lower() not in SUFFIXES:
                msg = f"cannot index {raw}: unsupported file type (use {', '.join(SUFFIXES)})"
                raise UserError(msg)
            found.files.append(path)
        elif kind is None:
            msg = f"cannot index {raw}: no such file or directory"
            raise UserError(msg)
        else:
            msg = f"cannot index {raw}: it is not a regular file but {kind}"
            raise UserError(msg)
    found.files = _once(found)
    return found


_KINDS = {
    stat.S_IFIFO: "a FIFO (a named pipe)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def _kind(path: Path) -> str | None:
    """``"file"``, ``"folder"``, what else it is (``"a FIFO ..."``), or ``None``: nothing there.

    A link is what it points to.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a loop of links"
        return "file"  # e.g. no permission: reading it names the problem
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    return _KINDS.get(stat.S_IFMT(mode), "not a file")


def _once(found: Found) -> list[Path]:
    """Each file once: a link whose target is also listed by its real path is dropped."""
    files = list(dict.fromkeys(found.files))
    real = {p for p in files if not p.is_symlink()}
    kept: list[Path] = []
    targets: set[Path] = set()
    for path in files:
        if path in real:
            kept.append(path)
            continue
        target = resolved(path)
        if target in real or target in targets:
            found.links += 1
            continue
        targets.add(target)
        kept.append(path)
    return kept


def _walk(root: Path, found: Found, skip: Path | None) -> None:
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        if skip is not None and here == skip:
            found.store += len(names)
            dirs[:] = []
            continue
        hidden_dirs = [d for d in dirs if d.startswith(".") and here / d != skip]
        for name in hidden_dirs:
            found.hidden += sum(len(files) for _, _, files in os.walk(here / name))
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") or here / d == skip)
        for name in sorted(names):
            path = here / name  # `here` has no symlink in it: os.walk does not follow them
            if name.startswith("."):
                found.hidden += 1
            elif Path(name).suffix.lower() not in SUFFIXES:
                found.other += 1
            elif _kind(path) == "file":  # a link to a file: known by its own path
                found.files.append(path)
            else:
                found.special += 1


def read_file(path: Path) -> bytes:
    """The bytes of a regular file; :class:`SkippedFile` when it is something else now.

    It is opened without waiting (``O_NONBLOCK``: a FIFO put in its place would
    block until a writer came) and checked to be a regular file before a byte
    is read.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = _KINDS.get(stat.S_IFMT(mode), "a folder" if stat.S_ISDIR(mode) else "not a file")
            msg = f"it is no longer a regular file but {what}"
            raise SkippedFile(msg)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def check_name(path: Path) -> None:
    """Raise :class:`SkippedFile` when the file's name is not UTF-8 (the store keeps text)."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        msg = "its name is not UTF-8 (the index keeps names as text); rename it"
        raise SkippedFile(msg) from None


def shown(path: Path) -> str:
    r"""A path to print: bytes that are not UTF-8 written as ``\xff``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def file_digest(data: bytes) -> str:
    """SHA-256 of a file's bytes (moves are recognised by it)."""
    return hashlib.sha256(data).hexdigest()


def read_documents(path: Path, data: bytes, notes: list[str] | None = None) -> list[Document]:
    """The documents of one file's bytes; :class:`SkippedFile` when they can't be read.

    What the reading library logs is added to ``notes`` (or dropped), never printed.
    """
    suffix = path.suffix.lower()
    if suffix in PDF_SUFFIXES:
        with captured_logs("pypdf") as logged:
            docs = _pdf(path, data)
        if notes is not None and logged:
            notes.append(_summary("the PDF reader", logged))
        return docs
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
        return page_text(data)
    except ImportError as err:
        raise SkippedFile(str(err)) from None
    except ValueError as err:
        msg = f"not readable HTML ({err})"
        raise SkippedFile(msg) from None


def _pdf(path: Path, data: bytes) -> list[Document]:
    try:
        import io

        from pypdf import PdfReader
    except ImportError:
        msg = 'reading PDF needs pypdf: pip install "langchain-s2b[cli]"'
        raise SkippedFile(msg) from None
    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as err:  # a damaged PDF can fail anywhere in the reader (PdfReadError...)
        msg = f"not a readable PDF ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
        raise SkippedFile(msg) from None
    if not any(text.strip() for text in pages):
        msg = (
            f"no text in its {len(pages)} page(s): a scan or images without a text layer "
            "(run OCR first), or a damaged PDF"
        )
        raise SkippedFile(msg)
    return [
        _text_document(path, text, path.stem, page=number, pages=len(pages))
        for number, text in enumerate(pages, 1)
    ]


@contextmanager
def captured_logs(name: str) -> Iterator[list[str]]:
    """Collect what logger ``name`` (and Python warnings) say in the block instead of printing."""
    logged: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    logger = logging.getLogger(name)
    handler = Collect(logging.WARNING)
    before = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield logged
        logged.extend(str(w.message) for w in caught)
    finally:
        logger.removeHandler(handler)
        logger.propagate = before


def _summary(reader: str, logged: list[str]) -> str:
    first = (logged[0].splitlines() or [""])[0][:120]
    return (
        f"{reader} reported {len(logged)} problem(s) (first: {first}); its text may be incomplete"
    )


def _jsonl(text: str) -> list[Document]:
    r"""One document per row; a row repeated (same id, text and metadata) is kept once.

    Rows are split on ``"\n"`` only: U+2028, U+0085 and the other characters
    that ``str.splitlines`` also breaks at are legal raw inside a JSON string
    (``json.dumps(..., ensure_ascii=False)`` writes them so).
    """
    docs = []
    seen: dict[str, tuple[int, Document]] = {}
    for number, row in enumerate(text.split("\n"), 1):
        line = row.removesuffix("\r")  # rows end at "\n" alone (or "\r\n"), as JSONL says
        if not line.strip():
            continue
        doc = _jsonl_document(line, f"line {number}")
        sid = source_id_of(doc, None, [])
        first = seen.setdefault(sid, (number, doc))
        if first[1] is doc:
            docs.append(doc)
        elif not same_document(first[1], doc):
            what = f"the id {doc.id!r}" if doc.id is not None else "the same text and no id"
            msg = f"lines {first[0]} and {number} have {what} but differ; give each its own id"
            raise SkippedFile(msg)
    return docs


def _jsonl_document(line: str, where: str) -> Document:
    try:
        row = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        msg = f"{where} is not valid JSON ({err.msg})"
        raise SkippedFile(msg) from None
    except ValueError as err:
        msg = f"{where}: {err}"
        raise SkippedFile(msg) from None
    if isinstance(row, dict) and isinstance(row.get("text"), str):
        meta = {k: v for k, v in row.items() if k != "text"}
        doc = Document(page_content=row["text"], metadata=meta, id=_id(row.get("id")))
    elif isinstance(row, dict) and isinstance(row.get("page_content"), str):
        meta = row.get("metadata") or {}
        if not isinstance(meta, dict):
            msg = f"{where}: 'metadata' must be an object"
            raise SkippedFile(msg)
        doc = Document(page_content=row["page_content"], metadata=meta, id=_id(row.get("id")))
    else:
        msg = f'{where}: expected {{"id", "text", ...}} or {{"page_content", "metadata"}}'
        raise SkippedFile(msg)
    reserved = sorted(set(doc.metadata) & NODE_FIELDS)
    if reserved:
        msg = (
            f"{where}: field(s) {', '.join(map(repr, reserved))} are s2b's own (every chunk "
            f"carries {', '.join(sorted(NODE_FIELDS))}); rename them"
        )
        raise SkippedFile(msg)
    return doc


def _no_constant(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` (Python writes them; JSON has no such values)."""
    msg = f"{name} is not a JSON value (write null, or a number)"
    raise ValueError(msg)


def _id(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def same_document(a: Document, b: Document) -> bool:
    """One document twice: same id, text and metadata."""
    return (a.id, a.page_content, a.metadata) == (b.id, b.page_content, b.metadata)
