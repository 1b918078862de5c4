"""A stateful model test: add, update, delete, save, load and verify with injected faults.

The model is a dict ``source_id -> (text, metadata)`` of the last version of
each source that was written successfully. Faults: the embedding raises, the
docstore writes part of an ``mset`` and raises, and the child index raises
after the docstore has written (a crash between the two stores). After every
step both stores are read back and must hold exactly the model: every
manifest names a live source, every node carries that source's text, every
leaf in the child index belongs to a current manifest, nothing is orphaned,
``verify()`` is OK, and queries serve only the model's text. With the exact
Flat index a query for a source's marker word must also return that source
first; HNSW is approximate (a graph over many equal vectors can miss one), so
there only the stores and the served text are checked.

CI (``CI=true``) runs 110 sequences for each index type (Flat and HNSW32).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.ingest import leaf_keys, node_keys, nodes_key
from langchain_s2b.core.keys import is_manifest_key, node_key
from langchain_s2b.core.splitters import section_splitter, size_splitter
from langchain_s2b.core.tree import DOC_LEVEL, user_metadata

from ._embeddings import BagOfWords

CI = os.environ.get("CI", "").lower() == "true"
SEQUENCES = 110 if CI else 12
STEPS = 12 if CI else 10
DIM = 256

SOURCES = ["a", "b/c", "x|y ü", "d"]
"""Source ids, some needing the key encoding; ``MARKERS[i]`` appears only in source ``i``."""
MARKERS = ["markalpha", "markbeta", "markgamma", "markdelta"]
VOCAB = ["river", "stone", "light", "cloud", "field", "maple", "ocean", "tower"]


def _buckets_are_distinct() -> None:
    """Every word lands in its own embedding bucket, so a marker query finds only its source."""
    words = [*MARKERS, *VOCAB]
    buckets = {zlib.crc32(w.encode()) % DIM for w in words}
    assert len(buckets) == len(words), "pick other words: two share a bucket"


_buckets_are_distinct()


class EmbeddingError(Exception):
    """The embedding model failed (a timeout)."""


class StoreError(OSError):
    """The docstore failed half-way through a batch."""


class CrashError(RuntimeError):
    """The child index failed after the docstore had written (a crash between the stores)."""


class FaultyEmbedding(BagOfWords):
    """Raises on the next ``embed_documents`` when armed."""

    def __init__(self) -> None:
        super().__init__(DIM)
        self.armed = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.armed:
            self.armed = False
            raise EmbeddingError
        return super().embed_documents(texts)


class FaultyStore(InMemoryStore):
    """When armed, lets ``skip`` calls of ``mset`` through, then writes part of one and raises."""

    keep: int | None = None
    """Pairs the failing ``mset`` writes (never all of them)."""
    skip = 0

    def mset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        pairs = list(key_value_pairs)
        if self.keep is not None and self.skip:
            self.skip -= 1
        elif self.keep is not None:
            keep, self.keep = self.keep, None
            super().mset(pairs[: min(keep, max(len(pairs) - 1, 0))])
            raise StoreError("disk full")
        super().mset(pairs)


words = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6)


@st.composite
def texts(draw: st.DrawFn, marker: str) -> str:
    """A few sentences and paragraphs; the source's marker appears at least once."""
    sentences = draw(st.lists(words, min_size=1, max_size=7))
    where = draw(st.integers(0, len(sentences) - 1))
    sentences[where] = [*sentences[where], marker]
    out = []
    for i, sentence in enumerate(sentences):
        sep = draw(st.sampled_from([" ", " ", "\n\n"])) if i else ""
        out.append(sep + " ".join(sentence).capitalize() + ".")
    return "".join(out)


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[str, str, dict[str, Any]]]:
    """One to three distinct sources, each with a text and metadata."""
    chosen = draw(st.lists(st.integers(0, len(SOURCES) - 1), min_size=1, max_size=3, unique=True))
    return [(SOURCES[i], draw(texts(MARKERS[i])), {"v": draw(st.integers(0, 2))}) for i in chosen]


FAULTS = st.sampled_from([None, None, "embedding", "docstore", "index"])


class LifecycleMachine(RuleBasedStateMachine):
    """The retriever against a dict of what was last written successfully."""

    factory = "Flat"
    search_params: str | None = None
    exact = True

    saved = Bundle("saved")

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, tuple[str, dict[str, Any]]] = {}
        self.saves: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        self.root = Path(tempfile.mkdtemp(prefix="s2b-machine-"))
        self.embedding = FaultyEmbedding()
        self.store = FaultyStore()
        self.retriever: SmallToBigRetriever

    @initialize(mode=st.sampled_from(["parent", "window"]))
    def build(self, mode: str) -> None:
        index = FaissIndex(self.embedding, self.factory, search_params=self.search_params)
        extra: dict[str, Any] = {}
        if mode == "parent":
            extra = {"child_splitter": size_splitter(6), "parent_splitter": section_splitter(20)}
        self.retriever = SmallToBigRetriever(
            vectorstore=index, docstore=self.store, mode=mode, window_size=1, **extra
        )

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # Rules ---------------------------------------------------------------------------

    @rule(
        batch=batches(),
        fault=FAULTS,
        keep=st.integers(0, 40),
        at=st.sampled_from([0, 1]),
        use_async=st.booleans(),
    )
    def add(
        self,
        batch: list[tuple[str, str, dict[str, Any]]],
        fault: str | None,
        keep: int,
        at: int,
        use_async: bool,
    ) -> None:
        """Add or update a batch; ``at`` picks the failing ``mset`` (nodes or manifests)."""
        docs = [Document(text, metadata=dict(meta)) for _, text, meta in batch]
        ids = [sid for sid, _, _ in batch]
        changed = [sid for sid, text, meta in batch if self.model.get(sid) != (text, meta)]
        index = self.retriever.vectorstore
        assert isinstance(index, FaissIndex)
        real_add = index.add_vectors
        if fault == "embedding":
            self.embedding.armed = True
        elif fault == "docstore":
            self.store.keep, self.store.skip = keep, at
        elif fault == "index":

            def crash(*args: Any, **kwargs: Any) -> list[str]:
                raise CrashError("crash between the stores")

            index.add_vectors = crash  # type: ignore[method-assign]
        expected = {"embedding": EmbeddingError, "docstore": StoreError, "index": CrashError}
        try:
            if fault is not None and changed:
                with pytest.raises(expected[fault]):
                    self._add(docs, ids, use_async)
                return  # all or nothing: the model keeps every previous version
            result = self._add(docs, ids, use_async)
        finally:
            self.embedding.armed = False
            self.store.keep, self.store.skip = None, 0
            index.add_vectors = real_add  # type: ignore[method-assign]
        assert sorted(result.added + result.updated) == sorted(changed)
        assert sorted(result.unchanged) == sorted(set(ids) - set(changed))
        for sid, text, meta in batch:
            self.model[sid] = (text, meta)

    def _add(self, docs: list[Document], ids: list[str], use_async: bool) -> Any:
        if use_async:
            return asyncio.run(self.retriever.aadd_documents(docs, ids=ids))
        return self.retriever.add_documents(docs, ids=ids)

    @rule(chosen=st.lists(st.sampled_from([*SOURCES, "never-added"]), max_size=3, unique=True))
    def delete(self, chosen: list[str]) -> None:
        deleted = self.retriever.delete(chosen)
        assert deleted == [sid for sid in chosen if sid in self.model]
        for sid in deleted:
            del self.model[sid]

    @rule(target=saved)
    def save(self) -> str:
        name = f"save-{len(self.saves)}"
        self.retriever.save(self.root / name, include_docstore=True)
        self.saves[name] = dict(self.model)
        return name

    @rule(name=saved)
    def load(self, name: str) -> None:
        self.store = FaultyStore()
        self.retriever = SmallToBigRetriever.load(
            self.root / name, self.embedding, docstore=self.store
        )
        self.model = dict(self.saves[name])

    @precondition(lambda self: bool(self.model))
    @rule()
    def verify_and_repair(self) -> None:
        report = self.retriever.verify(repair=True)
        assert report.ok
        assert not report.repaired
        assert report.sources == len(self.model)

    # What must hold after every step ---------------------------------------------------

    @invariant()
    def stores_hold_exactly_the_model(self) -> None:
        r = self.retriever
        keys = list(r.docstore.yield_keys())
        manifests = {
            m.metadata["source_id"]: m
            for m in r.docstore.mget([k for k in keys if is_manifest_key(k)])
            if m is not None
        }
        assert set(manifests) == set(self.model)
        wanted_nodes = {k for m in manifests.values() for k in node_keys(m)}
        assert set(keys) - {k for k in keys if is_manifest_key(k)} == wanted_nodes
        for sid, manifest in manifests.items():
            text, meta = self.model[sid]
            names = node_keys(manifest)
            nodes = r.docstore.mget(names)
            doc = r.docstore.mget([node_key(nodes_key(manifest), DOC_LEVEL, 0)])[0]
            assert doc is not None
            assert doc.page_content == text
            for name, node in zip(names, nodes, strict=True):
                assert node is not None, name
                assert node.page_content == text[node.metadata["start"] : node.metadata["end"]]
                assert node.metadata["source_id"] == sid
                assert user_metadata(node.metadata) == meta
        index = r.vectorstore
        assert isinstance(index, FaissIndex)
        leaves = [k for m in manifests.values() for k in leaf_keys(m)]
        assert sorted(index.keys()) == sorted(leaves)
        stored = {d.id: d.page_content for d in r.docstore.mget(leaves) if d is not None}
        assert {d.id: d.page_content for d in index.get_by_ids(leaves)} == stored

    @invariant()
    def verify_is_ok(self) -> None:
        report = self.retriever.verify()
        assert report.ok, report
        assert report.sources == len(self.model)

    @invariant()
    def queries_serve_only_the_model(self) -> None:
        r = self.retriever
        for i, sid in enumerate(SOURCES):
            found = r.invoke(MARKERS[i], k=1)
            if sid in self.model and self.exact:
                (top,) = found
                assert top.metadata["source_id"] == sid
                assert MARKERS[i] in top.page_content
            for doc in found + r.invoke(" ".join(VOCAB[:3]), k=4):
                got = doc.metadata["source_id"]
                assert got in self.model
                text = self.model[got][0]
                assert doc.page_content == text[doc.metadata["start"] : doc.metadata["end"]]


class HnswLifecycleMachine(LifecycleMachine):
    """The same machine over an HNSW graph, which can not remove vectors (tombstones)."""

    factory = "HNSW32"
    search_params = "efSearch=128"
    exact = False


MACHINE_SETTINGS = settings(
    max_examples=SEQUENCES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestFlatLifecycle = LifecycleMachine.TestCase
TestFlatLifecycle.settings = MACHINE_SETTINGS
TestHnswLifecycle = HnswLifecycleMachine.TestCase
TestHnswLifecycle.settings = MACHINE_SETTINGS
