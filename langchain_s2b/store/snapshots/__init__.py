"""Persistence: a retriever's stores saved as a snapshot of plain files, and loaded back.

It owns ``save``/``load``, the snapshot folder (``CURRENT`` pointer, checksums,
the writer lock and the readers' holds, version 1 read), the settings file and
the docstore's nodes file. It imports :mod:`langchain_s2b.store.base`,
:mod:`langchain_s2b.store.lexical`, :mod:`langchain_s2b.store.vectors` and
:mod:`langchain_s2b.store.nodes`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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
_ORIGINAL: dict[str, str] = {}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(import_module(home), _ORIGINAL.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
