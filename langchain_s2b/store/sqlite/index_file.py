"""The FAISS index file of one commit of the command line's database, and its checks.

The file of the state ``(database id, commit counter)`` is
``s2b.<id>.<commit>.faiss`` (:func:`index_file`). Whoever writes it (the
writer after its last commit, or the first command that finds none) writes a
temporary file, then renames it into place and records, in the database's
``meta`` table and in the same SQLite write transaction, what was written
(:class:`FileRecord`: its name, size, vector count, dimension and SHA-256).
Two processes that write the file of one commit therefore take turns, and the
record always describes the last file renamed into place. A store made before
the record existed has none: its next writer records the file it finds.

:func:`check` is what a command does before it opens the file (cheap: the
file's size, the FAISS header and the vector count it declares, against the
record or, without one, against the database); ``digest=True`` (``s2b
verify``) also hashes the whole file. A file that fails is never searched:
the command builds FAISS from the database instead (see
:class:`~langchain_s2b.store.sqlite.sqlite_faiss.SQLiteFaissIndex`).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import faiss

from langchain_s2b.store.base import sha256_file
from langchain_s2b.store.sqlite.database import Database

__all__ = [
    "INDEX_FILE",
    "RECORD",
    "FileRecord",
    "check",
    "index_file",
    "read_record",
    "record_existing",
    "write",
]

INDEX_FILE = "s2b.{database}.{commit}.faiss"
"""The FAISS index of one state of the database: its id and its commit counter."""
RECORD = "faiss_file"
"""The ``meta`` row that holds the :class:`FileRecord` of the last file written."""

_OUTER = struct.Struct("<4siqqqBi")
"""``IndexIDMap2``'s header: magic, d, ntotal, two unused fields, is_trained, metric."""
_INNER = struct.Struct("<4siqqqBiQ")
"""The flat index inside it: the same header, then the byte size of its vectors."""
_FLAT = (b"IxFI", b"IxF2")
"""Inner product and L2 flat indexes, the only kind the command line writes."""
_METRICS = (0, 1)
"""``METRIC_INNER_PRODUCT`` and ``METRIC_L2``: no metric argument follows them."""
_MAX_DIM = 1 << 16


def index_file(directory: Path, stamp: tuple[str, int]) -> Path:
    """Where the FAISS index of the state ``stamp`` is kept."""
    return directory / INDEX_FILE.format(database=stamp[0], commit=stamp[1])


@dataclass(frozen=True)
class FileRecord:
    """What was written as the FAISS file of a commit."""

    name: str
    size: int
    """Bytes."""
    count: int
    """Vectors (FAISS's ``ntotal``)."""
    dim: int
    sha256: str

    def dumps(self) -> str:
        """The record as the JSON text of its ``meta`` row."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def loads(cls, text: str | None) -> FileRecord | None:
        """A record from its ``meta`` row (``None``: no row, or one that does not decode)."""
        try:
            found = json.loads(text or "")
            record = cls(**found)
        except (ValueError, TypeError):
            return None
        ints = (record.size, record.count, record.dim)
        if not isinstance(record.name, str) or not isinstance(record.sha256, str):
            return None
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in ints):
            return None
        return record


def read_record(db: Database, file: Path) -> FileRecord | None:
    """The record of ``file`` (``None``: none was recorded for this name)."""
    record = FileRecord.loads(db.get_meta(RECORD))
    return record if record is not None and record.name == file.name else None


def layout(file: Path, size: int) -> tuple[int, int]:
    """``(dimension, vectors)`` of a FAISS file in the layout s2b writes, checked against its size.

    Raises:
        ValueError: what is wrong (a ``ValueError`` naming the file), before
            FAISS reads it: a truncated or garbled file never reaches FAISS,
            which would allocate or map what its header claims.
    """
    with file.open("rb") as fh:
        head = fh.read(_OUTER.size + _INNER.size)
    if len(head) < _OUTER.size + _INNER.size:
        msg = f"it is {size} bytes, shorter than a FAISS header"
        raise ValueError(msg)
    magic, dim, count, _, _, _, metric = _OUTER.unpack_from(head)
    inner, dim2, count2, _, _, _, metric2, data = _INNER.unpack_from(head, _OUTER.size)
    if magic != b"IxM2" or inner not in _FLAT:
        msg = f"its header is not a FAISS IndexIDMap2 over a flat index ({magic!r}, {inner!r})"
        raise ValueError(msg)
    if (dim, count, metric) != (dim2, count2, metric2) or metric not in _METRICS:
        msg = "its two FAISS headers disagree"
        raise ValueError(msg)
    if not 0 < dim <= _MAX_DIM or count < 0:
        msg = f"its header declares {count} vectors of dimension {dim}"
        raise ValueError(msg)
    if data not in (count * dim * 4, count * dim):  # bytes (FAISS >= 1.7.3) or floats
        msg = f"its header declares {data} for {count} vectors of dimension {dim}"
        raise ValueError(msg)
    expected = _OUTER.size + _INNER.size + count * dim * 4 + 8 + count * 8
    if size != expected:
        msg = f"it is {size} bytes; its header declares {count} vectors, {expected} bytes"
        raise ValueError(msg)
    return dim, count


def check(file: Path, db: Database, *, digest: bool = False) -> str | None:
    """What is wrong with the FAISS file of the state being read (``None``: nothing found).

    Its size, header and vector count against its record (without one: the
    header against the file's size and the count against the database's
    leaves); ``digest``: also its SHA-256 against the record. Call in the
    read transaction of that state.
    """
    try:
        found = os.lstat(file)
        if not stat.S_ISREG(found.st_mode):
            return "it is not a regular file"
        record = read_record(db, file)
        if record is not None and found.st_size != record.size:
            return f"it is {found.st_size} bytes; {record.size} were written"
        dim, count = layout(file, found.st_size)
    except ValueError as err:
        return str(err)
    except OSError as err:
        return f"it can not be read ({err.strerror or err})"
    if record is None:
        leaves = int(db.conn.execute("SELECT count(*) FROM children").fetchone()[0])
        if count != leaves:
            return f"it holds {count} vectors; the database holds {leaves} chunks"
        return None
    if (dim, count) != (record.dim, record.count):
        return f"it holds {count} vectors of {dim}; {record.count} of {record.dim} were written"
    if digest:
        try:
            if sha256_file(file) != record.sha256:
                return "its SHA-256 is not the one recorded when it was written"
        except OSError as err:
            return f"it can not be read ({err.strerror or err})"
    return None


def write(index: Any, db: Database, file: Path, *, wait: float) -> bool:
    """Write ``index`` as ``file`` (a temporary file renamed into place) and record it.

    Returns whether the record was written (see :meth:`Database.record`). A
    failed write (FAISS reports a full disk as a ``RuntimeError``) is an
    ``OSError``; the file in place, if any, is left as it was.
    """
    temp = file.with_name(f".tmp-{secrets.token_hex(4)}-{file.name}")
    try:
        try:
            faiss.write_index(index, str(temp))
        except RuntimeError as err:
            raise OSError(f"could not write {file}: {str(err).splitlines()[-1]}") from err
        record = FileRecord(
            file.name, temp.stat().st_size, int(index.ntotal), int(index.d), sha256_file(temp)
        )
        return db.record(RECORD, record.dumps(), wait=wait, rename=(temp, file))
    finally:
        temp.unlink(missing_ok=True)


def record_existing(db: Database, file: Path, *, wait: float) -> bool:
    """Record a file that has no record yet (a store made before records), as it is.

    Only for a file that :func:`check` passed; returns whether it was recorded.
    """
    size = file.stat().st_size
    dim, count = layout(file, size)
    record = FileRecord(file.name, size, count, dim, sha256_file(file))
    return db.record(RECORD, record.dumps(), wait=wait)
