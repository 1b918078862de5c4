"""Readers and writers at once: no exception, no mixed versions, nothing lost."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_classic.storage import LocalFileStore
from langchain_core.documents import Document
from langchain_core.stores import InMemoryStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import section_splitter, size_splitter
from langchain_s2b.core.tree import build_tree
from langchain_s2b.store.runner import ReadWriteLock
from langchain_s2b.store.snapshots import persist

from ._embeddings import BagOfWords

READERS = 8
VERSIONS = 30
STABLE = 6
TAG = re.compile(r"\[v(\d+)\]")


def churn_text(version: int) -> str:
    """Version ``version`` of the churned source: its length changes with it."""
    paragraphs = [
        f"Churnword paragraph {p} [v{version}] says version {version}. "
        f"Second sentence of {p} [v{version}]."
        for p in range(1 + version % 4)
    ]
    return "\n\n".join(paragraphs)


def stable_doc(i: int) -> Document:
    return Document(f"Stableword{i} is about item {i}. It never changes.", id=f"stable-{i}")


class SlowStore(InMemoryStore):
    """An in-memory store with a network-like delay, so that races show."""

    def mget(self, keys: Sequence[str]) -> list[Any]:
        time.sleep(0.001)
        return super().mget(keys)

    def mset(self, key_value_pairs: Sequence[tuple[str, Any]]) -> None:
        time.sleep(0.001)
        super().mset(key_value_pairs)

    def mdelete(self, keys: Sequence[str]) -> None:
        time.sleep(0.001)
        super().mdelete(keys)


def make(**kwargs: object) -> SmallToBigRetriever:
    return SmallToBigRetriever(
        vectorstore=FaissIndex(BagOfWords()),
        child_splitter=size_splitter(8),
        parent_splitter=section_splitter(30),
        k=3,
        **kwargs,
    )


def leaf_spans(r: SmallToBigRetriever, version: int) -> set[tuple[int, int]]:
    tree = build_tree(churn_text(version), "churn", r._levels)
    return {(n.start, n.end) for n in tree.leaves}


def check_churn(result: Document, spans: dict[int, set[tuple[int, int]]]) -> str | None:
    """A problem with one result of the churned source, or ``None``."""
    meta = result.metadata
    version = meta["version"]
    tags = {int(t) for t in TAG.findall(result.page_content)}
    if tags != {version}:
        return f"text of versions {tags} under metadata version {version}"
    if churn_text(version)[meta["start"] : meta["end"]] != result.page_content:
        return f"span {meta['start']}:{meta['end']} is not version {version}'s text"
    for match in meta["matches"]:
        inside = meta["start"] <= match["start"] < match["end"] <= meta["end"]
        if not inside or (match["start"], match["end"]) not in spans[version]:
            return f"match {match} is not a child of version {version} inside the result"
    return None


def test_eight_readers_and_a_writer() -> None:
    r = make(docstore=SlowStore())
    r.add_documents([stable_doc(i) for i in range(STABLE)])
    r.add_documents([Document(churn_text(0), id="churn", metadata={"version": 0})])
    spans = {v: leaf_spans(r, v) for v in range(VERSIONS + 1)}
    problems: list[str] = []
    seen_versions: set[int] = set()
    reads = [0] * READERS
    done = threading.Event()

    def reader(n: int) -> None:
        i = 0
        try:
            while not done.is_set() or i < 5:
                i += 1
                target = (n + i) % STABLE
                found = r.invoke(f"stableword{target}")
                if f"stable-{target}" not in {d.metadata["source_id"] for d in found}:
                    problems.append(f"stable-{target} missing from {found}")
                budget = 40 + 20 * (i % 3)
                found = r.invoke("churnword paragraph version") + r.invoke(
                    "churnword paragraph version", max_tokens=budget
                )
                for result in found:
                    if result.metadata["source_id"] == "churn":
                        seen_versions.add(result.metadata["version"])
                        problem = check_churn(result, spans)
                        if problem:
                            problems.append(problem)
                reads[n] += 1
        except Exception as err:  # any exception fails the test below
            problems.append(f"reader {n}: {type(err).__name__}: {err}")

    def writer() -> None:
        try:
            for v in range(1, VERSIONS + 1):
                wait_for_reads(2 * v)  # interleave: some reads between two writes
                doc = Document(churn_text(v), id="churn", metadata={"version": v})
                if v % 5 == 0:
                    r.delete(["churn"])
                r.add_documents([doc])
                if v % 3 == 0:
                    r.add_documents([Document(f"Temporary {v} churnword.", id=f"tmp-{v}")])
                    r.delete([f"tmp-{v}"])
        except Exception as err:
            problems.append(f"writer: {type(err).__name__}: {err}")
        finally:
            done.set()

    def wait_for_reads(count: int) -> None:
        deadline = time.monotonic() + 10
        while sum(reads) < count and time.monotonic() < deadline:
            time.sleep(0.001)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread is stuck (deadlock?)"
    assert problems == []
    assert all(n >= 5 for n in reads)
    assert len(seen_versions) > 1  # readers really ran while versions changed
    # nothing lost, nothing left over
    report = r.verify()
    assert report.ok
    assert report.sources == STABLE + 1
    (latest,) = [d for d in r.invoke("churnword") if d.metadata["source_id"] == "churn"][:1]
    assert latest.metadata["version"] == VERSIONS
    for i in range(STABLE):
        assert r.invoke(f"stableword{i}")[0].metadata["source_id"] == f"stable-{i}"


def test_gather_100_ainvoke_on_a_sync_only_store(tmp_path: Path) -> None:
    r = make(byte_store=LocalFileStore(tmp_path))  # LocalFileStore has no native async
    r.add_documents([stable_doc(i) for i in range(STABLE)])
    queries = [f"stableword{i % STABLE} item {i}" for i in range(100)]
    expected = [[(d.id, d.page_content) for d in r.invoke(q)] for q in queries]

    async def main() -> list[list[Document]]:
        return await asyncio.gather(*(r.ainvoke(q) for q in queries))

    got = asyncio.run(main())
    assert [[(d.id, d.page_content) for d in docs] for docs in got] == expected
    for i, docs in enumerate(got):
        assert docs[0].metadata["source_id"] == f"stable-{i % STABLE}"


async def test_async_readers_with_an_async_writer(tmp_path: Path) -> None:
    r = make(byte_store=LocalFileStore(tmp_path))
    await r.aadd_documents([stable_doc(i) for i in range(STABLE)])
    spans = {v: leaf_spans(r, v) for v in range(11)}
    problems: list[str] = []

    async def writer() -> None:
        for v in range(1, 11):
            await r.aadd_documents([Document(churn_text(v), id="churn", metadata={"version": v})])

    async def reader() -> None:
        for _ in range(10):
            for result in await r.ainvoke("churnword paragraph version"):
                if result.metadata["source_id"] == "churn":
                    problem = check_churn(result, spans)
                    if problem:
                        problems.append(problem)

    await asyncio.wait_for(asyncio.gather(writer(), *(reader() for _ in range(READERS))), 60)
    assert problems == []
    assert (await r.averify()).ok


class BlockingEmbedding(BagOfWords):
    """Blocks ``embed_documents`` (a slow model) while ``block`` is set, until released."""

    def __init__(self) -> None:
        super().__init__()
        self.block = False
        self.started = threading.Event()
        self.release = threading.Event()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.block:
            self.started.set()
            self.release.wait(10)
        return super().embed_documents(texts)


class TestWritersAndLocks:
    """Issue 11 C10."""

    async def test_a_waiting_async_writer_holds_off_new_readers(self) -> None:
        lock = ReadWriteLock()
        assert lock.acquire_read()

        async def write() -> str:
            async with lock.ahold(write=True):
                return "wrote"

        task = asyncio.create_task(write())
        for _ in range(3):
            await asyncio.sleep(0)  # the writer starts and polls
        assert not task.done()
        assert lock.acquire_read(blocking=False) is False  # a new reader waits its turn
        lock.release_read()
        assert await asyncio.wait_for(task, 5) == "wrote"
        assert lock.acquire_read(blocking=False) is True
        lock.release_read()

    async def test_a_cancelled_async_writer_stops_holding_off_readers(self) -> None:
        lock = ReadWriteLock()
        assert lock.acquire_read()

        async def write() -> None:
            async with lock.ahold(write=True):
                pass

        task = asyncio.create_task(write())
        for _ in range(3):
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert lock.acquire_read(blocking=False) is True
        lock.release_read()
        lock.release_read()

    def test_a_query_does_not_wait_for_another_sources_embedding(self) -> None:
        emb = BlockingEmbedding()
        r = SmallToBigRetriever(
            vectorstore=FaissIndex(emb),
            child_splitter=size_splitter(8),
            parent_splitter=section_splitter(30),
            k=3,
        )
        r.add_documents([stable_doc(i) for i in range(STABLE)])
        expected = r.invoke("stableword1 item")
        emb.block = True
        new = Document("Freshword arrives. It is new.", id="fresh")
        writer = threading.Thread(target=r.add_documents, args=([new],))
        writer.start()
        assert emb.started.wait(10)
        got: list[list[Document]] = []
        reader = threading.Thread(target=lambda: got.append(r.invoke("stableword1 item")))
        reader.start()
        reader.join(timeout=5)
        answered_while_embedding = not reader.is_alive()
        emb.release.set()
        writer.join(10)
        reader.join(10)
        assert answered_while_embedding
        assert got == [expected]
        assert r.invoke("freshword", k=1)[0].metadata["source_id"] == "fresh"
        assert r.verify().ok

    def test_two_saves_to_one_path_both_succeed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        r = make()
        r.add_documents([stable_doc(i) for i in range(STABLE)])
        path = tmp_path / "idx"
        entered, go = threading.Event(), threading.Event()
        real = persist.write_nodes
        calls = 0

        def paused(store: Any, file: Path) -> int:
            nonlocal calls
            calls += 1
            if calls == 1:  # the first save stops half-way through its snapshot
                entered.set()
                go.wait(10)
            return real(store, file)

        monkeypatch.setattr(persist, "write_nodes", paused)
        errors: list[BaseException] = []

        def save() -> None:
            try:
                r.save(path)
            except BaseException as err:
                errors.append(err)

        first = threading.Thread(target=save)
        first.start()
        assert entered.wait(10)
        second = threading.Thread(target=save)
        second.start()
        second.join(timeout=1)  # with the lock it waits for the first save
        go.set()
        first.join(30)
        second.join(30)
        assert errors == []
        assert calls == 2
        snapshots = [p.name for p in path.iterdir() if p.name.startswith("snapshot-")]
        assert len(snapshots) == 1
        assert (path / "CURRENT").read_text().strip() == snapshots[0]
        loaded = SmallToBigRetriever.load(path, BagOfWords())
        assert loaded.invoke("stableword2 item") == r.invoke("stableword2 item")
