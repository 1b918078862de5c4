"""The store's old import paths still work for one release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys

import pytest

from langchain_s2b.store import nodes, vectors

OLD_PATHS = [
    (
        "langchain_s2b.store.faiss_index",
        vectors,
        ["LEGACY_RECORDS_FILE", "SAVED_FILES", "FaissIndex", "normalise", "read_faiss_file"],
        "langchain_s2b.store.faiss_index is deprecated; import FaissIndex from "
        "langchain_s2b.store.vectors (removed in 0.2)",
    ),
    (
        "langchain_s2b.store.codec",
        nodes,
        ["DocumentCodecStore", "decode_document", "encode_document"],
        "langchain_s2b.store.codec is deprecated; import DocumentCodecStore from "
        "langchain_s2b.store.nodes (removed in 0.2)",
    ),
]


@pytest.mark.parametrize(("old", "room", "names", "message"), OLD_PATHS)
def test_old_path_warns_once_and_gives_the_same_objects(
    old: str, room: object, names: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match="is deprecated") as caught:
        module = importlib.import_module(old)
    assert [str(w.message) for w in caught] == [message]
    assert module.__all__ == names
    assert [getattr(module, n) is getattr(room, n) for n in names] == [True] * len(names)
    importlib.import_module(old)  # already imported: no second warning (filterwarnings=error)
