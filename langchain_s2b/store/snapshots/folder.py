"""The save folder: the ``CURRENT`` pointer, the readers' holds, and old snapshots removed.

A load holds the snapshot it reads with a shared lock on its ``.readers``
file; a save removes an old snapshot only when it gets that lock exclusively
at once (see :mod:`~langchain_s2b.store.snapshots.persist`).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from langchain_s2b.store.base import TEMP_PREFIX

__all__ = ["POINTER", "LOCK_FILE", "READERS_FILE", "current_snapshot", "reading"]


if sys.platform != "win32":
    import fcntl

POINTER = "CURRENT"
LOCK_FILE = ".lock"
"""Held while a save writes into its directory (an inter-process lock)."""
READERS_FILE = ".readers"
"""In each snapshot: loads hold it shared while they read the snapshot (module docstring)."""
_ATTEMPTS = 100
"""Times a load reads ``CURRENT`` again when saves removed the snapshot it named meanwhile."""
_SNAPSHOT = re.compile(r"^snapshot-[0-9]+-[0-9a-f]{8}\Z")


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
