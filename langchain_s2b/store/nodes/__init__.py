"""The nodes: the default docstore, the docstore codec and the context model's writer.

It owns ``NodeStore`` (nodes as spans over their source's text, and its files),
``DocumentCodecStore`` (documents in any byte store as plain JSON) and
``ContextWriter`` (the context model's batched calls and its cache). It imports
only :mod:`langchain_s2b.store.base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_s2b.store.base import lazy_face

if TYPE_CHECKING:
    from langchain_s2b.store.nodes.codec import DocumentCodecStore, decode_document, encode_document
    from langchain_s2b.store.nodes.node_files import FILES as NODE_FILES
    from langchain_s2b.store.nodes.node_store import NodeStore, copy_into
    from langchain_s2b.store.nodes.situator import (
        ContextFailedError,
        ContextWriter,
        model_name,
        proxy_writer,
    )

__all__ = [
    "ContextFailedError",
    "ContextWriter",
    "DocumentCodecStore",
    "NODE_FILES",
    "NodeStore",
    "copy_into",
    "decode_document",
    "encode_document",
    "model_name",
    "proxy_writer",
]

_HOMES = {
    "DocumentCodecStore": "langchain_s2b.store.nodes.codec",
    "decode_document": "langchain_s2b.store.nodes.codec",
    "encode_document": "langchain_s2b.store.nodes.codec",
    "NODE_FILES": "langchain_s2b.store.nodes.node_files",
    "NodeStore": "langchain_s2b.store.nodes.node_store",
    "copy_into": "langchain_s2b.store.nodes.node_store",
    "ContextFailedError": "langchain_s2b.store.nodes.situator",
    "ContextWriter": "langchain_s2b.store.nodes.situator",
    "model_name": "langchain_s2b.store.nodes.situator",
    "proxy_writer": "langchain_s2b.store.nodes.situator",
}
_ORIGINAL = {"NODE_FILES": "FILES"}


__getattr__, __dir__ = lazy_face(__name__, _HOMES, _ORIGINAL)
