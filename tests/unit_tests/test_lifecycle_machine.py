"""A stateful model test: add, update, delete, save, load and verify with injected faults.

The model is a dict ``source_id -> (text, metadata)`` of the last version of
each source that was written successfully. Two retrievers share one child
index and one docstore: a writer, and a reader that also writes now and then
(its lexical index is the child index's, so it must see every write).

Faults injected into writes, each of which must leave the previous version of
every source whole:

- adds: the embedding raises; the docstore writes part of an ``mset`` and
  raises (nodes or manifests); the child index raises after the docstore has
  written; the lexical index raises while the vectors are written; Ctrl-C
  (``KeyboardInterrupt``) at the nodes or manifests write; a cancellation
  (``asyncio.wait_for`` timing out) while the nodes or manifests are written;
- deletes: the docstore raises removing the manifests; the child index
  raises; the lexical index raises (the vectors must then stay);
- cleanup: removing an updated source's previous generation fails after the
  commit (a warning; ``verify`` then names the leftovers and repair removes them);
- inside the child index (:mod:`._faults`): an ``OSError``, Ctrl-C or a
  cancellation just before or just after any step of ``FaissIndex``'s own
  writes (the records, FAISS's ``add_with_ids`` and ``remove_ids``, the lexical
  add and delete). In the write of the new leaves the whole call is undone; in
  a delete the sources stay whole; in the removal of an updated source's
  previous generation (after the commit) an error is a warning and leftovers,
  and an interrupt finishes the removal before it goes on up.

After every step both stores and the lexical index are read back and must
hold exactly the model (and the child index's parts agree with each other:
its records, FAISS's ids less its tombstones, its count, the lexical keys;
saved and loaded alone it holds the same): every manifest names a live source, every node
carries that source's text, every leaf in the child index and in the lexical
index belongs to a current manifest, nothing is orphaned, ``verify()`` is OK,
and queries (with and without a budget, through both retrievers) serve only
the model's text, within the budget. With the exact Flat index a query for a
source's marker word must also return that source first; HNSW is approximate
(a graph over many equal vectors can miss one), so there only the stores and
the served text are checked.

The docstore is an ``InMemoryStore`` (Flat and HNSW32) or the default,
``NodeStore`` (Flat): nodes as spans over their source's text in columns, its
``load`` the save's own columns opened as they are, with the same faults. The
lexical index of ``FaissIndex`` keeps keys only (its text is in the records),
so each vocabulary word's matches are compared with the leaves whose analysed
text holds it.

A fourth machine (``HeadersLifecycleMachine``, at the end) writes Markdown
sources with contextual headers on and a context model, under every fault.
A fifth (``ProxyLifecycleMachine``) gives every node that holds a source's
marker a proxy (issue 35): the proxies are written, undone and removed with
their source's leaves under every fault, and each live proxy row must point
at the leaves of its source's current generation that its span meets.

CI (``CI=true``) runs 90 sequences of 12 steps for each machine.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import warnings
import zlib
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import faiss
import pytest
from hypothesis import HealthCheck, event, settings
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
from langchain_core.stores import BaseStore, InMemoryByteStore, InMemoryStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.fusion import TOP_N
from langchain_s2b.core.headers import embedded_text
from langchain_s2b.core.hits import Hit
from langchain_s2b.core.ingest import leaf_keys, node_keys, nodes_key, proxy_keys
from langchain_s2b.core.keys import is_manifest_key, is_proxy_key, node_key
from langchain_s2b.core.splitters import section_splitter, size_splitter
from langchain_s2b.core.tree import DOC_LEVEL, Node, user_metadata
from langchain_s2b.store.children import HybridChildIndex
from langchain_s2b.store.lexical.analyzer import analyze
from langchain_s2b.store.nodes.node_store import NodeStore

from ._chat import Situating
from ._embeddings import BagOfWords
from ._faults import KINDS, WRITE_STEPS, fault_at

CI = os.environ.get("CI", "").lower() == "true"
SEQUENCES = 90 if CI else 12
STEPS = 12 if CI else 10
DIM = 256

SOURCES = ["a", "b/c", "x|y ü", "d"]
"""Source ids, some needing the key encoding; ``MARKERS[i]`` appears only in source ``i``."""
MARKERS = ["markalpha", "markbeta", "markgamma", "markdelta"]
VOCAB = ["river", "stone", "light", "cloud", "field", "maple", "ocean", "tower"]
PROXY_WORDS = ["proxytwo", "proxyfour", "proxyfive", "proxysix"]
"""``PROXY_WORDS[i]``: the text of the proxies of the nodes holding ``MARKERS[i]``."""


def _buckets_are_distinct() -> None:
    """Every word lands in its own embedding bucket, so a marker query finds only its source."""
    words = [*MARKERS, *VOCAB, *PROXY_WORDS]
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


class LexicalError(OSError):
    """The lexical index failed to write."""


class Faults(BaseStore[str, Any]):
    """A docstore's writes and removes, with faults armed one at a time (a mixin).

    ``keep``: lets ``skip`` calls of ``mset`` through, then writes part of one
    and raises. ``interrupt``: raises ``KeyboardInterrupt`` at ``mset`` number
    ``skip``. ``slow``: the async ``mset`` number ``skip`` sleeps (a caller's
    timeout lands there). ``fail_delete``: the next ``mdelete`` raises.
    """

    keep: int | None = None
    """Pairs the failing ``mset`` writes (never all of them)."""
    skip = 0
    interrupt = False
    slow = 0.0
    fail_delete = False

    def mset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        pairs = list(key_value_pairs)
        if self.keep is not None and self.skip:
            self.skip -= 1
        elif self.keep is not None:
            keep, self.keep = self.keep, None
            super().mset(pairs[: min(keep, max(len(pairs) - 1, 0))])  # type: ignore[safe-super]
            raise StoreError("disk full")
        elif self.interrupt and self.skip:
            self.skip -= 1
        elif self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        super().mset(pairs)  # type: ignore[safe-super]

    async def amset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        if self.slow and self.skip:
            self.skip -= 1
        elif self.slow:
            delay, self.slow = self.slow, 0.0
            await asyncio.sleep(delay)  # the caller's timeout fires while this waits
        self.mset(key_value_pairs)

    def mdelete(self, keys: Sequence[str]) -> None:
        if self.fail_delete:
            self.fail_delete = False
            raise StoreError("disk full")
        super().mdelete(keys)  # type: ignore[safe-super]

    async def amdelete(self, keys: Sequence[str]) -> None:
        self.mdelete(keys)

    def disarm(self) -> None:
        self.keep, self.skip, self.interrupt, self.slow, self.fail_delete = (
            None,
            0,
            False,
            0.0,
            False,
        )


class FaultyStore(Faults, InMemoryStore):
    """``InMemoryStore`` with faults."""


class FaultyNodeStore(Faults, NodeStore):
    """``NodeStore`` (the default docstore: nodes as spans, columns) with faults."""


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


FAULTS = st.sampled_from(
    [None, None, "embedding", "docstore", "index", "lexical", "interrupt", "cancel", "cleanup"]
    + ["inside"] * 3
)
DELETE_FAULTS = st.sampled_from([None, None, "docstore", "index", "lexical"])
_ADDING = ["records.add", "faiss.add", "lexical.add"]
"""Steps of writing the new leaves (the others remove: a delete, or the cleanup of an update)."""
_REMOVING = [step for step in WRITE_STEPS if step not in _ADDING]


def _inside(steps: list[str]) -> st.SearchStrategy[tuple[str, str, str]]:
    """A fault at one of ``steps`` of ``FaissIndex``'s own write: the step, what lands, when."""
    return st.tuples(
        st.sampled_from(steps), st.sampled_from(list(KINDS)), st.sampled_from(["before", "after"])
    )


CANCEL_AFTER = 0.05
"""Seconds before a cancelled write's caller gives up; the slow write takes 10x that."""


def marker_proxies(document: Document, node: Node) -> list[str]:
    """A proxy for every node (any level) that holds a marker: its proxy word."""
    text = document.page_content[node.start : node.end]
    return [PROXY_WORDS[i] for i, marker in enumerate(MARKERS) if marker in text]


class LifecycleMachine(RuleBasedStateMachine):
    """The retriever against a dict of what was last written successfully."""

    proxies: Any = None
    """The retrievers' ``node_proxies`` (``None``: no proxy)."""
    factory = "Flat"
    search_params: str | None = None
    exact = True
    node_store = False
    """The docstore: ``InMemoryStore`` (``Document`` objects) or ``NodeStore`` (columns)."""

    saved = Bundle("saved")

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, tuple[str, dict[str, Any]]] = {}
        self.saves: dict[str, dict[str, tuple[str, dict[str, Any]]]] = {}
        self.root = Path(tempfile.mkdtemp(prefix="s2b-machine-"))
        self.embedding = FaultyEmbedding()
        self.store: Faults = FaultyNodeStore() if self.node_store else FaultyStore()
        self.retriever: SmallToBigRetriever
        self.reader: SmallToBigRetriever

    @initialize(mode=st.sampled_from(["parent", "window"]))
    def build(self, mode: str) -> None:
        index = FaissIndex(self.embedding, self.factory, search_params=self.search_params)
        extra: dict[str, Any] = {}
        if mode == "parent":
            extra = {"child_splitter": size_splitter(6), "parent_splitter": section_splitter(20)}
        self.retriever = SmallToBigRetriever(
            vectorstore=index,
            docstore=self.store,
            mode=mode,
            window_size=1,
            node_proxies=self.proxies,
            **extra,
        )
        self._share()

    def _share(self) -> None:
        """A second retriever over the same child index and docstore."""
        r = self.retriever
        self.reader = SmallToBigRetriever(
            vectorstore=r.vectorstore,
            docstore=r.docstore,
            levels=r._levels,
            mode=r.mode,
            node_proxies=self.proxies,
        )

    def _index(self) -> FaissIndex:
        index = self.retriever.vectorstore
        assert isinstance(index, FaissIndex)
        return index

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    # Rules ---------------------------------------------------------------------------

    @rule(
        batch=batches(),
        fault=FAULTS,
        keep=st.integers(0, 40),
        at=st.sampled_from([0, 1]),
        use_async=st.booleans(),
        by_reader=st.booleans(),
        inside=_inside(list(WRITE_STEPS)),
    )
    def add(
        self,
        batch: list[tuple[str, str, dict[str, Any]]],
        fault: str | None,
        keep: int,
        at: int,
        use_async: bool,
        by_reader: bool,
        inside: tuple[str, str, str],
    ) -> None:
        """Add or update a batch; ``at`` picks the failing ``mset`` (nodes or manifests)."""
        docs = [Document(text, metadata=dict(meta)) for _, text, meta in batch]
        ids = [sid for sid, _, _ in batch]
        changed = [sid for sid, text, meta in batch if self.model.get(sid) != (text, meta)]
        updated = [sid for sid in changed if sid in self.model]
        writer = self.reader if by_reader else self.retriever
        index = self._index()
        lexical = index.lexical()
        real_add, real_lexical_add = index.add_vectors, lexical.add
        if fault == "embedding":
            self.embedding.armed = True
        elif fault == "docstore":
            self.store.keep, self.store.skip = keep, at
        elif fault == "index":

            def crash(*args: Any, **kwargs: Any) -> list[str]:
                raise CrashError("crash between the stores")

            index.add_vectors = crash  # type: ignore[method-assign]
        elif fault == "lexical":

            def broken(*args: Any, **kwargs: Any) -> None:
                raise LexicalError("lexical index full")

            lexical.add = broken  # type: ignore[method-assign]
        elif fault == "interrupt":
            self.store.interrupt, self.store.skip = True, at
        elif fault == "cancel":
            self.store.slow, self.store.skip = 10 * CANCEL_AFTER, at
            use_async = True
        elif fault == "cleanup":
            self.store.fail_delete = True
        expected: dict[str, type[BaseException]] = {
            "embedding": EmbeddingError,
            "docstore": StoreError,
            "index": CrashError,
            "lexical": LexicalError,
            "interrupt": KeyboardInterrupt,
            "cancel": TimeoutError,
        }
        if fault == "inside":
            if self._add_inside(writer, docs, ids, use_async, inside, (changed, updated)):
                for sid, text, meta in batch:
                    self.model[sid] = (text, meta)
            return
        event(f"add fault: {fault if changed else None}")
        try:
            if fault in expected and changed:
                with pytest.raises(expected[fault]):
                    self._add(writer, docs, ids, use_async, cancel=fault == "cancel")
                return  # all or nothing: the model keeps every previous version
            if fault == "cleanup" and updated:
                with pytest.warns(UserWarning, match="removing the previous ones failed"):
                    result = self._add(writer, docs, ids, use_async)
                assert not self.retriever.verify().ok  # the previous generation is left over
                assert self.retriever.verify(repair=True).repaired
            else:
                result = self._add(writer, docs, ids, use_async)
        finally:
            self.embedding.armed = False
            self.store.disarm()
            index.add_vectors = real_add  # type: ignore[method-assign]
            lexical.add = real_lexical_add  # type: ignore[method-assign]
        assert sorted(result.added + result.updated) == sorted(changed)
        assert sorted(result.unchanged) == sorted(set(ids) - set(changed))
        for sid, text, meta in batch:
            self.model[sid] = (text, meta)

    def _add_inside(
        self,
        writer: SmallToBigRetriever,
        docs: list[Document],
        ids: list[str],
        use_async: bool,
        inside: tuple[str, str, str],
        work: tuple[list[str], list[str]],
    ) -> bool:
        """Add with a fault at one step inside ``FaissIndex``; whether the new versions stand."""
        step, kind, when = inside
        changed, updated = work
        raised: BaseException | None = None
        with fault_at(step, kind, when) as fired, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                self._add(writer, docs, ids, use_async)
            except KINDS[kind] as err:
                raised = err
        event(f"add fault inside: {f'{step} {kind} {when}' if fired[0] else None}")
        messages = [str(w.message) for w in caught]
        if not fired[0]:
            assert raised is None
            assert not messages
            return True
        if step in _ADDING:  # writing the new leaves: the whole call is undone
            assert changed
            assert isinstance(raised, KINDS[kind])
            assert not messages
            return False
        assert updated  # only removing an updated source's previous generation removes
        if kind == "error":  # after the commit: a warning, and leftovers for verify
            assert raised is None
            assert len(messages) == 1
            assert "removing the previous ones failed" in messages[0]
            assert not self.retriever.verify().ok
            assert self.retriever.verify(repair=True).repaired
        else:  # an interrupt: the removal is finished, then it goes on up
            assert isinstance(raised, KINDS[kind])
            assert not messages
        return True

    @staticmethod
    def _add(
        writer: SmallToBigRetriever,
        docs: list[Document],
        ids: list[str],
        use_async: bool,
        *,
        cancel: bool = False,
    ) -> Any:
        if cancel:

            async def cancelled() -> Any:
                return await asyncio.wait_for(writer.aadd_documents(docs, ids=ids), CANCEL_AFTER)

            return asyncio.run(cancelled())
        if use_async:
            return asyncio.run(writer.aadd_documents(docs, ids=ids))
        return writer.add_documents(docs, ids=ids)

    @rule(
        chosen=st.lists(st.sampled_from([*SOURCES, "never-added"]), max_size=3, unique=True),
        fault=DELETE_FAULTS,
        use_async=st.booleans(),
    )
    def delete(self, chosen: list[str], fault: str | None, use_async: bool) -> None:
        index = self._index()
        lexical = index.lexical()
        real_delete, real_lexical_delete = index.delete, lexical.delete
        if fault == "docstore":
            self.store.fail_delete = True
        elif fault == "index":

            def crash(*args: Any, **kwargs: Any) -> bool:
                raise CrashError("crash between the stores")

            index.delete = crash  # type: ignore[method-assign]
        elif fault == "lexical":

            def broken(*args: Any, **kwargs: Any) -> None:
                raise LexicalError("lexical index gone")

            lexical.delete = broken  # type: ignore[method-assign]
        errors: dict[str, type[Exception]] = {
            "docstore": StoreError,
            "index": CrashError,
            "lexical": LexicalError,
        }
        present = [sid for sid in chosen if sid in self.model]
        event(f"delete fault: {fault if present else None}")
        try:
            if fault is not None and present:
                with pytest.raises(errors[fault]):
                    self._delete(chosen, use_async)
                return  # nothing deleted: every source stays whole
            deleted = self._delete(chosen, use_async)
        finally:
            self.store.disarm()
            index.delete = real_delete  # type: ignore[method-assign]
            lexical.delete = real_lexical_delete  # type: ignore[method-assign]
        assert deleted == present
        for sid in deleted:
            del self.model[sid]

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), use_async=st.booleans(), inside=_inside(_REMOVING))
    def delete_with_a_fault_inside(
        self, data: st.DataObject, use_async: bool, inside: tuple[str, str, str]
    ) -> None:
        """Delete sources the model holds, with a fault at one step inside ``FaissIndex``."""
        held = st.sampled_from(sorted(self.model))
        chosen = data.draw(st.lists(held, min_size=1, max_size=2, unique=True))
        if data.draw(st.booleans()):
            chosen.append("never-added")
        step, kind, when = inside
        present = [sid for sid in chosen if sid in self.model]
        deleted: list[str] | None = None
        with fault_at(step, kind, when) as fired:
            try:
                deleted = self._delete(chosen, use_async)
            except KINDS[kind]:
                assert fired[0]
        event(f"delete fault inside: {f'{step} {kind} {when}' if fired[0] else None}")
        if fired[0]:
            assert present
            assert deleted is None  # nothing deleted: every source stays whole
            return
        assert deleted == present
        for sid in deleted:
            del self.model[sid]

    def _delete(self, chosen: list[str], use_async: bool) -> list[str]:
        if use_async:
            return asyncio.run(self.retriever.adelete(chosen))
        return self.retriever.delete(chosen)

    @rule(target=saved)
    def save(self) -> str:
        name = f"save-{len(self.saves)}"
        self.retriever.save(self.root / name, include_docstore=True)
        self.saves[name] = dict(self.model)
        return name

    @rule(name=saved)
    def load(self, name: str) -> None:
        if self.node_store:  # the default: the save's own columns, opened as they are
            self.retriever = SmallToBigRetriever.load(
                self.root / name, self.embedding, node_proxies=self.proxies
            )
            assert type(self.retriever.docstore) is NodeStore
            self.retriever.docstore.__class__ = FaultyNodeStore  # the same object, faults armable
            self.store = self.retriever.docstore  # type: ignore[assignment]
        else:
            self.store = FaultyStore()
            self.retriever = SmallToBigRetriever.load(
                self.root / name, self.embedding, docstore=self.store, node_proxies=self.proxies
            )
        self._share()
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
        index = self._index()
        leaves = [k for m in manifests.values() for k in leaf_keys(m)]
        proxies = {k for m in manifests.values() for k in proxy_keys(m)}
        assert sorted(index.keys()) == sorted([*leaves, *proxies])
        stored = {d.id: d.page_content for d in r.docstore.mget(leaves) if d is not None}
        assert {d.id: d.page_content for d in index.get_by_ids(leaves)} == stored
        built = index.built_lexical()
        if built is not None:  # the lexical index holds exactly the live leaves, as stored
            assert built.keys() == set(stored) | proxies
            for word in [*VOCAB, *MARKERS]:  # each word finds exactly the leaves that hold it
                found = {key for key, _ in built.search(word, len(stored) + len(proxies) + 1)}
                assert found == {k for k, text in stored.items() if word in analyze(text)}, word
                by_row = built.search(
                    word, len(stored) + len(proxies) + 1, key_of=index.keys_of_rows
                )
                assert {key for key, _ in by_row} == found, word  # keys from the row column
                self._bm25_leaves_scored_at_their_rows(index, word, len(stored) + len(proxies) + 1)
                self._joined_search_is_two_requests(index, word, 3)
            if built.documents:
                assert {k: v for k, v in built.items() if k not in proxies} == stored
        for sid, manifest in manifests.items():
            self._proxies_point_at_their_leaves(manifest, self.model[sid][0])
            if isinstance(r.docstore, NodeStore):
                self._leaf_runs_read_as_slices(r.docstore, manifest, self.model[sid][0])

    @staticmethod
    def _leaf_runs_read_as_slices(store: NodeStore, manifest: Document, text: str) -> None:
        """``ReadSpans`` (issue 34): every run of a source's leaves (a window's up to three,
        and all of them) is its text's slice from the first start to the furthest end, with
        the first leaf's metadata, when their spans are none empty, start in order and leave
        no gap (worked out from the text and each leaf's offsets); else ``None``. ``ReadRuns``:
        all of them read as a run is each leaf's chunk of the text."""
        meta = manifest.metadata
        level = meta["levels"][0]
        prefix = f"{nodes_key(manifest)}/{level}/"
        count = int(meta["counts"][level])
        leaves = store.mget([f"{prefix}{i}" for i in range(count)])
        runs = [(lo, hi) for lo in range(count) for hi in range(lo, min(lo + 3, count))]
        runs.append((0, count - 1))
        got = store.read_spans([(prefix, lo, hi) for lo, hi in runs])
        read = store.read_runs([(prefix, 0, count), (prefix, count - 1, count - 2)])
        bounds_of = [(d.metadata["start"], d.metadata["end"]) for d in leaves if d is not None]
        assert (
            read
            == [  # ReadRuns (issue 34): each leaf's chunk, the one past the last missing
                [(a, b, text[a:b], i) for i, (a, b) in enumerate(bounds_of)] + [None],
                [],
            ]
        )
        for (lo, hi), span in zip(runs, got, strict=True):
            docs = leaves[lo : hi + 1]
            assert all(doc is not None for doc in docs), (prefix, lo, hi)
            bounds = [(d.metadata["start"], d.metadata["end"]) for d in docs if d is not None]
            reach, whole = bounds[0][1], all(a < b for a, b in bounds)
            for (a0, _), (a, b) in pairwise(bounds):
                whole = whole and a0 <= a <= reach
                reach = max(reach, b)
            if not whole:
                assert span is None, (prefix, lo, hi)
                continue
            first = docs[0]
            assert first is not None
            start = bounds[0][0]
            assert span == (text[start:reach], start, reach, first.metadata), (prefix, lo, hi)
            assert list(span.metadata) == list(first.metadata)

    @staticmethod
    def _bm25_leaves_scored_at_their_rows(index: FaissIndex, word: str, n: int) -> None:
        """``SearchText``'s join on rows (issue 34) scores BM25's leaves as scoring them by
        key does, and every leaf it finds is live (a proxy is the caller's: never scored)."""
        hybrid = HybridChildIndex(index)
        vector = hybrid.embed_query(word)
        got = hybrid.text_hits(word, n, None, vector, frozenset())
        listed = index.search_text(word, n, None)
        assert got.hits == listed, word
        leaves = [key for key, _ in listed if not is_proxy_key(key)]
        by_key = hybrid.leaf_hits(leaves, None, vector)  # each key looked up again
        assert got.scored == {key: by_key[key] for key in leaves}, word

    @staticmethod
    def _joined_search_is_two_requests(index: FaissIndex, word: str, fetch: int) -> None:
        """The dense search with BM25 joined on rows (issue 34) answers as ``Search`` then
        ``SearchText`` with the hits' keys as ``known``; a proxy's hit among them: not joined."""
        hybrid = HybridChildIndex(index)
        vector = hybrid.embed_query(word)
        found = hybrid.joined_search(vector, word, fetch, None, TOP_N)
        assert found._replace(joined=None) == hybrid.search(vector, word, fetch, None), word
        if any(isinstance(hit, Hit) and hit.covers is not None for hit in found.hits):
            assert found.joined is None, word
        else:
            known = frozenset(hit.key for hit in found.hits)
            assert found.joined == hybrid.text_hits(word, TOP_N, None, vector, known), word

    def _proxies_point_at_their_leaves(self, manifest: Document, text: str) -> None:
        """Each proxy row: its source's generation, a node's span, the leaves that span meets."""
        index = self._index()
        meta = manifest.metadata
        level = meta["levels"][0]
        base = nodes_key(manifest)
        names = [node_key(base, level, i) for i in range(meta["counts"][level])]
        spans = [
            (d.metadata["start"], d.metadata["end"])
            for d in self.retriever.docstore.mget(names)
            if d
        ]
        keys = proxy_keys(manifest)
        rows = index.rows_of(keys)
        assert all(row >= 0 for row in rows)
        expected = []  # brute force: every node of every level that holds a marker, coarsest first
        for name in reversed(meta["levels"]):
            nodes = self.retriever.docstore.mget(
                [node_key(base, name, i) for i in range(meta["counts"][name])]
            )
            for node in nodes:
                assert node is not None
                a, b = node.metadata["start"], node.metadata["end"]
                expected += [
                    (w, a, b) for i, w in enumerate(PROXY_WORDS) if MARKERS[i] in text[a:b]
                ]
        if self.proxies is None:
            expected = []
        got = []
        for key, found in zip(keys, index.records(rows), strict=True):
            assert found is not None
            name, proxy_text, m = found
            assert name == key
            assert m["source_key"] == base
            met = [i for i, (a, b) in enumerate(spans) if a < m["end"] and m["start"] < b]
            assert m["covers"] == [level, met[0], met[-1]]
            got.append((proxy_text, m["start"], m["end"]))
        assert got == expected

    @invariant()
    def the_child_index_parts_agree(self) -> None:
        """Records, FAISS's ids less its tombstones, the count and the lexical keys agree."""
        index = self._index()
        active = index._active()
        held = [] if active is None else faiss.vector_to_array(active.id_map).tolist()
        assert len(held) == len(set(held))
        live = set(held) - index._dead if active is index._index else set(held)
        assert sorted(live) == index._rows.live_rows().tolist()
        assert len(index) == len(live) == len(index.keys())
        assert index.damage() == ([], 0)
        built = index.built_lexical()
        assert built is None or built.keys() == set(index.keys())
        if built is not None:  # issue 34: each leaf kept with its row, as the records give it
            pairs = built.key_rows()
            assert pairs == dict(zip(pairs, index.rows_of(list(pairs)), strict=True))
        if not index._dead:  # saved and loaded alone (a save drops tombstones: not then)
            where = self.root / "alone"
            shutil.rmtree(where, ignore_errors=True)
            index.save(where)
            loaded = FaissIndex.load(where, self.embedding)
            assert sorted(loaded.keys()) == sorted(index.keys())
            assert loaded.damage() == ([], 0)

    @invariant()
    def verify_is_ok(self) -> None:
        report = self.retriever.verify()
        assert report.ok, report
        assert report.sources == len(self.model)

    @invariant()
    def queries_serve_only_the_model(self) -> None:
        for r in (self.retriever, self.reader):
            for i, sid in enumerate(SOURCES):
                found = r.invoke(MARKERS[i], k=1)
                budgeted = r.invoke(MARKERS[i], max_tokens=12)
                if sid in self.model and self.exact:
                    (top,) = found
                    assert top.metadata["source_id"] == sid
                    assert MARKERS[i] in top.page_content
                    # under a budget only the marker's source is evidence (nothing else shares it)
                    assert {d.metadata["source_id"] for d in budgeted} == {sid}
                    assert MARKERS[i] in budgeted[0].page_content
                query = " ".join(VOCAB[:3])
                plain = r.invoke(query, k=2)
                assert r.invoke(query, k=2, max_tokens=10**6) == plain  # a ceiling not reached
                for budget in (8, 40):
                    told = r.invoke(query, max_tokens=budget)  # k=None: as many as fit
                    assert sum(d.metadata["tokens"] for d in told) <= budget
                    capped = r.invoke(query, k=2, max_tokens=budget)
                    assert len(capped) <= 2
                    for doc in capped:  # the mode's own results, whole or cut from one
                        if doc.metadata.get("escalation") == "cut":
                            whole = doc.metadata["cut_from"]
                            assert any(
                                (p.metadata["start"], p.metadata["end"], p.metadata["level"])
                                == (whole["start"], whole["end"], whole["level"])
                                for p in plain
                            )
                            assert whole["start"] <= doc.metadata["start"]
                            assert doc.metadata["end"] <= whole["end"]
                        else:
                            assert doc in plain
                    found += told + capped
                if self.proxies is not None and sid in self.model and self.exact:
                    through = [d for d in r.invoke(PROXY_WORDS[i], k=2) if d.metadata["score"] > 0]
                    assert {d.metadata["source_id"] for d in through} == {sid}
                    for doc in through:
                        (proxy,) = {m["proxy"]["text"] for m in doc.metadata["matches"]}
                        assert proxy == PROXY_WORDS[i]
                    found += through
                for doc in found + budgeted + r.invoke(query, k=4):
                    got = doc.metadata["source_id"]
                    assert got in self.model
                    text = self.model[got][0]
                    assert doc.page_content == text[doc.metadata["start"] : doc.metadata["end"]]


class HnswLifecycleMachine(LifecycleMachine):
    """The same machine over an HNSW graph, which can not remove vectors (tombstones)."""

    factory = "HNSW32"
    search_params = "efSearch=128"
    exact = False


class NodeStoreLifecycleMachine(LifecycleMachine):
    """The same machine with the default docstore, ``NodeStore`` (nodes as spans in columns)."""

    node_store = True


class ProxyLifecycleMachine(LifecycleMachine):
    """The same machine, every node holding a marker given a proxy (issue 35)."""

    proxies = staticmethod(marker_proxies)


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
TestNodeStoreLifecycle = NodeStoreLifecycleMachine.TestCase
TestNodeStoreLifecycle.settings = MACHINE_SETTINGS
TestProxyLifecycle = ProxyLifecycleMachine.TestCase
TestProxyLifecycle.settings = MACHINE_SETTINGS


# Contextual headers and a context model (issue 29) ---------------------------------------
#
# The same machine, its sources written under Markdown headings, with headers on and a
# context model. Heading words and the model's answer use words of their own, so the
# invariants above (each vocabulary word finds exactly the leaves whose text holds it, a
# marker finds its source first) hold as they are; the invariants below check what is
# embedded and searched beside each leaf.

HEADINGS = ["harbor", "valley", "summit", "meadow"]
"""Heading words: in no sentence, so only a leaf's own heading line or its header holds one."""
SITUATED = "situated paragraph"
"""What the context model answers (words in no sentence either)."""


def _headings_stay_apart() -> None:
    words = [*MARKERS, *VOCAB, *HEADINGS, *SITUATED.split()]
    assert len({zlib.crc32(w.encode()) % DIM for w in words}) == len(words)


_headings_stay_apart()


class FixedContext(Situating):
    """Answers every context prompt with :data:`SITUATED`, and keeps each prompt."""

    def answer(self, chunk: str) -> str:
        return SITUATED


@st.composite
def headed_texts(draw: st.DrawFn, marker: str) -> str:
    """:func:`texts` with Markdown headings (levels 1 to 3) before some paragraphs."""
    out = []
    for paragraph in draw(texts(marker)).split("\n\n"):
        if draw(st.booleans()):
            title = draw(st.sampled_from(HEADINGS)).capitalize()
            out.append(f"{'#' * draw(st.integers(1, 3))} {title}")
        out.append(paragraph)
    return "\n\n".join(out)


@st.composite
def headed_batches(draw: st.DrawFn) -> list[tuple[str, str, dict[str, Any]]]:
    chosen = draw(st.lists(st.integers(0, len(SOURCES) - 1), min_size=1, max_size=3, unique=True))
    return [
        (SOURCES[i], draw(headed_texts(MARKERS[i])), {"v": draw(st.integers(0, 2))}) for i in chosen
    ]


def section_header(text: str, start: int, end: int) -> str:
    """A leaf's header, worked out here: the first heading is the title, then the path."""
    headings = [
        (m.start(), len(m.group(1)), m.group(2))
        for m in re.finditer(r"^(#{1,3}) (\w+)$", text, re.MULTILINE)
    ]
    first = start
    while first < end and text[first].isspace():
        first += 1
    stack: list[tuple[int, str]] = []
    for at, level, title in headings:
        if at > first:
            break
        stack = [(lv, t) for lv, t in stack if lv < level] + [(level, title)]
    title = headings[0][2] if headings else ""
    path = [t for _, t in stack]
    if path and path[0] == title:
        path = path[1:]
    return " > ".join(p for p in [title, *path] if p)


class HeadersLifecycleMachine(LifecycleMachine):
    """Headers on, a context model, Markdown sources; every fault of the machine above."""

    @initialize(mode=st.sampled_from(["parent", "window"]))
    def build(self, mode: str) -> None:
        self.chat = FixedContext()
        self.cache = InMemoryByteStore()
        index = FaissIndex(self.embedding, self.factory, search_params=self.search_params)
        extra: dict[str, Any] = {}
        if mode == "parent":
            extra = {"child_splitter": size_splitter(6), "parent_splitter": section_splitter(20)}
        self.retriever = SmallToBigRetriever(
            vectorstore=index, docstore=self.store, mode=mode, window_size=1, **self._notes(),
            **extra,
        )  # fmt: skip
        self._share()

    def _notes(self) -> dict[str, Any]:
        return {"contextual_headers": True, "context_model": self.chat, "context_cache": self.cache}

    def _share(self) -> None:
        r = self.retriever
        self.reader = SmallToBigRetriever(
            vectorstore=r.vectorstore, docstore=r.docstore, levels=r._levels, mode=r.mode,
            **self._notes(),
        )  # fmt: skip

    @rule(
        batch=headed_batches(),
        fault=FAULTS,
        keep=st.integers(0, 40),
        at=st.sampled_from([0, 1]),
        use_async=st.booleans(),
        by_reader=st.booleans(),
        inside=_inside(list(WRITE_STEPS)),
    )
    def add(
        self,
        batch: list[tuple[str, str, dict[str, Any]]],
        fault: str | None,
        keep: int,
        at: int,
        use_async: bool,
        by_reader: bool,
        inside: tuple[str, str, str],
    ) -> None:
        super().add(batch, fault, keep, at, use_async, by_reader, inside)

    @rule(name=LifecycleMachine.saved)
    def load(self, name: str) -> None:
        self.store = FaultyStore()
        self.retriever = SmallToBigRetriever.load(
            self.root / name, self.embedding, docstore=self.store, **self._notes()
        )
        assert self.retriever.contextual_headers is True  # the save's setting
        self._share()
        self.model = dict(self.saves[name])

    @invariant()
    def leaves_carry_their_header_and_context(self) -> None:
        index = self._index()
        for leaf in index.get_by_ids(index.keys()):
            meta = leaf.metadata
            text = self.model[meta["source_id"]][0]
            assert leaf.page_content == text[meta["start"] : meta["end"]]
            want = section_header(text, meta["start"], meta["end"])
            assert meta.get("heading", "") == want
            assert meta["leaf_context"] == SITUATED

    @invariant()
    def headers_and_contexts_are_searched(self) -> None:
        index = self._index()
        leaves = index.get_by_ids(index.keys())
        lexical = index.lexical()
        for word in [*HEADINGS, *SITUATED.split()]:
            found = {key for key, _ in lexical.search(word, len(leaves) + 1)}
            want = {
                str(d.id)
                for d in leaves
                if word in analyze(embedded_text(d.page_content, d.metadata))
            }
            assert found == want, word
        assert {key for key, _ in lexical.search("situated", len(leaves) + 1)} == set(index.keys())

    @invariant()
    def no_context_is_asked_for_twice(self) -> None:
        assert len(self.chat._calls) == len(set(self.chat._calls))


TestHeadersLifecycle = HeadersLifecycleMachine.TestCase
TestHeadersLifecycle.settings = MACHINE_SETTINGS
