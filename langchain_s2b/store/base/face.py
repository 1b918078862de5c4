"""A room's face: its public names, each loaded from its home module on first use (PEP 562).

Every room of ``store/`` names what other rooms and the retriever may use in
its ``__init__``; loading them lazily keeps ``import langchain_s2b`` (and a
room whose names are not used) free of FAISS, numpy and tantivy.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_face(
    module: str, homes: Mapping[str, str], renamed: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` that load ``homes[name]``'s ``name``.

    ``renamed`` maps a public name to its name in its home module. A loaded
    name is kept in the module's globals, so it is looked up once.
    """
    original = renamed or {}

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's own name)
        home = homes.get(name)
        if home is None:
            msg = f"module {module!r} has no attribute {name!r}"
            raise AttributeError(msg)
        value = getattr(import_module(home), original.get(name, name))
        setattr(sys.modules[module], name, value)
        return value

    def __dir__() -> list[str]:  # noqa: N807
        return sorted(homes)

    return __getattr__, __dir__
