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
        # the vectors stay searchable in the exact staging index
        assert len(index) == 12
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
