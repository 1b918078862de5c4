"""``s2b verify``: every stored digest checked; ``--repair`` mends what the files can rebuild.

The checks go from the bytes up:

1. the rows (:func:`~langchain_s2b.store.sqlite.damage.find_damage`): SQLite's own
   check of the file, every text and metadata row decodes, every vector
   matches its digest, every child's vector is the one made for its text; and
   every indexed-file record decodes;
2. the files beside the database: the FAISS file of the last commit (its
   size, header, count and SHA-256 against the record made when it was
   written, :mod:`langchain_s2b.store.sqlite.index_file`, and its ids and vectors
   against the database's), and ``s2b.json`` (its digest, and that it lists
   what the database holds);
3. the documents (:func:`~langchain_s2b.core.verify.check` with ``digests``):
   manifests, nodes and child vectors agree, and each document's stored text,
   metadata and nodes give its manifest's digest;
4. the files: every document of an indexed file is there, and every document
   belongs to an indexed file.

``--repair`` deletes the damaged rows, rebuilds from its stored text every
document whose text is sound, removes the others, and reads their files again
from disk (:func:`reread`); a file that is gone is named: its documents can not
be rebuilt. The FAISS file and ``s2b.json`` are written again. A database file
that SQLite can not read (its own check fails, or it can not even be opened)
can not be mended in place: ``--repair`` then indexes the files again into a
new file (:func:`rebuild`): those the damaged file still lists and those
``s2b.json`` lists, keeping the vectors whose digests still check out.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_s2b.cli import indexer
from langchain_s2b.cli.errors import UserError
from langchain_s2b.cli.folder import (
    LISTING_FILE,
    Embedded,
    check_listing,
    listed_embedded,
    read_listing,
)
from langchain_s2b.cli.index_dir import DB_FILE, Store, initialise, replace_database
from langchain_s2b.cli.loaders import Found
from langchain_s2b.core.keys import (
    encode_source_key,
    is_manifest_key,
    manifest_key,
    source_key_of,
)
from langchain_s2b.core.verify import VerifyReport
from langchain_s2b.store.sqlite import (
    Damage,
    Database,
    file_damage,
    find_damage,
    mend,
    readable_rows,
    salvage_vectors,
)
from langchain_s2b.store.sqlite.index_file import check as check_file
from langchain_s2b.store.sqlite.index_file import index_file, read_record
from langchain_s2b.store.vectors import normalise


@dataclass
class Health:
    """What :func:`check` found (and, with ``repair``, did)."""

    damage: Damage
    report: VerifyReport | None = None
    """The documents' check (``None`` when the database file itself is damaged)."""
    bad_files: list[str] = field(default_factory=list)
    """Indexed-file records whose bytes are damaged."""
    lost: list[str] = field(default_factory=list)
    """Indexed files one of whose documents is gone (removed, with ``repair``)."""
    unowned: list[str] = field(default_factory=list)
    """Documents no indexed file holds."""
    index_file: bool = False
    """The FAISS index file of the last commit does not hold the database's vectors."""
    file_problem: str | None = None
    """What is wrong with the bytes of the FAISS index file of the last commit."""
    unrecorded: bool = False
    """The FAISS index file has no recorded digest yet (a store made before digests)."""
    listing: str | None = None
    """What is wrong with ``s2b.json`` (damaged, or not what the database lists)."""
    unlisted: bool = False
    """There is no ``s2b.json`` yet (a store made before it)."""

    @property
    def ok(self) -> bool:
        """Nothing damaged, lost or left over."""
        return (
            self.damage.ok
            and self.report is not None
            and self.report.ok
            and not (self.bad_files or self.lost or self.unowned or self.index_file)
            and self.file_problem is None
            and self.listing is None
        )


def check(store: Store, *, repair: bool) -> tuple[Health, dict[str, int] | None]:
    """Check the store (``repair``: and mend it, in one transaction), and what it holds."""
    database = file_damage(store.db)
    if database:
        return Health(Damage(database=database)), None
    with store.db.write() if repair else store.db.read():
        counts = store.counts()
        return _check(store, repair=repair), counts


def _check(store: Store, *, repair: bool) -> Health:
    damage = find_damage(store.db, store.docstore)
    health = Health(damage, bad_files=store.damaged_files())
    bad = set(damage.children) | set(damage.unreadable)
    _check_file(store, health)
    health.listing = check_listing(store.directory, store.db)
    health.unlisted = not os.path.lexists(store.directory / LISTING_FILE)
    read = not store.restore(mend=repair)
    if read and health.file_problem is None:  # read from its file: it must hold the database's
        health.index_file = not index_matches(store, bad, set(damage.vectors))
    if repair:
        mend(store.db, damage)
        for path in health.bad_files:
            store.drop_file(path)
        if health.index_file or health.file_problem or bad or damage.vectors:  # FAISS anew
            store.index.build()
    health.report = store.retriever.verify(repair=repair, digests=True)
    health.report.lexical_missing = [k for k in health.report.lexical_missing if k not in bad]
    health.lost, health.unowned = _files_without_sources(store)
    if repair:
        for path in health.lost:
            store.drop_file(path)
        store.retriever.delete(health.unowned)
    return health


def _check_file(store: Store, health: Health) -> None:
    """The FAISS index file of the last commit: its size, header, count and digest."""
    stamp = store.db.stamp()
    file = None if stamp is None else index_file(store.directory, stamp)
    if file is None or not os.path.lexists(file):
        return  # none yet (an interrupted run): it is built and written, not damage
    health.file_problem = check_file(file, store.db, digest=True)
    if health.file_problem is not None:
        health.file_problem = f"{file.name}: {health.file_problem}"
    health.unrecorded = health.file_problem is None and read_record(store.db, file) is None


def index_matches(store: Store, bad_keys: set[str], bad_vectors: set[int]) -> bool:
    """Whether FAISS holds exactly the database's leaves, each with its stored vector.

    Leaves and vectors found damaged already (``bad_keys``, ``bad_vectors``) are
    not compared: repairing them builds FAISS again.
    """
    faiss_index = store.index._index
    pairs = store.db.conn.execute("SELECT row, key FROM children ORDER BY row").fetchall()
    rows = [int(row) for row, _ in pairs]
    skip = {int(row) for row, key in pairs if key in bad_keys}
    if faiss_index is None:
        return not rows
    held = {int(r) for r in faiss.vector_to_array(faiss_index.id_map)}
    if held - set(rows) or set(rows) - held - skip:
        return False
    sql = "SELECT c.row, c.vec, v.vec FROM children c JOIN vectors v ON v.id = c.vec ORDER BY c.row"
    cursor = store.db.conn.execute(sql)
    while found := cursor.fetchmany(10_000):
        batch = [
            (r, v) for r, i, v in found if r not in skip and i not in bad_vectors and r in held
        ]
        if not batch:
            continue
        ids = np.asarray([row for row, _ in batch], dtype=np.int64)
        stored = normalise(np.stack([np.frombuffer(vec, np.float32) for _, vec in batch]))
        if not np.allclose(faiss_index.reconstruct_batch(ids), stored, atol=1e-6):
            return False
    return True


def _files_without_sources(store: Store) -> tuple[list[str], list[str]]:
    """Indexed files one of whose documents has no manifest; documents no file holds."""
    present = {source_key_of(k) for k in store.docstore.yield_keys() if is_manifest_key(k)}
    rows = store.files()
    lost = [
        path
        for path, row in rows.items()
        if any(encode_source_key(s) not in present for s in row.sources)
    ]
    held = {encode_source_key(s) for row in rows.values() for s in row.sources}
    unowned = sorted(present - held)
    by_key = _source_ids(store, unowned)
    return lost, [by_key[k] for k in unowned if k in by_key]


def _source_ids(store: Store, source_keys: list[str]) -> dict[str, str]:
    """Source key -> source id, read from the manifests."""
    manifests = store.docstore.mget([manifest_key(k) for k in source_keys])
    return {
        k: str(m.metadata["source_id"])
        for k, m in zip(source_keys, manifests, strict=True)
        if m is not None and isinstance(m.metadata.get("source_id"), str)
    }


def reread(
    store: Store,
    paths: list[str],
    *,
    on_skip: Callable[[str, str], None],
    progress: indexer.Progress,
) -> tuple[indexer.Outcome, list[str]]:
    """Index again the files that still exist; the paths that do not (their documents left)."""
    there = [Path(p) for p in paths if Path(p).is_file()]
    gone = [p for p in paths if not Path(p).is_file()]
    found = Found(files=there)
    done = indexer.run(store, found, strict=False, on_skip=on_skip, progress=progress, prune=False)
    return done, gone


@dataclass
class Rebuilt:
    """What :func:`rebuild` did with a store whose database file is damaged."""

    done: indexer.Outcome
    vectors: int
    """Vectors kept from the damaged file (their digests checked): not embedded again."""
    gone: list[str]
    """Indexed files no longer on disk."""
    complete: bool
    """Whether the list of indexed files could be read whole (from the database or s2b.json)."""
    listed: bool
    """Whether ``s2b.json`` listed files that the damaged database did not."""
    aside: Path | None
    """Where the damaged database file was kept."""


def rebuild(
    directory: Path,
    spec: str,
    model: Embeddings,
    damaged: Database | None,
    *,
    on_skip: Callable[[str, str], None],
    progress: indexer.Progress,
    embedded: Embedded | None = None,
) -> Rebuilt:
    """Index the store's files again into a new database file that replaces the damaged one.

    The indexed files are those the damaged file still lists and those
    ``s2b.json`` lists (see :mod:`.folder`): a damaged page can read as an
    empty one, so what the damaged file says is never taken alone.
    The vectors that the damaged file still holds whole are kept, so only the
    rest is embedded again. The damaged file is kept aside. Call under the
    writer lock; ``damaged`` (the damaged database, if it opens at all) is closed.
    ``embedded``: the store's headers and context setting (``None``: as
    ``s2b.json`` records it).
    """
    paths, complete, kept = _salvage(damaged)
    try:
        listing = read_listing(directory)
    except UserError:
        listing = None
    listed = listing is not None and bool(set(listing.files) - set(paths))
    if listing is not None:  # a damaged page can read as an empty one: never trust it alone
        paths = sorted({*paths, *listing.files})
        complete = True
    fresh = directory / f"{DB_FILE}.rebuild"
    for name in (fresh, Path(f"{fresh}-wal"), Path(f"{fresh}-shm")):
        name.unlink(missing_ok=True)
    db = Database(fresh)
    try:
        if embedded is None:  # the setting s2b.json records (an older one: none)
            embedded = Embedded(headers=False) if listing is None else listed_embedded(listing)
        initialise(db, spec, embedded)
        with db.write():
            db.insert_vectors(kept)
        new = Store(directory, db, spec, embedding=model, search=False, contexts=True)
        done, gone = reread(new, paths, on_skip=on_skip, progress=progress)
        new.cache.collect_garbage()
    finally:
        db.close()
    aside = replace_database(directory, fresh, keep=True)
    return Rebuilt(done, len(kept), gone, complete, listed, aside)


def _salvage(damaged: Database | None) -> tuple[list[str], bool, list[tuple[bytes, bytes]]]:
    """The paths a damaged database still lists (and whether all), and its whole vectors."""
    if damaged is None:
        return [], False, []
    try:
        rows, complete = readable_rows(damaged, "SELECT path FROM files")
        try:
            kept = salvage_vectors(damaged)
        except sqlite3.DatabaseError:
            kept = []
        return [str(r[0]) for r in rows if isinstance(r[0], str)], complete, kept
    finally:
        damaged.close()
