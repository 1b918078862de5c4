"""Tantivy's files: the scratch directory, the checks of a saved segment, the engine's errors.

A lexical index keeps its files in a scratch directory of its own (memory-backed
when ``/dev/shm`` has room); a saved index's segment files are checked (their
footer and CRC-32) before tantivy opens them, and tantivy's errors and panics
become one ``ValueError`` line.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langchain_s2b.store.base import first_line

_META_FILE = "meta.json"


SCRATCH_ENV = "S2B_SCRATCH"
"""Where lexical indexes keep their files (default: ``/dev/shm`` when it has room, else TMPDIR)."""
_PREFIX = "s2b-lexical-"
_SHM = Path("/dev/shm")  # noqa: S108 -- memory-backed: a commit costs no disk sync
_SHM_ROOM = 1 << 30
"""Free bytes ``/dev/shm`` must have to be used."""


def scratch_directory() -> Path:
    """A new directory for a lexical index's files, named after this process.

    Memory-backed (``/dev/shm``) when it has room: tantivy syncs every file at
    each commit, ~100 ms a commit on a disk here against ~1 ms in memory.
    ``$S2B_SCRATCH`` chooses another place. Directories of processes that
    ended without removing theirs (killed) are removed here.
    """
    chosen = os.environ.get(SCRATCH_ENV)
    if not chosen and _SHM.is_dir() and os.access(_SHM, os.W_OK):
        with contextlib.suppress(OSError):
            if shutil.disk_usage(_SHM).free >= _SHM_ROOM:
                chosen = str(_SHM)
    root = Path(chosen or tempfile.gettempdir())
    _remove_orphans(root)
    return Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-", dir=root))


def _remove_orphans(root: Path) -> None:
    """Remove scratch directories whose process is gone."""
    with contextlib.suppress(OSError):
        for item in root.glob(f"{_PREFIX}*-*"):
            pid = item.name[len(_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(item, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


_SEGMENT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
_FOOTER_MAGIC = 1337
"""The last four bytes of every tantivy file (little-endian), after the footer's length."""


def _check_segment(directory: Path, segment: Any) -> str:
    """The file stem of one segment of ``meta.json``, checked against its files."""
    where = directory / _META_FILE
    ok = isinstance(segment, dict) and isinstance(segment.get("segment_id"), str)
    if not ok or not _SEGMENT_ID.match(segment["segment_id"]):
        msg = f"{where}: a segment must be an object with a segment_id; got {str(segment)[:80]}."
        raise ValueError(msg)
    stem = str(segment["segment_id"]).replace("-", "")
    docs, deletes = segment.get("max_doc"), segment.get("deletes")
    norms = directory / f"{stem}.fieldnorm"
    room = norms.stat().st_size if norms.is_file() else 0  # a byte per document and field
    if not _count(docs) or docs > room:
        msg = f"{where}: segment {stem} claims {docs!r} documents; its files hold at most {room}."
        raise ValueError(msg)
    if deletes is not None and not (
        isinstance(deletes, dict)
        and _count(deletes.get("num_deleted_docs"))
        and deletes["num_deleted_docs"] <= docs
        and _count(deletes.get("opstamp"))
    ):
        msg = f"{where}: segment {stem} has malformed deletes {str(deletes)[:80]}."
        raise ValueError(msg)
    return stem


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_footer(file: Path) -> None:
    """A tantivy file's footer: its JSON, its length and magic number, its body's CRC-32."""
    size = file.stat().st_size
    with file.open("rb") as fh:
        if size >= 8:
            fh.seek(size - 8)
            length, magic = struct.unpack("<II", fh.read(8))
        else:
            length = magic = 0
        body = size - 8 - length
        crc = None
        if magic == _FOOTER_MAGIC and body >= 0:
            fh.seek(body)
            try:
                footer = json.loads(fh.read(length))
            except (ValueError, RecursionError):
                footer = None
            crc = footer.get("crc") if isinstance(footer, dict) else None
        if not isinstance(crc, int):
            msg = f"{file} does not end with a tantivy footer; the file is damaged."
            raise ValueError(msg)
        fh.seek(0)
        got = 0
        for _ in range(body // _CHUNK):
            got = zlib.crc32(fh.read(_CHUNK), got)
        got = zlib.crc32(fh.read(body % _CHUNK), got)
    if got != crc:
        msg = f"{file} does not match the CRC-32 in its footer; the file is damaged."
        raise ValueError(msg)


_CHUNK = 1 << 20


@contextlib.contextmanager
def engine_errors(damaged: str | None = None) -> Iterator[None]:
    """Tantivy's errors and panics as one ``ValueError`` line.

    A panic (``pyo3``'s ``PanicException``, a ``BaseException``) or a stored
    field gone means a damaged index, one that passed the checks of
    :func:`check_files` (a crafted one whose footers were written again).
    ``damaged``: how to name it (default: the lexical index, at a query).
    """
    try:
        yield
    except BaseException as err:
        engine = isinstance(err, ValueError | KeyError | IndexError)
        if not engine and type(err).__name__ != "PanicException":
            raise
        what = f"tantivy: {first_line(err)}"
        msg = (
            f"{damaged} ({what})."
            if damaged
            else f"The lexical index is damaged ({what}); build it again: "
            "FaissIndex.rebuild_lexical()."
        )
        raise ValueError(msg) from None


def _committed_files(directory: Path) -> list[str]:
    """``meta.json`` and the files of the segments it names: what a reader of the commit opens.

    A segment's files are ``<id>.<part>``; its deletes ``<id>.<opstamp>.del``
    (only the file of the opstamp ``meta.json`` names is live).
    """
    meta = json.loads((directory / _META_FILE).read_text(encoding="utf-8"))
    live: dict[str, str | None] = {}
    for segment in meta["segments"]:
        deletes = segment.get("deletes")
        stem = str(segment["segment_id"]).replace("-", "")
        live[stem] = None if deletes is None else f"{deletes['opstamp']}.del"
    names = [_META_FILE]
    for item in sorted(directory.iterdir()):
        stem, _, part = item.name.partition(".")
        if stem in live and item.is_file() and (not part.endswith(".del") or part == live[stem]):
            names.append(item.name)
    return names


def _field_names(directory: Path) -> set[str]:
    """The field names of a saved index's schema, from tantivy's ``meta.json``."""
    try:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        return {str(field["name"]) for field in meta["schema"]}
    except (OSError, ValueError, KeyError, TypeError):
        return set()
