"""What a docstore holds, read as an operation: every leaf its manifests list.

A child store other than ``FaissIndex`` keeps no text the lexical index could
be built from, so the lexical index of such a store is filled from the
docstore: every manifest, then every leaf it lists, in batches. Read through
requests, so sync and async docstores (an async-only ``SQLStore``) both work.
"""

from __future__ import annotations

from typing import Any

from langchain_s2b.core.ingest import leaf_keys
from langchain_s2b.core.keys import is_manifest_key
from langchain_s2b.core.requests import Fetch, Op, ScanKeys, ask

BATCH = 1000
Entry = tuple[str, str, dict[str, Any]]
"""``(key, text, metadata)`` of one leaf."""


def stored_leaves() -> Op[list[Entry]]:
    """Every leaf a manifest lists that the docstore holds, as ``(key, text, metadata)``."""
    try:
        keys = yield from ask(ScanKeys())
    except NotImplementedError:
        msg = (
            "hybrid=True needs the leaves' text of this child store, read from a docstore "
            "that can list its keys (yield_keys); this one can not: pass hybrid=False."
        )
        raise ValueError(msg) from None
    names = [key for key in keys if is_manifest_key(key)]
    leaves: list[str] = []
    for start in range(0, len(names), BATCH):
        manifests = yield from ask(Fetch(names[start : start + BATCH]))
        for manifest in manifests:
            if manifest is not None:
                leaves.extend(leaf_keys(manifest))
    entries: list[Entry] = []
    for start in range(0, len(leaves), BATCH):
        batch = leaves[start : start + BATCH]
        docs = yield from ask(Fetch(batch))
        entries.extend(
            (key, doc.page_content, dict(doc.metadata))
            for key, doc in zip(batch, docs, strict=True)
            if doc is not None
        )
    return entries
