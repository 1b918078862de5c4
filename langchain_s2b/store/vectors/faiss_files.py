"""The files of a ``FaissIndex``: save, load, and the readers that check every value.

A save writes ``children.faiss`` (``faiss.write_index``), ``children.json``
(the header) and the records as columns; a load reads them back with every
value type-checked, the FAISS file's envelope checked before FAISS reads it,
and a version 1 directory (records as JSON lines) read too.
"""

from __future__ import annotations

import json
import os
import re
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import faiss
import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_s2b.store.vectors.faiss_base import FaissBase
from langchain_s2b.store.vectors.record_files import FILES as RECORD_FILES
from langchain_s2b.store.vectors.records import Records

INDEX_FILE = "children.faiss"
HEADER_FILE = "children.json"
HEADER_FORMAT = "langchain_s2b.faiss.v2"
LEGACY_RECORDS_FILE = "children.jsonl"
"""Format version 1 kept every record as a line of JSON; still read."""
LEGACY_FORMAT = "langchain_s2b.faiss.v1"
SAVED_FILES = (INDEX_FILE, HEADER_FILE, *RECORD_FILES)

_Loaded = TypeVar("_Loaded", bound="FaissSaves")


class FaissSaves(FaissBase):
    """Save and load of :class:`~langchain_s2b.store.vectors.faiss_index.FaissIndex`."""

    def save(self, directory: str | Path) -> list[str]:
        """Write the FAISS index, its header and the records into ``directory``.

        Returns the names of the files written: ``children.faiss``
        (``faiss.write_index``), ``children.json`` (the header) and the records
        as columns (:meth:`Records.write`). Not atomic on its own:
        :func:`langchain_s2b.store.snapshots.persist.save` writes into a fresh directory and
        switches to it only once everything is on disk.
        """
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._compact()
            written = [HEADER_FILE]
            if self._index is not None:
                faiss.write_index(self._active(), str(path / INDEX_FILE))
                written.append(INDEX_FILE)
            written += self._rows.write(path)
            header = {
                "format": HEADER_FORMAT,
                "dim": self._dim,
                "factory": self.index_factory,
                "next": self._next_id,
                "count": len(self._rows),
                "staged": self._staging is not None,
                "search_params": self.search_params,
                "train_size": self.train_size,
            }
            (path / HEADER_FILE).write_text(json.dumps(header) + "\n", encoding="ascii")
        return written

    @staticmethod
    def check_saved(directory: str | Path) -> None:
        """Read back what :meth:`save` wrote: FAISS reads the index, of the size saved.

        Raises ``ValueError`` naming the file and what is wrong. A save calls it
        before it replaces the previous one.
        """
        path = Path(directory)
        header = json.loads((path / HEADER_FILE).read_text(encoding="ascii"))
        if header["dim"] is None:
            return
        index = read_faiss_file(path / INDEX_FILE, mapped=True)  # no second copy in memory
        if index.d != header["dim"] or index.ntotal != header["count"]:
            msg = (
                f"{path / INDEX_FILE} reads back as {index.ntotal} vectors of {index.d} "
                f"dimensions, not the {header['count']} of {header['dim']} written."
            )
            raise ValueError(msg)

    @classmethod
    def load(cls: type[_Loaded], directory: str | Path, embedding: Embeddings) -> _Loaded:
        """Read an index written by :meth:`save` (no pickle: JSON, numpy arrays and FAISS).

        Every value is type-checked, and the FAISS file must be an ``IndexIDMap2``
        whose dimension, size and row ids match the records; anything else raises
        ``ValueError`` naming the file and what is wrong. A directory written
        before the records were columns (``children.jsonl``) is read too.
        """
        path = Path(directory)
        if not (path / HEADER_FILE).exists() and (path / LEGACY_RECORDS_FILE).exists():
            header, records = read_legacy_records(path / LEGACY_RECORDS_FILE)
            records.sort(key=lambda r: r[0])
            renumbered: np.ndarray | None = np.asarray([r[0] for r in records], dtype=np.int64)
            rows = Records()
            rows.add(
                list(range(len(records))),
                [r[1] for r in records],
                [r[2] for r in records],
                [r[3] for r in records],
            )
        else:
            header = read_header(path / HEADER_FILE)
            rows, renumbered = Records.read(path, header["next"])
            if len(rows) != header["count"]:
                count = header["count"]
                msg = f"{path / HEADER_FILE} counts {count} records but {len(rows)} are stored."
                raise ValueError(msg)
        store = cls(embedding, header["factory"], **header["options"])
        store._next_id = header["next"] if renumbered is None else len(rows)
        store._renumbered = renumbered is not None  # a saved lexical index's rows are not these
        if header["dim"] is not None:
            index = read_faiss(path / INDEX_FILE, header["dim"], rows.live_rows(), renumbered)
            store._ensure_index(header["dim"])
            if header["staged"]:
                store._staging = index
            else:
                store._staging, store._index = None, index
                if store.search_params:
                    store._apply_search_params(index)
        elif len(rows):
            msg = f"{path / HEADER_FILE}: records but no dimension; the file is damaged."
            raise ValueError(msg)
        store._rows = rows
        return store


# Reading the files back (every value checked) -------------------------------------

_FACTORY = re.compile(r"^[A-Za-z0-9_,.\-]{1,200}\Z")
LegacyRecord = tuple[int, str, str, dict[str, Any]]


def _damaged(file: Path, what: str) -> ValueError:
    return ValueError(f"{file} is not a langchain_s2b child index file: {what}.")


def _int(value: Any, name: str, file: Path, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _damaged(file, f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def read_header(file: Path) -> dict[str, Any]:
    """Parse and type-check ``children.json``."""
    try:
        header = json.loads(file.read_bytes().decode("ascii"))
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise _damaged(file, f"not JSON ({str(err).splitlines()[0]})") from None
    if not isinstance(header, dict) or header.get("format") != HEADER_FORMAT:
        raise _damaged(file, f"it must be a header with format {HEADER_FORMAT!r}")
    info = _header_info(header, file)
    info["count"] = _int(header.get("count"), "count", file)
    return info


def _header_info(header: dict[str, Any], file: Path) -> dict[str, Any]:
    """The checked fields of a header (both formats)."""
    dim = header.get("dim")
    if dim is not None:
        _int(dim, "dim", file, minimum=1)
    factory = header.get("factory")
    if not isinstance(factory, str) or not _FACTORY.match(factory):
        raise _damaged(file, f"factory must be a FAISS index_factory string, got {factory!r}")
    nxt = _int(header.get("next"), "next", file)
    params, size = header.get("search_params"), header.get("train_size")
    if (params is not None and not isinstance(params, str)) or not isinstance(
        header.get("staged", False), bool
    ):
        raise _damaged(file, "search_params must be a string and staged a boolean")
    options = {
        "search_params": params,
        "train_size": None if size is None else _int(size, "train_size", file, minimum=1),
    }
    staged = bool(header.get("staged", False))
    return {"dim": dim, "factory": factory, "next": nxt, "staged": staged, "options": options}


def read_legacy_records(file: Path) -> tuple[dict[str, Any], list[LegacyRecord]]:
    """Parse and type-check ``children.jsonl`` (saves of format version 1)."""
    try:
        lines = file.read_bytes().decode("ascii").splitlines()
        rows = [json.loads(line) for line in lines]
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise _damaged(file, f"not JSON lines ({str(err).splitlines()[0]})") from None
    if not rows or not isinstance(rows[0], dict) or rows[0].get("format") != LEGACY_FORMAT:
        raise _damaged(file, f"the first line must be a header with format {LEGACY_FORMAT!r}")
    info = _header_info(rows[0], file)
    nxt = info["next"]
    count = _int(rows[0].get("count"), "count", file)
    records: list[LegacyRecord] = []
    seen_keys: set[str] = set()
    seen_rows: set[int] = set()
    for rec in rows[1:]:
        if not isinstance(rec, dict):
            raise _damaged(file, f"a record must be an object, got {type(rec).__name__}")
        row = _int(rec.get("row"), "row", file)
        key, text, meta = rec.get("key"), rec.get("text"), rec.get("meta")
        ok = isinstance(key, str) and key and isinstance(text, str) and isinstance(meta, dict)
        if not ok or row >= nxt or key in seen_keys or row in seen_rows:
            raise _damaged(file, f"bad record for row {row!r} (key {key!r})")
        seen_keys.add(str(key))
        seen_rows.add(row)
        records.append((row, str(key), str(text), dict(meta)))  # type: ignore[arg-type]
    if count != len(records):
        raise _damaged(file, f"the header counts {count} records but {len(records)} follow")
    return info, records


def read_faiss_file(file: Path, *, mapped: bool = False) -> Any:
    """Read a FAISS ``IndexIDMap2`` file; anything else is a ``ValueError`` naming it.

    ``mapped``: a flat index's vectors are memory-mapped from the file instead
    of read (``IO_FLAG_MMAP_IFC``): opening costs no time and no memory, pages
    are read when a search touches them. Such an index can not be added to
    (FAISS aborts the process), so only read-only callers ask for it.

    Nothing FAISS reads may claim more memory than the file has bytes: the
    wrapper's frame (its header and the id map at the end) is checked first,
    and FAISS's own limits on one array and on one loop are set to the file's
    size while it reads (:func:`faiss_envelope`).
    """
    faiss_envelope(file)
    flags = faiss.IO_FLAG_SKIP_PRECOMPUTE_TABLE | (faiss.IO_FLAG_MMAP_IFC if mapped else 0)
    try:
        with _faiss_limits(file.stat().st_size + 1):
            return faiss.read_index(str(file), flags)
    except RuntimeError as err:
        raise _damaged(file, f"FAISS could not read it ({str(err).splitlines()[-1]})") from None
    except MemoryError:
        raise _damaged(file, "FAISS ran out of memory reading it") from None


_ENVELOPE = struct.Struct("<4siqqqBi")
"""An ``IndexIDMap2`` file's start: its magic, d, ntotal, two unused numbers, is_trained, metric."""
_FAISS_LIMITS = threading.Lock()


def faiss_envelope(file: Path) -> tuple[int, int]:
    """``(d, ntotal)`` of an ``IndexIDMap2`` file, after checking its frame against its size.

    The file must start with the wrapper's header and end with its id map:
    ``ntotal`` as a 64-bit count, then ``ntotal`` ids. ``ValueError`` naming
    the file otherwise, before FAISS allocates anything.
    """
    try:
        with file.open("rb") as fh:
            head = fh.read(_ENVELOPE.size)
            size = os.fstat(fh.fileno()).st_size
            magic = head[:4]
            if magic != b"IxM2":
                what = f"expected a FAISS IndexIDMap2 (magic b'IxM2'), found {magic!r}"
                raise _damaged(file, what)
            if len(head) < _ENVELOPE.size:
                raise _damaged(file, f"it is cut short ({size} bytes)")
            _, dim, ntotal, _, _, _, _ = _ENVELOPE.unpack(head)
            tail = 8 * (ntotal + 1)
            if dim < 1 or ntotal < 0 or tail > size - _ENVELOPE.size:
                what = f"its header claims {ntotal} vectors of {dim} dimensions in {size} bytes"
                raise _damaged(file, what)
            fh.seek(size - tail)
            (count,) = struct.unpack("<q", fh.read(8))
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    if count != ntotal:
        raise _damaged(file, f"its id map holds {count} ids for {ntotal} vectors")
    return dim, ntotal


@contextmanager
def _faiss_limits(size: int) -> Iterator[None]:
    """FAISS's limits on one array's bytes and one loop's length, while one file is read.

    They are process-wide settings: reads through here take turns, and the
    previous values come back afterwards. FAISS builds without them (before
    1.15) are read without.
    """
    getters = (
        getattr(faiss, "get_deserialization_vector_byte_limit", None),
        getattr(faiss, "get_deserialization_loop_limit", None),
    )
    setters = (
        getattr(faiss, "set_deserialization_vector_byte_limit", None),
        getattr(faiss, "set_deserialization_loop_limit", None),
    )
    with _FAISS_LIMITS:
        if None in getters or None in setters:
            yield
            return
        before = [get() for get in getters]  # type: ignore[misc]
        for set_limit in setters:
            set_limit(size)  # type: ignore[misc]
        try:
            yield
        finally:
            for set_limit, value in zip(setters, before, strict=True):
                set_limit(value)  # type: ignore[misc]


def read_faiss(file: Path, dim: int, rows: np.ndarray, renumbered: np.ndarray | None) -> Any:
    """Read a FAISS file and check it matches the records' rows exactly.

    ``renumbered``: the ids the rows had in the file, when they were numbered
    again (:meth:`Records.read`): the vector that had ``renumbered[i]`` gets id ``i``.
    """
    ids = rows if renumbered is None else renumbered
    got_dim, ntotal = faiss_envelope(file)
    if got_dim != dim or ntotal != len(ids):
        msg = (
            f"{file} holds {ntotal} vectors of {got_dim} dimensions but the records say "
            f"{len(ids)} of {dim}; the files do not belong together."
        )
        raise ValueError(msg)
    index = read_faiss_file(file)
    saved = faiss.vector_to_array(index.id_map).astype(np.int64)
    if index.d != dim or index.ntotal != len(ids) or not np.array_equal(np.sort(saved), ids):
        msg = (
            f"{file} holds {index.ntotal} vectors whose ids do not match the "
            f"{len(ids)} records; the files do not belong together."
        )
        raise ValueError(msg)
    if renumbered is not None:
        faiss.copy_array_to_vector(np.searchsorted(ids, saved).astype(np.int64), index.id_map)
        index.construct_rev_map()
    return index
