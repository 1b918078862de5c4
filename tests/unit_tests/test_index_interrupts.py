"""Interrupts inside the child index's own writes: every step, all or nothing.

A write of ``FaissIndex`` is several steps (FAISS, the lexical index, the
records); an error, Ctrl-C or a cancellation may land just before or just after
any of them (:mod:`._faults`). The index is then exactly as before the call:
its records, FAISS's ids and vectors, the lexical index and its count agree,
``verify`` says so, and a retry gives what the call would have.

The first tests are the findings of issue 28, each reproduced; then every step
of every write by parametrisation; then a state machine over a bare
``FaissIndex`` (new keys, replaced keys, deletes, saves and loads, three index
types) with a fault at any step of any write. CI (``CI=true``) runs 100
sequences of 12 steps for each index type.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.store.children.hybrid_index import HybridChildIndex
from langchain_s2b.store.lexical.lexical_index import LexicalIndex
from langchain_s2b.store.vectors import normalise
from langchain_s2b.store.vectors import records as records_module

from ._embeddings import ExactWords
from ._faults import KINDS, WRITE_STEPS, fault_at

ALPHA = "Alpha walrus tusks. Alpha walrus swims."
BETA = "Beta penguin wings. Beta penguin dives."


def _retriever(**fields: Any) -> SmallToBigRetriever:
    r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window", **fields)
    r.add_documents([Document(ALPHA, id="a"), Document(BETA, id="b")])
    return r


def _whole(index: FaissIndex) -> None:
    """Records, FAISS's ids, the lexical index and the count agree (read from each part)."""
    active = index._active()
    held = [] if active is None else faiss.vector_to_array(active.id_map).tolist()
    live = sorted(set(held) - index._dead) if active is index._index else sorted(held)
    assert len(held) == len(set(held))
    if index._staging is not None:  # while vectors are staged, the index itself is empty
        assert index._index.ntotal == 0
        assert not index._dead
    assert live == index._rows.live_rows().tolist()
    assert len(index) == len(live) == len(index.keys())
    built = index.built_lexical()
    if built is not None:
        assert built.keys() == set(index.keys())


class TestFindings:
    """Issue 28's findings inside ``FaissIndex``, each as it was reproduced."""

    def test_an_interrupt_inside_the_records_then_a_retry_counts_every_leaf(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Before: ``len`` 3 while holding 4 leaves, and ``save()`` then failed."""
        r = _retriever()
        real = records_module.Records._slot
        calls = [0]

        def interrupted(self: Any, *args: Any) -> None:
            calls[0] += 1
            if calls[0] == 2:  # the update's first key is mapped, the second not yet
                raise KeyboardInterrupt
            real(self, *args)

        monkeypatch.setattr(records_module.Records, "_slot", interrupted)
        with pytest.raises(KeyboardInterrupt):
            r.add_documents([Document(ALPHA + " More.", id="a")])
        monkeypatch.undo()
        index = r.vectorstore
        assert isinstance(index, FaissIndex)
        assert len(index) == len(index.keys()) == 4
        r.add_documents([Document(ALPHA + " More.", id="a")])
        assert len(index) == 5
        _whole(index)
        assert r.verify().ok
        r.save(tmp_path / "saved")
        loaded = SmallToBigRetriever.load(tmp_path / "saved", index.embedding)
        assert len(loaded.vectorstore) == 5  # type: ignore[arg-type]

    def test_an_interrupt_inside_bare_records_then_a_retry_works(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Before: the retry raised "__len__() should return >= 0"."""
        index = FaissIndex(DeterministicFakeEmbedding(size=8))
        meta = [
            {"source_key": "s", "level": "c", "split_id": i, "start": 0, "end": 1} for i in range(4)
        ]
        index.add_texts(["a", "b"], meta[:2], ids=["s/c/0", "s/c/1"])
        real = records_module.Records._slot
        calls = [0]

        def interrupted(self: Any, *args: Any) -> None:
            calls[0] += 1
            if calls[0] == 2:
                raise KeyboardInterrupt
            real(self, *args)

        monkeypatch.setattr(records_module.Records, "_slot", interrupted)
        with pytest.raises(KeyboardInterrupt):
            index.add_texts(["c", "d"], meta[2:], ids=["s/c/2", "s/c/3"])
        monkeypatch.undo()
        assert index.keys() == ["s/c/0", "s/c/1"]
        index.add_texts(["c", "d"], meta[2:], ids=["s/c/2", "s/c/3"])
        index.delete(["s/c/2", "s/c/3"])
        index.add_texts(["c", "d"], meta[2:], ids=["s/c/2", "s/c/3"])
        assert len(index) == 4
        _whole(index)

    @pytest.mark.parametrize("named", [False, True])
    def test_an_interrupt_inside_a_records_remove_maps_every_row_again(
        self, named: bool, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The records' own undo: keys unmapped before the interrupt name their rows again."""
        records = records_module.Records()
        keys = [f"other:{i}" if named else f"s/c/{i}" for i in range(4)]
        metas = [{"source_key": "s", "level": "c", "split_id": i, "start": i, "end": i + 1}
                 for i in range(4)]  # fmt: skip
        records.add([0, 1, 2, 3], keys, ["a", "b", "c", "d"], metas)
        real = records_module.Records._unmap
        calls = [0]

        def interrupted(self: Any, row: int) -> str | None:
            calls[0] += 1
            if calls[0] == 3:
                raise KeyboardInterrupt
            return real(self, row)

        monkeypatch.setattr(records_module.Records, "_unmap", interrupted)
        with pytest.raises(KeyboardInterrupt):
            records.remove([0, 2, 3])
        monkeypatch.undo()
        assert len(records) == 4
        assert [records.row(key) for key in keys] == [0, 1, 2, 3]
        assert [records.record(row) for row in range(4)] == [
            (key, text, meta) for key, text, meta in zip(keys, "abcd", metas, strict=True)
        ]
        assert sorted(records.source_rows("s").tolist()) == [0, 1, 2, 3]

    @pytest.mark.parametrize("kind", ["interrupt", "cancel", "error"])
    def test_ctrl_c_just_after_faiss_dropped_the_vectors_keeps_the_source_found(
        self, kind: str
    ) -> None:
        """Before: the source counted as kept, no search found it, and verify said ok."""
        r = _retriever()
        with fault_at("faiss.remove", kind, "after") as fired, pytest.raises(KINDS[kind]):
            r.delete(["a"])
        assert fired[0]
        index = r.vectorstore
        assert isinstance(index, FaissIndex)
        assert index._index.ntotal == len(index) == 4
        _whole(index)
        assert r.verify().ok
        (top,) = r.invoke("walrus", k=1)
        assert top.page_content == ALPHA
        (budgeted,) = r.invoke("walrus tusks", max_tokens=8)  # BM25 finds it too
        assert budgeted.metadata["source_id"] == "a"
        assert r.delete(["a"]) == ["a"]
        assert r.invoke("walrus", k=1)[0].page_content == BETA

    def test_a_failure_between_removing_and_adding_a_replaced_id_keeps_the_old(self) -> None:
        """Before: the old row went first, so a failure before the new one lost both."""
        index = FaissIndex(DeterministicFakeEmbedding(size=8))
        index.add_texts(["old text"], [{"v": 1}], ids=["k"])
        with fault_at("faiss.add", "error") as fired, pytest.raises(OSError, match="injected"):
            index.add_texts(["new text"], [{"v": 2}], ids=["k"])
        assert fired[0]
        assert [(d.page_content, d.metadata) for d in index.get_by_ids(["k"])] == [
            ("old text", {"v": 1})
        ]
        found = index.similarity_search_with_score("old text", k=1)
        assert [(d.id, round(score, 5)) for d, score in found] == [("k", 1.0)]
        _whole(index)

    def test_verify_sees_records_and_vectors_that_disagree_and_repair_mends_them(
        self, tmp_path: Path
    ) -> None:
        """Before: ``verify(repair=True)`` said ok while FAISS held 2 vectors for 4 records."""
        r = _retriever()
        index = r.vectorstore
        assert isinstance(index, FaissIndex)
        row = index.rows_of(["a/sentence/1"])[0]
        index._index.remove_ids(np.asarray([row], dtype=np.int64))  # a record without its vector
        stray = normalise(np.ones((1, index.dim or 0), dtype=np.float32))
        index._index.add_with_ids(stray, np.asarray([999], dtype=np.int64))  # and one of no leaf
        report = r.verify()
        assert not report.ok
        assert (report.unindexed_children, report.stray_vectors) == (["a/sentence/1"], 1)
        repaired = r.verify(repair=True)
        assert repaired.repaired
        assert repaired.rebuilt == ["a"]
        assert r.verify().ok
        _whole(index)
        assert index.damage() == ([], 0)
        assert r.invoke("swims", k=1)[0].page_content == ALPHA
        r.save(tmp_path / "saved")  # the FAISS file and the records agree again

    @pytest.mark.parametrize("kind", ["interrupt", "error"])
    def test_an_undo_that_fails_too_is_seen_by_verify_and_mended(self, kind: str) -> None:
        """FAISS dropped the vectors and putting them back failed: verify names the leaves."""
        r = _retriever()
        with (
            fault_at("faiss.remove", kind, "after"),
            fault_at("faiss.add", "error"),
            pytest.warns(UserWarning, match="undoing it failed too"),
            pytest.raises(KINDS[kind]),
        ):
            r.delete(["a"])
        report = r.verify()
        assert report.unindexed_children == ["a/sentence/0", "a/sentence/1"]
        assert r.verify(repair=True).rebuilt == ["a"]
        assert r.verify().ok
        assert r.invoke("walrus", k=1)[0].page_content == ALPHA

    def test_a_cancelled_async_update_inside_faiss_keeps_the_old_version(self) -> None:
        r = _retriever()
        before = r.invoke("walrus penguin", k=4)
        with fault_at("faiss.add", "cancel", "after"), pytest.raises(asyncio.CancelledError):
            asyncio.run(r.aadd_documents([Document(ALPHA + " Again.", id="a")]))
        assert r.invoke("walrus penguin", k=4) == before
        assert r.verify().ok
        _whole(r.vectorstore)  # type: ignore[arg-type]


# Every step of every write ---------------------------------------------------------------

DIM = 8
FACTORIES = {"Flat": {}, "HNSW32": {}, "IVF2,Flat": {"train_size": 6}}


def _vector(key: str, text: str) -> list[float]:
    seed = zlib.crc32(f"{key}|{text}".encode())
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32).tolist()


def _meta(key: str, version: int) -> dict[str, Any]:
    source, _, split = key.partition("/")
    return {"source_key": source, "level": "leaf", "split_id": int(split), "start": 0,
            "end": 1, "v": version, "tags": ["t", version]}  # fmt: skip


def _add(index: FaissIndex, keys: list[str], version: int) -> None:
    texts = [f"{key} text {version} walrus" for key in keys]
    vectors = np.asarray([_vector(k, t) for k, t in zip(keys, texts, strict=True)])
    index.add_vectors(vectors, texts, [_meta(k, version) for k in keys], keys)


def _state(index: FaissIndex) -> dict[str, Any]:
    """What every part of the index holds, by key (vectors as FAISS gives them back)."""
    _whole(index)
    keys = sorted(index.keys())
    rows = index.rows_of(keys)
    active = index._active()
    vectors: list[Any] = []
    if rows:
        if isinstance(faiss.downcast_index(active.index), faiss.IndexIVF):
            faiss.extract_index_ivf(active).make_direct_map()
        vectors = np.round(active.reconstruct_batch(np.asarray(rows)), 5).tolist()
    records = {k: (t, m) for k, t, m in (r for r in index.records(rows) if r is not None)}
    built = index.built_lexical()
    return {
        "records": records,
        "vectors": dict(zip(keys, vectors, strict=True)),
        "lexical": None if built is None else sorted(built.keys()),
        "len": len(index),
        "damage": index.damage(),
    }


def _filled(factory: str) -> FaissIndex:
    index = FaissIndex(DeterministicFakeEmbedding(size=DIM), factory, **FACTORIES[factory])
    _add(index, ["s/0", "s/1", "s/2"], 0)
    index.lexical()
    return index


WRITES = {
    "add new": lambda index: _add(index, ["t/0", "t/1"], 1),
    "replace": lambda index: _add(index, ["s/1", "s/2", "t/0"], 1),
    "delete": lambda index: index.delete(["s/0", "s/2", "nope/0"]),
    "clear": lambda index: index.delete(None),
}


@pytest.mark.parametrize("factory", list(FACTORIES))
@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("step", list(WRITE_STEPS))
@pytest.mark.parametrize(("kind", "when"), [("interrupt", "before"), ("interrupt", "after"),
                                            ("cancel", "after"), ("error", "before")])  # fmt: skip
def test_every_step_of_every_write_is_all_or_nothing(
    factory: str, write: str, step: str, kind: str, when: str
) -> None:
    index = _filled(factory)
    before = _state(index)
    done = _filled(factory)
    WRITES[write](done)
    after = _state(done)
    with fault_at(step, kind, when) as fired:
        try:
            WRITES[write](index)
        except KINDS[kind]:
            assert fired[0]
    if fired[0]:
        assert _state(index) == before
        WRITES[write](index)  # the retry does what the call would have
    assert _state(index) == after


# A state machine over a bare FaissIndex ----------------------------------------------------

CI = os.environ.get("CI", "").lower() == "true"
SEQUENCES = 100 if CI else 10
STEPS_PER_SEQUENCE = 12 if CI else 10
POOL = ["s/0", "s/1", "s/2", "t/0", "t/1", "u/0"]
"""Keys: a write picks some, so that it adds new ones and replaces held ones."""


def _faults(steps: list[str]) -> st.SearchStrategy[tuple[str, str, str, int] | None]:
    """No fault (one write in four), or one at call ``at`` of one of ``steps``."""
    fault = st.tuples(
        st.sampled_from(steps),
        st.sampled_from(list(KINDS)),
        st.sampled_from(["before", "after"]),
        st.sampled_from([0, 0, 0, 1]),
    )
    return st.one_of(st.none(), fault, fault, fault)


REMOVING = ["records.remove", "faiss.remove", "lexical.delete"]


class FaissIndexMachine(RuleBasedStateMachine):
    """A ``FaissIndex`` against a dict ``key -> (text, metadata, vector)`` of what was written."""

    factory = "Flat"

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[str, tuple[str, dict[str, Any], list[float]]] = {}
        self.root = Path(tempfile.mkdtemp(prefix="s2b-faiss-machine-"))
        self.version = 0
        self.index: FaissIndex

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @initialize(lexical=st.sampled_from([True, True, False]))
    def build(self, lexical: bool) -> None:
        self.index = FaissIndex(DeterministicFakeEmbedding(size=DIM), self.factory,
                                **FACTORIES[self.factory])  # fmt: skip
        if lexical:
            self.index.lexical()

    def _write(self, fault: tuple[str, str, str, int] | None, call: Any) -> bool:
        """Run ``call`` with ``fault``; whether it happened (else it raised the fault)."""
        if fault is None:
            call()
            return True
        step, kind, when, at = fault
        with fault_at(step, kind, when, at) as fired:
            try:
                call()
            except KINDS[kind]:
                assert fired[0]
        event(f"fault {step} {when}: {'fired' if fired[0] else 'not reached'}")
        return not fired[0]

    @rule(
        keys=st.lists(st.sampled_from(POOL), min_size=1, max_size=4),
        fault=_faults(list(WRITE_STEPS)),
    )
    def add(self, keys: list[str], fault: tuple[str, str, str, int] | None) -> None:
        self.version += 1
        version = self.version
        if self._write(fault, lambda: _add(self.index, keys, version)):
            for key in keys:
                text = f"{key} text {version} walrus"
                self.model[key] = (text, _meta(key, version), _vector(key, text))

    @rule(keys=st.lists(st.sampled_from([*POOL, "v/0"]), max_size=3), fault=_faults(REMOVING))
    def delete(self, keys: list[str], fault: tuple[str, str, str, int] | None) -> None:
        if self._write(fault, lambda: self.index.delete(keys)):
            for key in keys:
                self.model.pop(key, None)

    @rule()
    def save_and_load(self) -> None:
        where = self.root / f"save-{self.version}"
        self.index.save(where)
        lexical = self.index.built_lexical() is not None
        self.index = FaissIndex.load(where, self.index.embedding)
        if lexical:
            self.index.lexical()

    @invariant()
    def the_index_holds_exactly_the_model(self) -> None:
        index = self.index
        _whole(index)
        assert index.damage() == ([], 0)
        assert sorted(index.keys()) == sorted(self.model)
        got = {d.id: (d.page_content, d.metadata) for d in index.get_by_ids(sorted(self.model))}
        assert got == {k: (t, m) for k, (t, m, _) in self.model.items()}
        built = index.built_lexical()
        if built is not None:
            found = {key for key, _ in built.search("walrus", len(self.model) + 1)}
            assert found == set(self.model)
        if not index._dead:  # saved and loaded, it holds the same (a save drops tombstones)
            where = self.root / "alone"
            shutil.rmtree(where, ignore_errors=True)
            index.save(where)
            loaded = FaissIndex.load(where, index.embedding)
            assert _state(loaded)["records"] == _state(index)["records"]
        for key, (_, _, vector) in self.model.items():
            scores = index.scores_of(np.asarray(vector), index.rows_of([key]))
            assert scores is not None
            np.testing.assert_allclose(scores, [1.0], atol=1e-5)  # its own vector, normalised
            if self.factory == "Flat":
                ((top, _),) = index.similarity_search_with_score_by_vector(vector, k=1)
                assert top.id == key


class HnswIndexMachine(FaissIndexMachine):
    """Tombstones: HNSW can not remove vectors."""

    factory = "HNSW32"


class IvfIndexMachine(FaissIndexMachine):
    """Staged in an exact index until 6 vectors, then trained and moved (tombstones after)."""

    factory = "IVF2,Flat"


MACHINE_SETTINGS = settings(
    max_examples=SEQUENCES,
    stateful_step_count=STEPS_PER_SEQUENCE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestFlatIndex = FaissIndexMachine.TestCase
TestFlatIndex.settings = MACHINE_SETTINGS
TestHnswIndex = HnswIndexMachine.TestCase
TestHnswIndex.settings = MACHINE_SETTINGS
TestIvfIndex = IvfIndexMachine.TestCase
TestIvfIndex.settings = MACHINE_SETTINGS


# Other child stores, copies, metadata and filters -----------------------------------------


class TestOtherStores:
    def test_a_dense_copy_over_a_shared_store_writes_through_its_lexical_index(self) -> None:
        """Before: a ``hybrid=False`` copy wrote around it; BM25 missed the new leaves."""
        r = SmallToBigRetriever(vectorstore=InMemoryVectorStore(ExactWords()), mode="window")
        r.add_documents([Document(ALPHA, id="a")])
        assert r.invoke("walrus", max_tokens=20)  # the shared lexical index is filled
        dense = r.model_copy(update={"hybrid": False})
        dense.add_documents([Document(BETA, id="b")])
        assert r.verify().ok
        index = r._io.index
        assert isinstance(index, HybridChildIndex)
        assert {k for k, _ in index.search_text("penguin", 5, None)} == {
            "b/sentence/0",
            "b/sentence/1",
        }
        dense.delete(["a"])
        assert r.verify().ok
        assert index.search_text("walrus", 5, None) == []

    @pytest.mark.parametrize("kind", ["interrupt", "cancel", "error"])
    def test_a_delete_the_store_finished_before_the_interrupt_is_put_back(
        self, kind: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Any child store: the leaves it lost come back, so the kept source is found."""
        store = InMemoryVectorStore(ExactWords())
        r = SmallToBigRetriever(vectorstore=store, docstore=InMemoryStore(), mode="window")
        r.add_documents([Document(ALPHA, id="a"), Document(BETA, id="b")])
        before = r.invoke("walrus penguin", k=4)
        real = InMemoryVectorStore.delete

        def interrupted(self: Any, ids: Any = None, **kwargs: Any) -> None:
            real(self, ids, **kwargs)
            raise KINDS[kind]()

        monkeypatch.setattr(InMemoryVectorStore, "delete", interrupted)
        with pytest.raises(KINDS[kind]):
            r.delete(["a"])
        monkeypatch.undo()
        assert r.verify().ok
        # The same results. Their order may differ: both tie on the cosine, and BM25 (fused
        # on every call) counts the deleted copies of a's words in its document frequencies
        # until tantivy merges the segment, as Lucene does, so a's words weigh a little less.
        after = r.invoke("walrus penguin", k=4)
        assert _unfused(after, by_source=True) == _unfused(before, by_source=True)
        assert {key for key, _ in r._io.index.search_text("walrus", 5, None)} == {
            "a/sentence/0",
            "a/sentence/1",
        }

    def test_an_add_the_store_half_did_is_taken_back(self, monkeypatch: pytest.MonkeyPatch) -> None:
        store = InMemoryVectorStore(ExactWords())
        r = SmallToBigRetriever(vectorstore=store, mode="window", hybrid=False)
        r.add_documents([Document(ALPHA, id="a")])
        real = InMemoryVectorStore.add_documents

        def half(self: Any, documents: list[Document], **kwargs: Any) -> list[str]:
            real(self, documents[:1], ids=kwargs["ids"][:1])
            raise KeyboardInterrupt

        monkeypatch.setattr(InMemoryVectorStore, "add_documents", half)
        with pytest.raises(KeyboardInterrupt):
            r.add_documents([Document(BETA, id="b")])
        monkeypatch.undo()
        assert sorted(store.store) == ["a/sentence/0", "a/sentence/1"]
        assert r.verify().ok


class TestMetadataAndFilters:
    def test_a_metadata_key_that_is_not_a_string_is_refused_in_one_line(self) -> None:
        """Before: "shape 0 is not a list of [name, value] pairs", deep inside."""
        r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window")
        want = (
            r"^Document id='y' has a metadata key that is not a string: 2020 \(int\); "
            r"metadata keys must be strings \(e\.g\. '2020'\)\.$"
        )
        with pytest.raises(ValueError, match=want):
            r.add_documents([Document(ALPHA, id="y", metadata={2020: "year"})])
        assert list(r.docstore.yield_keys()) == []
        assert len(r.vectorstore) == 0  # type: ignore[arg-type]

    def test_a_list_changed_in_place_between_two_adds_is_stored_as_it_is_then(self) -> None:
        """Before: the second add matched the first by identity and stored ``['x']``."""
        index = FaissIndex(DeterministicFakeEmbedding(size=DIM))
        tags = ["x"]
        index.add_texts(["a"], [{"tags": tags}], ids=["1"])
        tags.append("y")
        index.add_texts(["b"], [{"tags": tags}], ids=["2"])
        assert [d.metadata for d in index.get_by_ids(["1", "2"])] == [
            {"tags": ["x"]},
            {"tags": ["x", "y"]},
        ]

    def test_a_tuple_after_a_list_of_the_same_items_stays_a_tuple(self) -> None:
        """Before: the list's shape (same JSON) was reused, and the tuple came back a list."""
        index = FaissIndex(DeterministicFakeEmbedding(size=DIM))
        index.add_texts(["a"], [{"t": [0]}], ids=["1"])
        index.add_texts(["b"], [{"t": (0,)}], ids=["2"])
        got = [d.metadata["t"] for d in index.get_by_ids(["1", "2"])]
        assert [(type(t), t) for t in got] == [(list, [0]), (tuple, (0,))]

    @pytest.mark.parametrize(
        ("first", "second", "want"),
        [
            ({"tags": (1, 2)}, {"tags": [1, 2]}, (1, 1)),  # a tuple is a JSON array
            ({"tags": [1, 2]}, {"tags": (1, 2)}, (1, 1)),
            ({"n": 1.5}, {"n": "1.5"}, (1, 0)),
            ({"n": {"$in": [(1,), "x"]}}, {"n": {"$in": [[1], "x"]}}, (0, 0)),
        ],
    )
    def test_one_filter_never_answers_for_another(
        self, first: dict[str, Any], second: dict[str, Any], want: tuple[int, int]
    ) -> None:
        """Before: the cache keyed filters by ``json.dumps``: ``(1, 2)`` poisoned ``[1, 2]``."""
        r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window")
        r.add_documents([Document(ALPHA, id="a", metadata={"tags": [1, 2], "1": "x", "n": 1.5})])
        got = (len(r.invoke("walrus", filter=first)), len(r.invoke("walrus", filter=second)))
        assert got == want

    def test_a_filter_field_that_is_not_a_string_is_refused_in_one_line(self) -> None:
        r = SmallToBigRetriever(vectorstore=FaissIndex(ExactWords()), mode="window")
        r.add_documents([Document(ALPHA, id="a", metadata={"1": "x"})])
        assert len(r.invoke("walrus", filter={"1": "x"})) == 1
        with pytest.raises(ValueError, match=r"^A filter's field names .* got 1 \(int\) in"):
            r.invoke("walrus", filter={"$or": [{1: "x"}]})


def test_the_faults_reach_every_step() -> None:
    """Each step in ``WRITE_STEPS`` is a call a write makes (a renamed one would go unseen)."""
    index = _filled("Flat")
    for step in WRITE_STEPS:
        with fault_at(step, "error") as fired:
            try:
                _add(index, ["s/1", "z/0"], 9)
                index.delete(["s/1"])
            except OSError:
                pass
        assert fired[0], step
    assert isinstance(index.built_lexical(), LexicalIndex)


def _unfused(docs: list[Document], *, by_source: bool = False) -> list[Document]:
    """The documents without their fused scores (BM25's part), by source id if asked."""
    out = []
    for doc in docs:
        meta = {k: v for k, v in doc.metadata.items() if k != "fused_score"}
        meta["matches"] = [
            {k: v for k, v in m.items() if k != "fused_score"} for m in meta.get("matches", [])
        ]
        out.append(Document(page_content=doc.page_content, metadata=meta, id=doc.id))
    return sorted(out, key=lambda d: d.metadata["source_id"]) if by_source else out
