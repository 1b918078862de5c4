"""Deprecated path: the codec lives in :mod:`langchain_s2b.store.nodes` (removed in 0.2)."""

from __future__ import annotations

import warnings

from langchain_s2b.store.nodes import DocumentCodecStore, decode_document, encode_document

__all__ = ["DocumentCodecStore", "decode_document", "encode_document"]

warnings.warn(
    "langchain_s2b.store.codec is deprecated; import DocumentCodecStore from "
    "langchain_s2b.store.nodes (removed in 0.2)",
    DeprecationWarning,
    stacklevel=2,
)
