"""FaissIndex with approximate index types: HNSW, IVF training, search parameters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_s2b import FaissIndex, SmallToBigRetriever

from ._embeddings import BagOfWords

WORDS = [
    *("apple", "river", "engine", "music", "castle", "storm"),
    *("glacier", "bee", "lantern", "meadow", "harbor", "violin"),
]


def _docs(n: int = 12) -> list[Document]:
    docs = []
    for d in range(n):
        sentences = [
            f"The {WORDS[(d + s) % 12]} met the {WORDS[(d * 3 + s) % 12]} near {WORDS[s % 12]}."
            for s in range(12)
        ]
        docs.append(Document(page_content=" ".join(sentences), id=f"d{d}"))
    return docs


def _scores(index: FaissIndex, query: str, k: int = 5) -> list[float]:
    """Ranked scores (equal texts may tie, so ranks are compared by score)."""
    return [round(s, 5) for _, s in index.similarity_search_with_score(query, k=k)]


def _rows(n: int, dim: int = 16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


class TestTraining:
    def test_ivf_stages_exactly_until_enough_vectors_then_trains(self) -> None:
        index = FaissIndex(BagOfWords(64), "IVF4,Flat", search_params="nprobe=4", train_size=60)
        flat = FaissIndex(BagOfWords(64))
        texts = [f"{WORDS[i % 12]} {WORDS[(i * 5) % 12]} number {i}" for i in range(100)]
        ids = [f"k{i}" for i in range(100)]
        index.add_texts(texts[:40], ids=ids[:40])
        flat.add_texts(texts[:40], ids=ids[:40])
        assert not index.is_trained
        assert _scores(index, "apple river") == _scores(flat, "apple river")
        index.add_texts(texts[40:], ids=ids[40:])
        flat.add_texts(texts[40:], ids=ids[40:])
        assert index.is_trained
        assert len(index) == 100
        # nprobe = nlist searches every list: exactly the flat result
        assert _scores(index, "apple river") == _scores(flat, "apple river")

    def test_retriever_with_ivf_returns_what_flat_returns(self) -> None:
        docs = _docs()
        ivf = SmallToBigRetriever(
            vectorstore=FaissIndex(
                BagOfWords(), "IVF8,Flat", search_params="nprobe=8", train_size=50
            ),
            mode="window",
        )
        ivf.add_documents(docs)
        flat = SmallToBigRetriever.from_documents(docs, BagOfWords(), mode="window")
        assert isinstance(ivf.vectorstore, FaissIndex)
        assert ivf.vectorstore.is_trained
        for query in ("castle storm", "violin harbor meadow"):
            got = [round(d.metadata["score"], 5) for d in ivf.invoke(query)]
            assert got == [round(d.metadata["score"], 5) for d in flat.invoke(query)]

    def test_explicit_training_sample(self) -> None:
        index = FaissIndex(BagOfWords(16), "IVF4,Flat")
        index.train(_rows(200))
        assert index.is_trained
        index.add_vectors(_rows(5, seed=1), ["a", "b", "c", "d", "e"], [{}] * 5, list("abcde"))
        assert index.is_trained
        assert len(index) == 5

    def test_deletes_reach_the_staged_vectors(self) -> None:
        index = FaissIndex(BagOfWords(16), "IVF4,Flat", train_size=1000)
        index.add_vectors(
            _rows(10), [str(i) for i in range(10)], [{}] * 10, [str(i) for i in range(10)]
        )
        assert index.delete(["3", "4"])
        _, rows = index.search_rows(_rows(1, seed=2), 10)
        assert sorted(rows[0].tolist()) == [0, 1, 2, 5, 6, 7, 8, 9]

    def test_hnsw_with_search_params(self) -> None:
        docs = _docs()
        hnsw = SmallToBigRetriever(
            vectorstore=FaissIndex(BagOfWords(), "HNSW32", search_params="efSearch=256"),
            mode="parent",
        )
        hnsw.add_documents(docs)
        flat = SmallToBigRetriever.from_documents(docs, BagOfWords(), mode="parent")
        for query in ("apple engine", "bee lantern"):
            got = [round(d.metadata["score"], 5) for d in hnsw.invoke(query)]
            assert got == [round(d.metadata["score"], 5) for d in flat.invoke(query)]


class TestErrorsAndPersistence:
    def test_bad_factory_and_params_say_what_is_wrong(self) -> None:
        with pytest.raises(ValueError, match="index_factory='NoSuchIndex'"):
            FaissIndex(BagOfWords(16), "NoSuchIndex").add_vectors(_rows(1), ["a"], [{}], ["a"])
        with pytest.raises(ValueError, match="search_params='bogus=3'"):
            FaissIndex(BagOfWords(16), "HNSW8", search_params="bogus=3").add_vectors(
                _rows(1), ["a"], [{}], ["a"]
            )

    def test_too_few_vectors_to_train_is_a_clear_error(self) -> None:
        index = FaissIndex(BagOfWords(16), "IVF64,Flat", train_size=10)
        with pytest.raises(ValueError, match="Training 'IVF64,Flat' failed"):
            index.add_vectors(_rows(12), list("abcdefghijkl"), [{}] * 12, list("abcdefghijkl"))
        # all or nothing: the failed add left nothing, and fewer vectors stay staged (exact)
        assert len(index) == 0
        assert index.damage() == ([], 0)
        index.add_vectors(_rows(5), list("abcde"), [{}] * 5, list("abcde"))
        assert len(index) == 5
        assert not index.is_trained
        assert index.search_rows(_rows(1), 3)[1].shape == (1, 3)

    @pytest.mark.parametrize("count", [30, 80])
    def test_save_and_load_staged_or_trained(self, tmp_path: Path, count: int) -> None:
        index = FaissIndex(BagOfWords(16), "IVF4,Flat", search_params="nprobe=4", train_size=50)
        ids = [f"k{i}" for i in range(count)]
        index.add_vectors(_rows(count), ids, [{"i": i} for i in range(count)], ids)
        index.save(tmp_path)
        loaded = FaissIndex.load(tmp_path, BagOfWords(16))
        assert loaded.is_trained == (count >= 50)
        assert loaded.search_params == "nprobe=4"
        query = _rows(1, seed=5)
        assert loaded.search_rows(query, 5)[1].tolist() == index.search_rows(query, 5)[1].tolist()
        more = [f"m{i}" for i in range(40)]
        loaded.add_vectors(_rows(40, seed=9), more, [{}] * 40, more)
        assert loaded.is_trained
        assert len(loaded) == count + 40


DELETABLE = [
    ("Flat", None),
    ("HNSW32", "efSearch=256"),
    ("HNSW16,SQ8", "efSearch=256"),
    ("IVF4,Flat", "nprobe=4"),
    ("IVF4,PQ4x4", "nprobe=4"),
]


class TestDeletionWorksForEveryIndexType:
    """Issue 11 C3: HNSW could not delete; IVF inside IndexIDMap2 named wrong rows after one."""

    @pytest.mark.parametrize(("factory", "params"), DELETABLE)
    def test_remaining_vectors_keep_their_keys(self, factory: str, params: str | None) -> None:
        n = 200
        index = FaissIndex(BagOfWords(16), factory, search_params=params, train_size=64)
        ids = [f"k{i}" for i in range(n)]
        vectors = _rows(n)
        index.add_vectors(vectors, ids, [{"i": i} for i in range(n)], ids)
        gone: set[int] = set()
        for step in range(3):  # several deletes: a second IVF removal aborted the process
            batch = list(range(step, n, 7))
            assert index.delete([f"k{i}" for i in batch])
            gone.update(batch)
            live = [i for i in range(n) if i not in gone]
            assert sorted(index.keys()) == sorted(f"k{i}" for i in live)
            _, rows = index.search_rows(vectors, n)
            assert {int(r) for r in rows.ravel().tolist()} - {-1} == set(live)
            if "PQ" not in factory:  # lossless codes: each vector's nearest is itself
                nearest = [index.records([int(r[0])])[0] for r in rows[live]]
                assert [found[0] if found else None for found in nearest] == [f"k{i}" for i in live]
        assert index.get_by_ids(["k0", "k3"]) == [
            Document(page_content="k3", metadata={"i": 3}, id="k3")
        ]

    @pytest.mark.parametrize(("factory", "params"), DELETABLE)
    def test_save_after_deletes_loads(
        self, tmp_path: Path, factory: str, params: str | None
    ) -> None:
        n = 120
        index = FaissIndex(BagOfWords(16), factory, search_params=params, train_size=64)
        ids = [f"k{i}" for i in range(n)]
        index.add_vectors(_rows(n), ids, [{}] * n, ids)
        index.delete([f"k{i}" for i in range(0, n, 2)])
        index.save(tmp_path)
        loaded = FaissIndex.load(tmp_path, BagOfWords(16))
        assert sorted(loaded.keys()) == sorted(f"k{i}" for i in range(1, n, 2))
        query = _rows(3, seed=4)
        assert loaded.search_rows(query, 10)[1].tolist() == index.search_rows(query, 10)[1].tolist()

    def test_hnsw_retriever_updates_and_deletes_never_serve_old_text(self, tmp_path: Path) -> None:
        docs = _docs()
        r = SmallToBigRetriever(
            vectorstore=FaissIndex(BagOfWords(), "HNSW32", search_params="efSearch=256"),
            mode="window",
            window_size=1,
        )
        r.add_documents(docs)
        changed = Document(docs[0].page_content.replace("apple", "zebra"), id="d0")
        assert r.add_documents([changed]).updated == ["d0"]
        assert r.delete(["d1"]) == ["d1"]
        report = r.verify(repair=True)
        assert report.ok
        assert not report.repaired

        def served(retriever: SmallToBigRetriever) -> list[str]:
            found = retriever.invoke("apple", k=20) + retriever.invoke("zebra", k=20)
            return [d.page_content for d in found]

        texts = served(r)
        assert any("zebra" in t for t in texts)
        assert not any(docs[0].page_content[:40] in t for t in texts)  # d0's old version
        assert not any(docs[1].page_content[:40] in t for t in texts)
        assert "d1" not in {d.metadata["source_id"] for d in r.invoke("apple", k=20)}
        r.save(tmp_path / "idx")  # compacts: the graph is rebuilt from the live vectors
        loaded = SmallToBigRetriever.load(tmp_path / "idx", BagOfWords())
        assert served(loaded) == served(r)
        assert not any(docs[1].page_content[:40] in t for t in served(loaded))
        assert loaded.verify().ok

    def test_nsg_is_refused_at_construction(self) -> None:
        with pytest.raises(ValueError, match=r"index_factory='NSG32'.*use 'HNSW32'"):
            FaissIndex(BagOfWords(16), "NSG32")


class TestVectorStoreContract:
    """Issue 11 C7: duplicate ids in one add, and delete(None)."""

    def test_duplicate_ids_in_one_add_keep_the_last(self, tmp_path: Path) -> None:
        index = FaissIndex(BagOfWords(16))
        got = index.add_texts(
            ["apple", "river", "engine"], [{"n": 1}, {"n": 2}, {"n": 3}], ids=["x", "y", "x"]
        )
        assert got == ["x", "y", "x"]
        assert len(index) == 2
        assert sorted(index.keys()) == ["x", "y"]
        assert index.get_by_ids(["x"]) == [Document("engine", metadata={"n": 3}, id="x")]
        assert [d.id for d in index.similarity_search("apple", k=5)] in (["x", "y"], ["y", "x"])
        assert index._index.ntotal == 2
        index.save(tmp_path)
        loaded = FaissIndex.load(tmp_path, BagOfWords(16))
        assert loaded.get_by_ids(["x", "y"]) == index.get_by_ids(["x", "y"])

    @pytest.mark.parametrize("factory", ["Flat", "HNSW32", "IVF4,Flat"])
    def test_delete_none_deletes_everything(self, tmp_path: Path, factory: str) -> None:
        index = FaissIndex(BagOfWords(16), factory, train_size=64)
        ids = [f"k{i}" for i in range(100)]
        index.add_vectors(_rows(100), ids, [{}] * 100, ids)
        assert index.delete(None) is True
        assert len(index) == 0
        assert index.keys() == []
        assert index.similarity_search("apple", k=3) == []
        assert index.delete(None) is False
        index.add_vectors(_rows(1), ["again"], [{}], ["again"])
        assert [d.id for d in index.similarity_search("x", k=3)] == ["again"]
        index.save(tmp_path)
        assert FaissIndex.load(tmp_path, BagOfWords(16)).keys() == ["again"]
