"""The command line's on-disk index: its folder layout, embedding note, open and save.

.. code-block:: text

    DIR/s2b-cli.json   the embedding the index was built with
    DIR/index/         the child index and retriever config (SmallToBigRetriever.save)
    DIR/parents/       every node, one JSON file each (a LocalFileStore)
    DIR/INDEXING       present while ``s2b index`` writes; left behind by a crash
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_s2b.cli.errors import UserError
from langchain_s2b.embeddings import HashingEmbeddings, LocalE5Embeddings
from langchain_s2b.retriever import SmallToBigRetriever
from langchain_s2b.store.faiss_index import FaissIndex

CONFIG_FILE = "s2b-cli.json"
INDEX_DIR = "index"
PARENTS_DIR = "parents"
EMBEDDINGS = ("e5", "fake")
INDEX_MODE = "multilevel"
"""The tree the CLI builds: sentences < paragraphs < sections < document."""


def make_embedding(name: str) -> Embeddings:
    """The embedding called ``name``: ``e5`` (the offline default) or ``fake``."""
    if name == "fake":
        return HashingEmbeddings()
    if name == "e5":
        return LocalE5Embeddings()
    msg = f"unknown embedding {name!r}; allowed: {', '.join(EMBEDDINGS)}"
    raise UserError(msg)


def _config_path(store: Path) -> Path:
    return store / CONFIG_FILE


def _parent_store(store: Path) -> Any:
    try:
        from langchain_classic.storage import LocalFileStore
    except ImportError as err:
        msg = 's2b keeps the parents in a LocalFileStore: pip install "langchain-s2b[cli]"'
        raise ImportError(msg) from err
    return LocalFileStore(store / PARENTS_DIR)


def create_store(store: Path, embedding_name: str) -> SmallToBigRetriever:
    """A new, empty index in ``store`` (a new or empty directory)."""
    if store.exists() and not store.is_dir():
        msg = f"--store {store} exists and is not a directory"
        raise UserError(msg)
    if store.is_dir() and any(store.iterdir()):
        msg = f"--store {store} is a non-empty directory that is not an s2b index"
        raise UserError(msg)
    embedding = make_embedding(embedding_name)
    store.mkdir(parents=True, exist_ok=True)
    config = {"version": 1, "embedding": embedding_name, "tree": INDEX_MODE}
    _config_path(store).write_text(json.dumps(config) + "\n", encoding="utf-8")
    return SmallToBigRetriever(
        vectorstore=FaissIndex(embedding), byte_store=_parent_store(store), mode=INDEX_MODE
    )


def open_store(store: Path, embedding_name: str | None = None) -> SmallToBigRetriever:
    """Load the index in ``store`` with the embedding it was built with."""
    name = str(read_config(store).get("embedding", "e5"))
    if embedding_name is not None and embedding_name != name:
        msg = f"{store} was indexed with embedding {name!r}, not {embedding_name!r}"
        raise UserError(msg)
    embedding = make_embedding(name)
    parents = _parent_store(store)
    if not (store / INDEX_DIR).is_dir():  # the first ``s2b index`` never finished
        return SmallToBigRetriever(
            vectorstore=FaissIndex(embedding), byte_store=parents, mode=INDEX_MODE
        )
    return SmallToBigRetriever.load(store / INDEX_DIR, embedding, byte_store=parents)


def save_store(retriever: SmallToBigRetriever, store: Path) -> None:
    """Write the child index atomically (the parents are already on disk)."""
    retriever.save(store / INDEX_DIR)


def read_config(store: Path) -> dict[str, Any]:
    """The CLI note of an index directory; a clear error when there is no index."""
    path = _config_path(store)
    if not store.is_dir():
        msg = f"no index at --store {store} (run: s2b index PATH... --store {store})"
        raise UserError(msg)
    if not path.exists():
        msg = f"{store} is not an s2b index (no {CONFIG_FILE}); run s2b index first"
        raise UserError(msg)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        msg = f"cannot read {path}: {err}"
        raise UserError(msg) from None
    if not isinstance(config, dict):
        msg = f"{path} is not an s2b index note"
        raise UserError(msg)
    return config
