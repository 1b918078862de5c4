"""Upsert, no-op re-add, delete and verify/repair across both stores."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryByteStore, InMemoryStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from langchain_s2b import FaissIndex, Level, SmallToBigRetriever
from langchain_s2b.core import lifecycle
from langchain_s2b.core.ingest import manifest_keys
from langchain_s2b.core.splitters import section_splitter, size_splitter

from ._embeddings import BagOfWords

PARAGRAPH = "Sentence {n} of {name} tells about topic {n}. "


def text(name: str, paragraphs: int, sentences: int = 4) -> str:
    paras = [
        "".join(PARAGRAPH.format(n=p * 10 + s, name=name) for s in range(sentences))
        for p in range(paragraphs)
    ]
    return "\n\n".join(paras)


class CountingEmbedding(BagOfWords):
    """Counts the texts it embeds."""

    embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return super().embed_documents(texts)


def make(**kwargs: Any) -> SmallToBigRetriever:
    emb = kwargs.pop("embedding", None) or CountingEmbedding()
    return SmallToBigRetriever(
        vectorstore=FaissIndex(emb),
        child_splitter=size_splitter(12),
        parent_splitter=section_splitter(60),
        **kwargs,
    )


def doc_keys(r: SmallToBigRetriever) -> set[str]:
    return set(r.docstore.yield_keys())


def child_keys(r: SmallToBigRetriever) -> set[str]:
    assert isinstance(r.vectorstore, FaissIndex)
    return set(r.vectorstore.keys())


def owned(r: SmallToBigRetriever, source_id: str) -> tuple[set[str], set[str]]:
    """(docstore keys, leaf keys) a source's manifest lists."""
    from langchain_s2b.core.keys import encode_source_key, manifest_key

    (manifest,) = r.docstore.mget([manifest_key(encode_source_key(source_id))])
    assert manifest is not None
    keys = manifest_keys(manifest)
    leaf = manifest.metadata["levels"][0]
    return set(keys), {k for k in keys if k.rsplit("/", 2)[-2] == leaf}


def corpus() -> list[Document]:
    return [
        Document(text("alpha", 6), id="alpha", metadata={"lang": "en"}),
        Document(text("beta", 3), id="beta"),
        Document(text("gamma", 1), id="gamma"),
    ]


def assert_exact(r: SmallToBigRetriever, ids: list[str]) -> None:
    """Both stores hold exactly the keys the manifests of ``ids`` list."""
    want_docs: set[str] = set()
    want_leaves: set[str] = set()
    for sid in ids:
        keys, leaves = owned(r, sid)
        want_docs |= keys
        want_leaves |= leaves
    assert doc_keys(r) == want_docs
    assert child_keys(r) == want_leaves


class TestAddAndReAdd:
    def test_add_reports_and_counts(self) -> None:
        r = make()
        result = r.add_documents(corpus())
        assert result.added == ["alpha", "beta", "gamma"]
        assert result.updated == result.unchanged == []
        assert result.num_children == len(child_keys(r)) > 3
        assert_exact(r, ["alpha", "beta", "gamma"])

    def test_unchanged_re_add_is_a_no_op(self) -> None:
        r = make()
        r.add_documents(corpus())
        emb = r.vectorstore.embeddings
        assert isinstance(emb, CountingEmbedding)
        before = (doc_keys(r), child_keys(r), emb.embedded)
        result = r.add_documents(corpus())
        assert result.unchanged == ["alpha", "beta", "gamma"]
        assert result.added == result.updated == []
        assert result.num_children == 0
        assert (doc_keys(r), child_keys(r), emb.embedded) == before

    @pytest.mark.parametrize(("old", "new"), [(6, 2), (2, 6), (3, 3)])
    def test_changed_content_upserts_without_orphans(self, old: int, new: int) -> None:
        r = make()
        r.add_documents([Document(text("alpha", old), id="alpha"), corpus()[1]])
        changed = Document(text("alpha", new).replace("topic", "subject"), id="alpha")
        result = r.add_documents([changed])
        assert result.updated == ["alpha"]
        assert_exact(r, ["alpha", "beta"])
        hit = r.invoke("Sentence 1 of alpha tells about subject 1.", k=1)[0]
        assert "subject" in hit.page_content
        assert "topic" not in hit.page_content
        assert r.verify().ok

    def test_metadata_change_is_an_update(self) -> None:
        r = make()
        r.add_documents(corpus())
        doc = Document(corpus()[0].page_content, id="alpha", metadata={"lang": "fr"})
        assert r.add_documents([doc]).updated == ["alpha"]
        assert_exact(r, ["alpha", "beta", "gamma"])

    def test_empty_and_whitespace_sources_index_nothing(self) -> None:
        r = make()
        result = r.add_documents([Document("", id="e"), Document(" \n\t ", id="w")])
        assert result.empty == ["e", "w"]
        assert doc_keys(r) == set()
        assert child_keys(r) == set()


class ModelTimeoutError(Exception):
    """The embedding model timed out."""


class FailingEmbedding(CountingEmbedding):
    """Raises on ``embed_documents`` while ``fail`` is set."""

    fail = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.fail:
            raise ModelTimeoutError
        return super().embed_documents(texts)


class FailingStore(InMemoryStore):
    """Writes the first ``keep`` pairs of the next ``mset``, then raises."""

    keep: int | None = None

    def mset(self, key_value_pairs: Any) -> None:
        pairs = list(key_value_pairs)
        if self.keep is not None:
            keep, self.keep = self.keep, None
            super().mset(pairs[:keep])
            raise OSError("disk full")
        super().mset(pairs)


class TestFailedUpdateKeepsTheOldVersion:
    """Issue 11 C2: the old version was deleted before the new one was embedded."""

    def test_failed_embedding_keeps_the_old_version(self) -> None:
        emb = FailingEmbedding()
        r = make(embedding=emb)
        r.add_documents(corpus())
        before = (doc_keys(r), child_keys(r))
        query = "Sentence 1 of alpha tells about topic 1."
        served = r.invoke(query, k=1)
        emb.fail = True
        changed = Document(text("alpha", 2).replace("topic", "subject"), id="alpha")
        with pytest.raises(ModelTimeoutError):
            r.add_documents([changed, Document(text("delta", 1), id="delta")])
        assert (doc_keys(r), child_keys(r)) == before
        assert r.invoke(query, k=1) == served
        assert served[0].metadata["source_id"] == "alpha"
        assert r.verify().ok
        emb.fail = False
        assert r.add_documents([changed]).updated == ["alpha"]
        assert "subject" in r.invoke(query, k=1)[0].page_content

    @pytest.mark.parametrize("keep", [0, 3])
    def test_docstore_failing_half_way_keeps_the_old_version(self, keep: int) -> None:
        store = FailingStore()
        r = make(docstore=store)
        r.add_documents(corpus())
        before = (doc_keys(r), child_keys(r))
        query = "Sentence 1 of alpha tells about topic 1."
        served = r.invoke(query, k=1)
        store.keep = keep
        changed = Document(text("alpha", 2).replace("topic", "subject"), id="alpha")
        with pytest.raises(OSError, match="disk full"):
            r.add_documents([changed])
        assert (doc_keys(r), child_keys(r)) == before
        assert r.invoke(query, k=1) == served
        assert r.verify().ok

    def test_child_index_failing_after_the_docstore_keeps_the_old_version(self) -> None:
        r = make()
        r.add_documents(corpus())
        before = (doc_keys(r), child_keys(r))
        index = r.vectorstore
        assert isinstance(index, FaissIndex)

        def crash(*args: Any, **kwargs: Any) -> list[str]:
            raise RuntimeError("crash between the stores")

        index.add_vectors = crash  # type: ignore[method-assign]
        changed = Document(text("alpha", 2).replace("topic", "subject"), id="alpha")
        with pytest.raises(RuntimeError, match="between the stores"):
            r.add_documents([changed, Document(text("delta", 1), id="delta")])
        assert (doc_keys(r), child_keys(r)) == before
        assert r.verify().ok

    def test_manifest_write_failing_half_way_restores_every_source(self) -> None:
        store = FailingStore()
        r = make(docstore=store)
        r.add_documents(corpus()[:2])
        before = (doc_keys(r), child_keys(r))
        changed = [
            Document(text("alpha", 2).replace("topic", "subject"), id="alpha"),
            Document(text("gamma", 2), id="gamma"),
        ]
        calls = 0
        original = store.mset

        def on_manifests(pairs: Any) -> None:
            nonlocal calls
            calls += 1
            if calls == 2:  # nodes first, then the manifests: write one of two
                store.keep = 1
            original(pairs)

        store.mset = on_manifests  # type: ignore[method-assign]
        with pytest.raises(OSError, match="disk full"):
            r.add_documents(changed)
        assert (doc_keys(r), child_keys(r)) == before
        assert r.verify().ok


class TestDelete:
    def test_delete_removes_from_both_stores(self) -> None:
        r = make()
        r.add_documents(corpus())
        assert r.delete(["beta", "nope", "alpha"]) == ["beta", "alpha"]
        assert_exact(r, ["gamma"])
        assert all(d.metadata["source_id"] == "gamma" for d in r.invoke("alpha", k=5))

    def test_delete_unknown_is_not_an_error(self) -> None:
        r = make()
        assert r.delete(["never-added"]) == []
        r.add_documents(corpus())
        assert r.delete(["alpha"]) == ["alpha"]
        assert r.delete(["alpha"]) == []

    def test_delete_needs_a_list(self) -> None:
        with pytest.raises(TypeError, match="list of source ids"):
            make().delete("alpha")

    def test_deleted_source_can_come_back(self) -> None:
        r = make()
        r.add_documents(corpus())
        r.delete(["alpha"])
        assert r.add_documents(corpus()).added == ["alpha"]
        assert_exact(r, ["alpha", "beta", "gamma"])


class TestAsync:
    async def test_async_add_upsert_delete(self) -> None:
        r = make(byte_store=InMemoryByteStore())
        assert (await r.aadd_documents(corpus())).added == ["alpha", "beta", "gamma"]
        assert (await r.aadd_documents(corpus())).unchanged == ["alpha", "beta", "gamma"]
        changed = Document(text("alpha", 2), id="alpha")
        assert (await r.aadd_documents([changed])).updated == ["alpha"]
        assert_exact(r, ["alpha", "beta", "gamma"])
        assert await r.adelete(["gamma", "zzz"]) == ["gamma"]
        assert_exact(r, ["alpha", "beta"])
        assert (await r.averify()).ok


def interrupted(r: SmallToBigRetriever, docs: list[Document], steps: int) -> None:
    """Run an add for ``steps`` I/O requests and stop, like a crash would."""
    gen = lifecycle.add(r._lifecycle_config(), docs, None)
    request = next(gen)
    for _ in range(steps):
        request = gen.send(r._io.run(request))
    gen.close()


class TestVerify:
    def test_clean_index_is_ok(self) -> None:
        r = make()
        r.add_documents(corpus())
        report = r.verify()
        assert report.ok
        assert report.sources == 3
        assert report.children == len(child_keys(r))
        assert report.nodes == len(doc_keys(r)) - 3

    def test_interrupted_first_add_leaves_orphans_that_repair_removes(self) -> None:
        r = make()
        r.add_documents(corpus()[1:])
        # manifests read, leaves embedded, manifests read again, nodes and leaves written
        interrupted(r, [corpus()[0]], steps=5)
        report = r.verify()
        assert not report.ok
        assert report.orphan_nodes
        assert all(k.startswith("alpha/") for k in report.orphan_nodes)
        assert report.orphan_children
        fixed = r.verify(repair=True)
        assert fixed.repaired
        assert r.verify().ok
        assert_exact(r, ["beta", "gamma"])

    def test_interrupted_upsert_keeps_the_old_version_and_is_repaired(self) -> None:
        r = make()
        r.add_documents(corpus())
        old = r.invoke("Sentence 1 of alpha tells about topic 1.", k=1)
        longer = Document(text("alpha", 9).replace("topic", "subject"), id="alpha")
        interrupted(r, [longer], steps=4)  # the new generation's nodes written, no leaves
        report = r.verify()
        assert not report.ok
        assert all(k.startswith("alpha.g1/") for k in report.orphan_nodes)
        # the old version is still the one served, whole
        assert r.invoke("Sentence 1 of alpha tells about topic 1.", k=1) == old
        r.verify(repair=True)
        assert r.verify().ok
        assert_exact(r, ["alpha", "beta", "gamma"])
        assert r.add_documents([longer]).updated == ["alpha"]
        assert_exact(r, ["alpha", "beta", "gamma"])

    def test_lost_node_and_lost_vector_are_rebuilt_from_the_document(self) -> None:
        r = make()
        r.add_documents(corpus())
        keys, leaves = owned(r, "alpha")
        lost_node = sorted(k for k in keys if "/parent/" in k)[0]
        lost_leaf = sorted(leaves)[1]
        r.docstore.mdelete([lost_node])
        r.vectorstore.delete([lost_leaf])
        report = r.verify()
        assert report.missing_nodes == {"alpha": [lost_node]}
        assert report.missing_children == {"alpha": [lost_leaf]}
        fixed = r.verify(repair=True)
        assert fixed.rebuilt == ["alpha"]
        assert fixed.removed == []
        assert r.verify().ok
        assert_exact(r, ["alpha", "beta", "gamma"])
        # the rebuilt source is the same source: re-adding it changes nothing
        assert r.add_documents(corpus()).unchanged == ["alpha", "beta", "gamma"]

    def test_source_whose_text_is_lost_is_removed_and_reported(self) -> None:
        r = make()
        r.add_documents(corpus())
        r.docstore.mdelete(["beta/doc/0"])
        fixed = r.verify(repair=True)
        assert fixed.removed == ["beta"]
        assert r.verify().ok
        assert_exact(r, ["alpha", "gamma"])

    def test_orphan_vector_and_bad_manifest(self) -> None:
        r = make()
        r.add_documents(corpus())
        assert isinstance(r.vectorstore, FaissIndex)
        r.vectorstore.add_texts(["stray"], [{}], ids=["stray/child/0"])
        r.docstore.mset([("gamma/manifest", Document("", metadata={"counts": "x"}))])
        report = r.verify()
        assert report.bad_manifests == ["gamma/manifest"]
        assert {k.split("/")[0] for k in report.orphan_nodes} == {"gamma"}
        assert "stray/child/0" in report.orphan_children
        assert {k.split("/")[0] for k in report.orphan_children} == {"gamma", "stray"}
        r.verify(repair=True)
        assert r.verify().ok
        assert_exact(r, ["alpha", "beta"])

    def test_foreign_keys_are_counted_never_touched(self) -> None:
        store = InMemoryStore()
        store.mset([("user:data", Document("mine")), ("a/b", Document("also mine"))])
        r = make(docstore=store)
        r.add_documents(corpus())
        report = r.verify(repair=True)
        assert report.ok
        assert report.foreign_keys == 2
        assert store.mget(["user:data", "a/b"])[0] is not None

    def test_digests_find_a_changed_text_and_a_changed_node(self) -> None:
        r = make()
        r.add_documents(corpus())
        (doc,) = r.docstore.mget(["beta/doc/0"])
        assert doc is not None
        changed = doc.page_content.replace("topic 1.", "topic 7.")
        r.docstore.mset([("beta/doc/0", Document(changed, metadata=doc.metadata, id=doc.id))])
        node = sorted(k for k in owned(r, "gamma")[0] if "/parent/" in k)[0]
        (parent,) = r.docstore.mget([node])
        assert parent is not None
        r.docstore.mset([(node, Document(parent.page_content + "!", metadata=parent.metadata))])
        assert r.verify().ok  # without digests only presence is checked
        report = r.verify(digests=True)
        assert (report.bad_digests, report.bad_nodes) == (["beta"], {"gamma": [node]})
        fixed = r.verify(repair=True, digests=True)
        assert (fixed.removed, fixed.rebuilt) == (["beta"], ["gamma"])  # beta: its text is lost
        assert r.verify(digests=True).ok
        assert_exact(r, ["alpha", "gamma"])
        assert r.add_documents(corpus()[2:]).unchanged == ["gamma"]  # rebuilt as it was

    def test_digests_of_a_clean_index_and_of_foreign_keys(self) -> None:
        store = InMemoryStore()
        store.mset([("user:data", Document("mine"))])
        r = make(docstore=store)
        r.add_documents(corpus())
        report = r.verify(digests=True)
        assert (report.ok, report.bad_digests, report.bad_nodes) == (True, [], {})

    async def test_async_verify_and_repair(self) -> None:
        r = make(byte_store=InMemoryByteStore())
        await r.aadd_documents(corpus())
        r.docstore.mdelete(["alpha/child/0"])
        report = await r.averify(repair=True)
        assert report.rebuilt == ["alpha"]
        assert (await r.averify()).ok


class TestOtherChildIndexes:
    def test_verify_and_repair_with_in_memory_vector_store(self) -> None:
        from langchain_core.vectorstores import InMemoryVectorStore

        r = SmallToBigRetriever(
            vectorstore=InMemoryVectorStore(BagOfWords()),
            child_splitter=size_splitter(12),
            parent_splitter=section_splitter(60),
        )
        r.add_documents(corpus())
        _, leaves = owned(r, "beta")
        r.vectorstore.delete([sorted(leaves)[0]])
        r.vectorstore.add_texts(["stray"], ids=["stray/child/0"])
        report = r.verify()
        assert report.missing_children == {"beta": [sorted(leaves)[0]]}
        assert report.orphan_children == ["stray/child/0"]
        assert r.verify(repair=True).rebuilt == ["beta"]
        assert r.verify().ok
        assert (
            r.invoke("Sentence 1 of beta tells about topic 1.")[0].metadata["source_id"] == "beta"
        )


SEPARATOR = {"value": ". "}


def split_on_separator(text: str) -> list[str]:
    """A callable splitter whose behaviour depends on a global, not on its code."""
    return [part for part in text.split(SEPARATOR["value"]) if part]


def count_words(text: str) -> int:
    return len(text.split())


class TestChangedSplitterIsAChange:
    """Issue 11 C5: the fingerprint saw only the class name, chunk_size and chunk_overlap."""

    def _re_add(self, first: Any, second: Any) -> lifecycle.IndexingResult:
        store = InMemoryStore()
        index = FaissIndex(BagOfWords())
        doc = Document(text("alpha", 3), id="alpha")
        a = SmallToBigRetriever(vectorstore=index, docstore=store, levels=[Level("child", first)])
        a.add_documents([doc])
        b = SmallToBigRetriever(vectorstore=index, docstore=store, levels=[Level("child", second)])
        result = b.add_documents([doc])
        assert b.verify().ok
        return result

    def test_characters_to_tokens_of_the_same_class(self) -> None:
        chars = RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=0)
        words = RecursiveCharacterTextSplitter(
            chunk_size=100, chunk_overlap=0, length_function=count_words
        )
        assert self._re_add(chars, words).updated == ["alpha"]
        assert fingerprint(chars) != fingerprint(words)

    def test_two_callables(self) -> None:
        def by_sentence(t: str) -> list[str]:
            return t.split(". ")

        def by_paragraph(t: str) -> list[str]:
            return t.split("\n\n")

        assert self._re_add(by_sentence, by_paragraph).updated == ["alpha"]
        assert fingerprint(by_sentence) != fingerprint(by_paragraph)

    def test_other_settings_of_a_text_splitter(self) -> None:
        plain = RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=0)
        other = RecursiveCharacterTextSplitter(
            chunk_size=100, chunk_overlap=0, separators=["\n\n", "of"]
        )
        assert self._re_add(plain, other).updated == ["alpha"]

    def test_a_change_the_description_can_not_see_is_found_by_re_splitting(self) -> None:
        before = fingerprint(split_on_separator)
        store, index = InMemoryStore(), FaissIndex(BagOfWords())
        r = SmallToBigRetriever(
            vectorstore=index, docstore=store, levels=[Level("child", split_on_separator)]
        )
        doc = Document(text("alpha", 3), id="alpha")
        r.add_documents([doc])
        SEPARATOR["value"] = "\n\n"
        try:
            assert fingerprint(split_on_separator) == before  # same code, same closure
            assert r.add_documents([doc]).updated == ["alpha"]
            assert r.add_documents([doc]).unchanged == ["alpha"]
        finally:
            SEPARATOR["value"] = ". "

    def test_the_same_splitter_is_unchanged(self) -> None:
        first = RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=0)
        again = RecursiveCharacterTextSplitter(chunk_size=100, chunk_overlap=0)
        assert self._re_add(first, again).unchanged == ["alpha"]
        assert fingerprint(first) == fingerprint(again)


def fingerprint(splitter: Any) -> str:
    return lifecycle.Config([Level("child", splitter)]).fingerprint()


class TestStageThenCommit:
    """The embedding runs outside the write lock; the commit re-reads the manifests."""

    def test_a_write_in_between_is_built_upon(self) -> None:
        r = make()
        r.add_documents(corpus())
        config = r._lifecycle_config()
        v2 = Document(text("alpha", 2).replace("topic", "subject"), id="alpha")
        staged = r._io.drive(lifecycle.stage(config, [v2], None), locked=False)
        r.add_documents([Document(text("alpha", 4), id="alpha")])  # another writer, meanwhile
        result = r._io.drive(lifecycle.commit(config, staged), write=True)
        assert result.updated == ["alpha"]
        assert r.verify().ok
        assert_exact(r, ["alpha", "beta", "gamma"])
        (manifest,) = r.docstore.mget(["alpha/manifest"])
        assert manifest is not None
        assert manifest.metadata["generation"] == 2
        hit = r.invoke("Sentence 1 of alpha tells about subject 1.", k=1)[0]
        assert "subject" in hit.page_content
        assert r.add_documents([v2]).unchanged == ["alpha"]

    def test_the_same_write_in_between_makes_the_commit_a_no_op(self) -> None:
        r = make()
        r.add_documents(corpus())
        config = r._lifecycle_config()
        v2 = Document(text("alpha", 2), id="alpha")
        staged = r._io.drive(lifecycle.stage(config, [v2], None), locked=False)
        r.add_documents([v2])
        before = (doc_keys(r), child_keys(r))
        result = r._io.drive(lifecycle.commit(config, staged), write=True)
        assert result.unchanged == ["alpha"]
        assert result.updated == []
        assert (doc_keys(r), child_keys(r)) == before
        assert r.verify().ok
