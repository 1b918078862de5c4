"""Deprecated path: ``FaissIndex`` lives in :mod:`langchain_s2b.store.vectors` (removed in 0.2)."""

from __future__ import annotations

import warnings

from langchain_s2b.store.vectors import (
    LEGACY_RECORDS_FILE,
    SAVED_FILES,
    FaissIndex,
    normalise,
    read_faiss_file,
)

__all__ = ["LEGACY_RECORDS_FILE", "SAVED_FILES", "FaissIndex", "normalise", "read_faiss_file"]

warnings.warn(
    "langchain_s2b.store.faiss_index is deprecated; import FaissIndex from "
    "langchain_s2b.store.vectors (removed in 0.2)",
    DeprecationWarning,
    stacklevel=2,
)
