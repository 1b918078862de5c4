"""Persistence: a retriever's stores saved as a snapshot of plain files, and loaded back.

It owns ``save``/``load``, the snapshot folder (``CURRENT`` pointer, checksums,
the writer lock and the readers' holds, version 1 read), the settings file and
the docstore's nodes file. It imports :mod:`langchain_s2b.store.base`,
:mod:`langchain_s2b.store.lexical`, :mod:`langchain_s2b.store.vectors` and
:mod:`langchain_s2b.store.nodes`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_s2b.store.base import lazy_face

if TYPE_CHECKING:
    from langchain_s2b.store.snapshots.persist import Loaded, Saved, load, save
    from langchain_s2b.store.snapshots.settings import (
        NOTHING_EMBEDDED,
        check_embedded,
        embedded_setting,
    )

__all__ = [
    "Loaded",
    "NOTHING_EMBEDDED",
    "Saved",
    "check_embedded",
    "embedded_setting",
    "load",
    "save",
]

_HOMES = {
    "Loaded": "langchain_s2b.store.snapshots.persist",
    "Saved": "langchain_s2b.store.snapshots.persist",
    "load": "langchain_s2b.store.snapshots.persist",
    "save": "langchain_s2b.store.snapshots.persist",
    "NOTHING_EMBEDDED": "langchain_s2b.store.snapshots.settings",
    "check_embedded": "langchain_s2b.store.snapshots.settings",
    "embedded_setting": "langchain_s2b.store.snapshots.settings",
}


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
