"""Persistence: a retriever's stores as plain files (FAISS, numpy arrays, JSON; never pickle).

A save directory holds complete snapshots and a pointer to the current one::

    path/
      CURRENT                  the name of the current snapshot (one line)
      snapshot-<time>-<rand>/
        s2b.json               format, version, configuration, checksums
        children.faiss         faiss.write_index of the child index
        children.json          its header (dimension, factory, next row id, count)
        records.*              the children's keys, text and metadata as columns
                               (:mod:`~langchain_s2b.store.vectors.records`)
        nodes.*                the docstore, when it lives in memory: nodes as spans
                               over their source's text
                               (:mod:`~langchain_s2b.store.nodes.node_store`)
        lexical/               the lexical index (tantivy's own files), with hybrid search

Loading reads these as they are: numpy arrays (``allow_pickle=False``), one
UTF-8 text file per store, FAISS's own reader, tantivy's files opened in place
(from a scratch copy): no ``Document`` is made and nothing is indexed again.
A save of format version 1 (``children.jsonl`` and ``nodes.txt``: one line of
JSON per record and per node) is read too, more slowly; saving it again
writes version 2.

``save`` holds an inter-process file lock (``path/.lock``, ``filelock``) so saves
to one path, from threads or processes, run one at a time. It writes a new
snapshot beside the old ones, flushes it to disk, reads its FAISS file back, then
replaces ``CURRENT`` with ``os.replace`` (atomic) and only then removes older
snapshots: a crash at any moment leaves a loadable save, the old or the new.
``load`` reads only JSON and FAISS files, checks every value's type, every
file's checksum, the format version and the embedding's dimension, and
refuses anything else with a ``ValueError`` that says what is wrong.

Loads and saves of one path may overlap, from any threads and processes. A
load holds a shared lock (``flock``) on the ``.readers`` file of the snapshot
``CURRENT`` names while it reads it; a save removes an old snapshot only when
it gets that lock exclusively at once, else it leaves it to a later save. So a
load never waits for a save (nor a save for a load), and it reads one complete
snapshot. A save that removes a snapshot first renames it away: a load that
read ``CURRENT`` just before the switch finds its snapshot gone once it holds
the lock, and reads ``CURRENT`` again.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.stores import BaseStore, InMemoryByteStore, InMemoryStore
from langchain_core.vectorstores import VectorStore

from langchain_s2b.core.lifecycle import Config
from langchain_s2b.core.splitters import build_splitter, describe_splitter
from langchain_s2b.core.tree import Level
from langchain_s2b.store.base import (
    TEMP_PREFIX,
    class_name,
    first_line,
    fsync_and_hash,
    fsync_dir,
    sha256_file,
    write_json,
    write_text_atomic,
)
from langchain_s2b.store.lexical import LexicalIndex
from langchain_s2b.store.nodes import (
    NODE_FILES,
    DocumentCodecStore,
    NodeStore,
    copy_into,
    decode_document,
    encode_document,
)
from langchain_s2b.store.vectors import LEGACY_RECORDS_FILE, SAVED_FILES, FaissIndex

if sys.platform != "win32":
    import fcntl

FORMAT = "langchain_s2b"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
POINTER = "CURRENT"
CONFIG_FILE = "s2b.json"
LEGACY_NODES_FILE = "nodes.txt"
"""Format version 1's docstore: per line the key as JSON, a tab, the document as JSON."""
LEXICAL_DIR = "lexical"
"""The lexical index's files (tantivy's own format), inside a snapshot."""
_LEXICAL_FILE = re.compile(rf"^{LEXICAL_DIR}/(?!\.\.?$)[A-Za-z0-9_.-]+$")
LOCK_FILE = ".lock"
"""Held while a save writes into its directory (an inter-process lock)."""
READERS_FILE = ".readers"
"""In each snapshot: loads hold it shared while they read the snapshot (module docstring)."""
_ATTEMPTS = 100
"""Times a load reads ``CURRENT`` again when saves removed the snapshot it named meanwhile."""
_SNAPSHOT = re.compile(r"^snapshot-[0-9]+-[0-9a-f]{8}$")


@dataclass(frozen=True)
class Saved:
    """What a save holds: the two stores, the levels and the retriever's options."""

    vectorstore: VectorStore
    docstore: BaseStore[str, Document]
    levels: list[Level]
    options: dict[str, Any]
    """The retriever's options that differ from their defaults, as JSON values."""
    lexical: LexicalIndex | None = None
    """The BM25 twin of the child index (hybrid search), saved in ``lexical/``."""
    embedded: dict[str, Any] | None = None
    """What is embedded beside each leaf's text (:func:`embedded_setting`)."""


@dataclass(frozen=True)
class Loaded:
    """What :func:`load` read: the stores to build a retriever on, its levels and options."""

    vectorstore: VectorStore
    stores: dict[str, Any]
    """``{"docstore": ...}`` or ``{"byte_store": ...}``."""
    levels: list[Level]
    options: dict[str, Any]
    lexical: LexicalIndex | None = None
    embedded: dict[str, Any] | None = None
    """The save's :func:`embedded_setting` (``None``: a save made before it was recorded)."""


def embedded_setting(headers: str, context_model: str | None) -> dict[str, Any]:
    """What a save records of what is embedded beside each leaf's text.

    ``headers``: ``"off"``, ``"sections"`` or ``"custom"``
    (:func:`~langchain_s2b.core.headers.describe_headers`); ``context_model``:
    the name of the chat model that wrote the contexts, if any.
    """
    return {"contextual_headers": headers, "context_model": context_model}


NOTHING_EMBEDDED = embedded_setting("off", None)
"""The setting of a save that records none (made before headers existed)."""


def check_embedded(
    path: str | Path, saved: Mapping[str, Any] | None, headers: str, context_model: str | None
) -> None:
    """Refuse to open a save with another header or context setting than it was built with.

    A retriever whose leaves were embedded one way and whose next leaves would
    be embedded another would rank them on two scales; one line says what to pass.
    """
    saved = dict(saved or NOTHING_EMBEDDED)
    was, model = saved["contextual_headers"], saved["context_model"]
    if was != headers:
        names = {"off": "False", "sections": "True", "custom": "<its callable>"}
        msg = (
            f"{path} was built with contextual_headers={names[was]}, not {names[headers]}; "
            f"pass contextual_headers={names[was]} to load(), or build the index again."
        )
        raise ValueError(msg)
    if (model is None) != (context_model is None):
        msg = (
            f"{path} was built without a context model; load it without context_model="
            if model is None
            else f"{path} was built with the context model {model!r}; pass it again: "
            "load(path, embedding, context_model=...)"
        )
        raise ValueError(msg)
    if model is not None and model != context_model:
        warnings.warn(
            f"{path} was built with the context model {model!r}, and {context_model!r} was "
            "passed to load(): sources added from now on get its contexts.",
            UserWarning,
            stacklevel=3,
        )


# Saving ------------------------------------------------------------------------------


def save(saved: Saved, path: str | Path, *, include_docstore: bool | None = None) -> Path:
    """Write a retriever's parts into ``path`` atomically; returns the snapshot directory.

    Args:
        saved: the retriever's stores, levels and options (hold its lock while calling).
        path: a new or empty directory, or an earlier save (it is replaced).
        include_docstore: copy the docstore into the save. Default: only when it
            lives in memory; a store on disk or in a server stays where it is and
            is passed again to :func:`load`.
    """
    root = Path(path)
    _check_target(root)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / LOCK_FILE):
        _check_target(root)  # again: another save may have written meanwhile
        return _save_locked(saved, root, include_docstore)


def _save_locked(saved: Saved, root: Path, include_docstore: bool | None) -> Path:
    name = f"snapshot-{time.time_ns()}-{secrets.token_hex(4)}"
    temp = root / f"{TEMP_PREFIX}{name}"
    temp.mkdir()
    try:
        meta = _write_snapshot(saved, temp, include_docstore)
        write_json(temp / CONFIG_FILE, meta)
        (temp / READERS_FILE).touch()
        fsync_dir(temp)
        if isinstance(saved.vectorstore, FaissIndex):  # read back before it replaces anything
            FaissIndex.check_saved(temp)
        os.replace(temp, root / name)
        fsync_dir(root)
        write_text_atomic(root / POINTER, name + "\n")
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    _remove_old(root, keep=name)
    return root / name


def _check_target(root: Path) -> None:
    if root.exists() and not root.is_dir():
        msg = f"Cannot save into {root}: it is a file; pass a directory path."
        raise ValueError(msg)
    if (
        root.is_dir()
        and any(not _ours(child.name) for child in root.iterdir())
        and not (root / POINTER).exists()
    ):
        msg = (
            f"Refusing to save into {root}: it is not empty and not an earlier "
            "langchain_s2b save (no CURRENT file); choose a new or empty directory."
        )
        raise ValueError(msg)


def _ours(name: str) -> bool:
    """A name a save writes (a first save that was interrupted leaves these)."""
    return name == LOCK_FILE or name.startswith(TEMP_PREFIX) or bool(_SNAPSHOT.match(name))


def _write_snapshot(saved: Saved, temp: Path, include_docstore: bool | None) -> dict[str, Any]:
    files: dict[str, str] = {}
    index = saved.vectorstore
    if isinstance(index, FaissIndex):
        for written in index.save(temp):
            files[written] = fsync_and_hash(temp / written)
        vectors: dict[str, Any] = {"kind": "faiss", "count": len(index), "dim": index.dim}
    else:
        vectors = {"kind": "external", "class": class_name(index)}
    if saved.lexical is not None:
        for written in saved.lexical.save(temp / LEXICAL_DIR):
            name = f"{LEXICAL_DIR}/{written}"
            files[name] = fsync_and_hash(temp / name)
        fsync_dir(temp / LEXICAL_DIR)
    store = saved.docstore
    kind = docstore_kind(store)
    include = kind != "external" if include_docstore is None else include_docstore
    nodes = None
    if include:
        names, nodes = write_nodes(store, temp)
        for name in names:
            files[name] = fsync_and_hash(temp / name)
    levels = saved.levels
    embedding = index.embeddings
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "embedding": {
            "class": class_name(embedding),
            "model": None if embedding is None else model_name(embedding),
            "dim": vectors.get("dim"),
            "probe": _probe(embedding) if embedding is not None and vectors.get("dim") else None,
        },
        "vectorstore": vectors,
        "docstore": {"kind": kind, "class": class_name(store), "saved": include, "count": nodes},
        "retriever": saved.options,
        "levels": [{"name": lv.name, "splitter": describe_splitter(lv)} for lv in levels],
        "fingerprint": Config(levels).fingerprint(),
        "embedded": saved.embedded or NOTHING_EMBEDDED,
        "files": files,
    }


# Loading ------------------------------------------------------------------------------


def load(
    path: str | Path,
    embedding: Embeddings,
    *,
    docstore: BaseStore[str, Document] | None = None,
    byte_store: BaseStore[str, bytes] | None = None,
    vectorstore: Any = None,
    splitters: Mapping[str, Any] | None = None,
) -> Loaded:
    """Read a save written by :func:`save`; see ``SmallToBigRetriever.load``.

    The snapshot ``CURRENT`` names is held (a shared lock) while it is read, so
    a save that finishes meanwhile leaves it in place (module docstring).
    """
    with reading(Path(path)) as snap:
        return _load(snap, embedding, docstore, byte_store, vectorstore, splitters)


def _load(
    snap: Path,
    embedding: Embeddings,
    docstore: BaseStore[str, Document] | None,
    byte_store: BaseStore[str, bytes] | None,
    vectorstore: Any,
    splitters: Mapping[str, Any] | None,
) -> Loaded:
    meta = _read_config(snap)
    _check_files(snap, meta["files"])
    dim = meta["embedding"].get("dim")
    if dim is not None:
        check_dimension(embedding, dim, meta["embedding"]["class"])
        _warn_if_other_model(embedding, meta["embedding"])
    vectorstore = _load_vectors(snap, meta, embedding, vectorstore)
    store = restore_docstore(snap, meta, docstore, byte_store)
    levels = _load_levels(meta, splitters or {})
    if Config(levels).fingerprint() != meta["fingerprint"]:
        warnings.warn(
            "The splitters passed to load() differ from the saved ones: re-adding an "
            "unchanged source will re-index it.",
            UserWarning,
            stacklevel=3,
        )
    lexical = None
    if any(name.startswith(f"{LEXICAL_DIR}/") for name in meta["files"]):
        lexical = LexicalIndex.load(snap / LEXICAL_DIR, documents=False)
    embedded = meta.get("embedded")
    return Loaded(vectorstore, store, levels, dict(meta["retriever"]), lexical, embedded)


def current_snapshot(root: Path) -> Path:
    """The snapshot ``root/CURRENT`` names, checked to be a direct child (not held: see reading)."""
    name = _pointer(root)
    if not (root / name).is_dir():
        raise _no_snapshot(root, name)
    return root / name


@contextmanager
def reading(root: Path) -> Iterator[Path]:
    """The snapshot ``root/CURRENT`` names, held with a shared lock until the block ends.

    No save removes a snapshot while a load holds it (module docstring).
    """
    name, held = _hold_current(root)
    try:
        yield root / name
    finally:
        if held >= 0:
            os.close(held)  # releases the lock


def _hold_current(root: Path) -> tuple[str, int]:
    """The current snapshot's name and the descriptor that holds it (``-1``: no lock).

    When saves switched ``CURRENT`` and removed the snapshot it named between
    the read of ``CURRENT`` and the lock, ``CURRENT`` is read again.
    """
    for _ in range(_ATTEMPTS):
        name = _pointer(root)
        held = _hold(root / name)
        if held is not None:
            return name, held
        if _pointer(root) == name:  # still the current one, and not there: damaged
            raise _no_snapshot(root, name)
    msg = f"{root}: saves kept replacing the current snapshot while it was opened; load again."
    raise ValueError(msg)


def _pointer(root: Path) -> str:
    """The snapshot name ``root/CURRENT`` holds (a valid name; it may be gone by now)."""
    pointer = root / POINTER
    try:
        name = pointer.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        msg = f"{root} is not a langchain_s2b save: {pointer} is missing."
        raise ValueError(msg) from None
    except UnicodeDecodeError:
        name = "<binary>"
    if not _SNAPSHOT.match(name):
        raise _no_snapshot(root, name)
    return name


def _no_snapshot(root: Path, name: str) -> ValueError:
    pointer = root / POINTER
    return ValueError(f"{pointer} must name a snapshot directory inside {root}; got {name[:80]!r}.")


def _hold(snap: Path) -> int | None:
    """A descriptor holding ``snap``'s readers file shared; ``None``: the snapshot is gone.

    ``-1``: held without a lock (a snapshot saved before snapshots had a
    readers file, or a system without ``flock``).
    """
    try:
        fd = os.open(snap / READERS_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return -1 if snap.is_dir() else None
    if sys.platform == "win32":  # no flock: a load is not held there
        os.close(fd)
        return -1
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:  # a save that removed the snapshot meanwhile renamed it first
            same = os.path.samestat(os.fstat(fd), os.stat(snap / READERS_FILE))
        except FileNotFoundError:
            same = False
    except BaseException:
        os.close(fd)
        raise
    if not same:
        os.close(fd)
        return None
    return fd


PROBE_TEXT = "dimension check"
"""Embedded at save and at load: the same model gives the same vector."""
_MODEL_ATTRIBUTES = ("model", "model_name", "model_id", "deployment")


def model_name(embedding: Embeddings) -> str | None:
    """The model an embedding object names (``model``, ``model_name`` ...), if any."""
    for attr in _MODEL_ATTRIBUTES:
        value = getattr(embedding, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def _probe(embedding: Embeddings) -> list[float]:
    return [round(float(x), 6) for x in embedding.embed_query(PROBE_TEXT)]


def _warn_if_other_model(embedding: Embeddings, saved: Mapping[str, Any]) -> None:
    """Warn when the model passed to load() embeds differently from the saved one."""
    probe = saved.get("probe")
    if not isinstance(probe, list) or not all(isinstance(x, int | float) for x in probe):
        return
    now = _probe(embedding)
    dot = sum(a * b for a, b in zip(probe, now, strict=False))
    norms = (sum(a * a for a in probe) * sum(b * b for b in now)) ** 0.5
    if len(now) == len(probe) and norms and dot / norms >= 0.999:
        return
    was = saved.get("model") or saved.get("class")
    given = model_name(embedding) or class_name(embedding)
    warnings.warn(
        f"The embedding passed to load() ({given}) embeds text differently from the one "
        f"this index was built with ({was}); queries will not match the stored vectors. "
        "Pass the model the index was built with.",
        UserWarning,
        stacklevel=4,
    )


def check_dimension(embedding: Embeddings, dim: int, saved_class: str) -> None:
    """Refuse an embedding whose vectors do not have ``dim`` numbers."""
    got = len(embedding.embed_query(PROBE_TEXT))
    if got != dim:
        msg = (
            f"This index was built with {dim}-dimensional embeddings ({saved_class}); "
            f"the embedding passed to load() ({class_name(embedding)}) returns {got}-"
            "dimensional vectors. Pass the model the index was built with."
        )
        raise ValueError(msg)


def _read_config(snap: Path) -> dict[str, Any]:
    file = snap / CONFIG_FILE
    try:
        meta = json.loads(file.read_bytes())
    except FileNotFoundError:
        msg = f"{file} is missing; the save is incomplete or damaged."
        raise ValueError(msg) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        msg = f"{file} is not JSON ({first_line(err)}); it is not a langchain_s2b save."
        raise ValueError(msg) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        msg = f"{file} is not a langchain_s2b save (no format {FORMAT!r})."
        raise ValueError(msg)
    version = meta.get("format_version")
    if version not in READABLE_VERSIONS:
        msg = (
            f"{file} has format version {version!r}; this langchain_s2b reads versions "
            f"{list(READABLE_VERSIONS)}. Load it with the version that wrote it and save it "
            "again, or re-index."
        )
        raise ValueError(msg)
    _check_shape(file, meta)
    return meta


def _check_shape(file: Path, meta: dict[str, Any]) -> None:
    """Type-check the parts of ``s2b.json`` that load relies on."""
    emb, vec, doc = meta.get("embedding"), meta.get("vectorstore"), meta.get("docstore")
    files, levels = meta.get("files"), meta.get("levels")
    problems = []
    if not isinstance(emb, dict) or not isinstance(emb.get("class"), str) or "dim" not in emb:
        problems.append("embedding must be an object with a class name and a dim")
    elif emb.get("dim") is not None and (
        isinstance(emb["dim"], bool) or not isinstance(emb["dim"], int) or emb["dim"] < 1
    ):
        problems.append(f"embedding.dim must be a positive integer, got {emb['dim']!r}")
    if not isinstance(vec, dict) or vec.get("kind") not in ("faiss", "external"):
        problems.append("vectorstore.kind must be 'faiss' or 'external'")
    if not isinstance(doc, dict) or doc.get("kind") not in _KINDS:
        problems.append(f"docstore.kind must be one of {list(_KINDS)}")
    elif not isinstance(doc.get("saved"), bool):
        problems.append("docstore.saved must be true or false")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        problems.append("files must map file names to checksums")
    if not isinstance(meta.get("retriever"), dict) or not isinstance(meta.get("fingerprint"), str):
        problems.append("retriever must be an object and fingerprint a string")
    if (
        not isinstance(levels, list)
        or not levels
        or not all(
            isinstance(lv, dict)
            and isinstance(lv.get("name"), str)
            and isinstance(lv.get("splitter"), dict)
            for lv in levels
        )
    ):
        problems.append("levels must be a non-empty list of {name, splitter}")
    embedded = meta.get("embedded", NOTHING_EMBEDDED)
    if (
        not isinstance(embedded, dict)
        or embedded.get("contextual_headers") not in ("off", "sections", "custom")
        or not isinstance(embedded.get("context_model"), str | None)
    ):
        problems.append(
            "embedded must be {contextual_headers: off|sections|custom, context_model: a name "
            "or null}"
        )
    if problems:
        msg = f"{file} is malformed: {'; '.join(problems)}."
        raise ValueError(msg)


_KINDS = ("nodes", "memory", "memory-bytes", "external")


def _check_files(snap: Path, files: Mapping[str, str]) -> None:
    allowed = {*SAVED_FILES, *NODE_FILES, LEGACY_RECORDS_FILE, LEGACY_NODES_FILE}
    for name, digest in files.items():
        lexical = _LEXICAL_FILE.match(name) is not None
        if name not in allowed and not lexical:
            msg = f"{snap / CONFIG_FILE} lists an unexpected file {name!r}; allowed: {allowed}."
            raise ValueError(msg)
        file = snap / name
        if not file.is_file() or sha256_file(file) != digest:
            msg = f"{file} is missing or does not match its checksum; the save is damaged."
            raise ValueError(msg)


def _load_vectors(snap: Path, meta: dict[str, Any], embedding: Embeddings, given: Any) -> Any:
    if given is not None:
        return given
    if meta["vectorstore"]["kind"] != "faiss":
        msg = (
            f"This save's child index was a {meta['vectorstore'].get('class')!r}, which "
            "save() does not copy; pass it again: load(path, embedding, vectorstore=...)."
        )
        raise ValueError(msg)
    return FaissIndex.load(snap, embedding)


def _load_levels(meta: dict[str, Any], splitters: Mapping[str, Any]) -> list[Level]:
    levels = []
    for spec in meta["levels"]:
        name = spec["name"]
        splitter = splitters.get(name) or build_splitter(spec["splitter"], name)
        levels.append(Level(name, splitter))
    unknown = sorted(set(splitters) - {lv.name for lv in levels})
    if unknown:
        names = [lv.name for lv in levels]
        msg = f"splitters= names unknown levels {unknown}; the saved levels are {names}."
        raise ValueError(msg)
    return levels


# Files --------------------------------------------------------------------------------


def _remove_old(root: Path, keep: str) -> None:
    """Remove older snapshots no load is reading, and leftovers of interrupted saves."""
    for child in root.iterdir():
        if child.name == keep:
            continue
        if child.is_dir() and _SNAPSHOT.match(child.name):
            _remove_unread(child)
        elif child.is_dir() and child.name.startswith(TEMP_PREFIX):
            shutil.rmtree(child, ignore_errors=True)
        elif child.is_file() and child.name.startswith(TEMP_PREFIX):
            child.unlink(missing_ok=True)


def _remove_unread(snap: Path) -> None:
    """Remove an old snapshot unless a load holds it (then a later save removes it).

    It is renamed away under the exclusive lock before it is removed, so a load
    that waited for the lock sees that it is gone (:func:`_hold`).
    """
    try:
        fd = os.open(snap / READERS_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return
    try:
        if sys.platform != "win32":
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # a load is reading it
        gone = snap.with_name(f"{TEMP_PREFIX}{snap.name}-{secrets.token_hex(4)}")
        try:
            os.replace(snap, gone)
        except OSError:
            return
        shutil.rmtree(gone, ignore_errors=True)
    finally:
        os.close(fd)


# The docstore as a file: per line the key as JSON, a tab, the document as JSON ----

BATCH = 1000
"""Keys per ``mget``/``mset`` while copying."""


def docstore_kind(store: BaseStore[str, Document]) -> str:
    """``nodes`` / ``memory`` / ``memory-bytes`` (copied into a save) or ``external``."""
    if type(store) is NodeStore:
        return "nodes"
    if type(store) is InMemoryStore:
        return "memory"
    if isinstance(store, DocumentCodecStore) and type(store.byte_store) is InMemoryByteStore:
        return "memory-bytes"
    return "external"


def write_nodes(store: BaseStore[str, Document], directory: Path) -> tuple[list[str], int]:
    """Write a docstore's documents as node columns; the file names and the document count.

    A :class:`NodeStore` writes its columns as they are; any other store is
    read through ``mget`` into one first.
    """
    columns = store if isinstance(store, NodeStore) else copy_into(store)
    return columns.write(directory)


def batches(keys: Iterator[str]) -> Iterator[list[str]]:
    """Keys in lists of :data:`BATCH`."""
    batch: list[str] = []
    for key in keys:
        batch.append(key)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def restore_docstore(
    snap: Path,
    meta: dict[str, Any],
    docstore: BaseStore[str, Document] | None,
    byte_store: BaseStore[str, bytes] | None,
) -> dict[str, Any]:
    """The store to load into (given, or a new in-memory one), filled from the snapshot.

    Returns the retriever field to set: ``{"docstore": ...}`` or ``{"byte_store": ...}``.
    A store in memory (the default) is the snapshot's :class:`NodeStore` itself,
    opened from its columns; a store passed in is filled document by document.
    """
    info = meta["docstore"]
    if docstore is not None and byte_store is not None:
        msg = "Pass docstore= or byte_store= to load(), not both."
        raise ValueError(msg)
    if docstore is None and byte_store is None and not info["saved"]:
        msg = (
            f"This save did not copy its docstore (a {info.get('class')!r}, which keeps "
            "its own data); pass it again: load(path, embedding, byte_store=...) or "
            "docstore=...."
        )
        raise ValueError(msg)
    if not info["saved"]:
        return {"docstore": docstore} if docstore is not None else {"byte_store": byte_store}
    if meta["format_version"] == 1:
        nodes = NodeStore()
        _fill(nodes, ((key, doc) for key, _, doc in read_nodes(snap / LEGACY_NODES_FILE)))
    else:
        nodes = NodeStore.read(snap)
    if docstore is None and byte_store is None:
        if info["kind"] != "memory-bytes":
            return {"docstore": nodes}
        byte_store = InMemoryByteStore()
    if byte_store is not None:
        pairs = ((key, encode_document(doc)) for key, doc in _documents(nodes))
        _fill(byte_store, pairs)
        return {"byte_store": byte_store}
    assert docstore is not None
    _fill(docstore, _documents(nodes))
    return {"docstore": docstore}


def _documents(nodes: NodeStore) -> Iterator[tuple[str, Document]]:
    for batch in batches(nodes.yield_keys()):
        for key, doc in zip(batch, nodes.mget(batch), strict=True):
            if doc is not None:
                yield key, doc


def _fill(sink: BaseStore[str, Any], pairs: Iterator[tuple[str, Any]]) -> None:
    batch: list[tuple[str, Any]] = []
    for pair in pairs:
        batch.append(pair)
        if len(batch) == BATCH:
            sink.mset(batch)
            batch = []
    sink.mset(batch)


def read_nodes(file: Path) -> Iterator[tuple[str, bytes, Document]]:
    """``(key, raw JSON, document)`` per line; every document is decoded and checked."""
    if not file.is_file():
        msg = f"{file} is missing; the save is incomplete or damaged."
        raise ValueError(msg)
    with file.open("rb") as fh:
        for number, line in enumerate(fh, start=1):
            head, tab, raw = line.rstrip(b"\n").partition(b"\t")
            try:
                key = json.loads(head)
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                key = None
            if not tab or not isinstance(key, str):
                msg = f"{file}, line {number}: expected a JSON string key, a tab and a document."
                raise ValueError(msg)
            yield key, raw, decode_document(raw, key)
