"""Saves and loads of one path, overlapping: real threads and real processes (issue 28).

Every save writes a retriever that holds a marker document of its own, so a
load tells which save it read. Every load must return exactly the contents of
one save (its docstore, its vectors' keys, its lexical index), and every save
must return normally. No timing is asserted: the threads and processes run as
fast as they can, many rounds, and only what they return is checked.
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import section_splitter, size_splitter
from langchain_s2b.store.snapshots import persist

DIM = 16
State = tuple[Any, ...]


def emb() -> DeterministicFakeEmbedding:
    return DeterministicFakeEmbedding(size=DIM)


def build(marker: str) -> SmallToBigRetriever:
    """A hybrid retriever over two shared documents and one marker document of its own."""
    r = SmallToBigRetriever(
        vectorstore=FaissIndex(emb()),
        child_splitter=size_splitter(8),
        parent_splitter=section_splitter(40),
    )
    docs = [
        Document(f"# Shared {i}\n\nThe shared text {i}. It stays the same.", id=f"shared-{i}")
        for i in range(2)
    ]
    docs.append(
        Document(f"# Marker\n\nThis is the marker {marker}. Only one save has it.", id=marker)
    )
    r.add_documents(docs)
    r.invoke("marker")  # builds the lexical index, so that it is saved too
    return r


def state(r: SmallToBigRetriever) -> State:
    """What a save holds: docstore keys and texts, the vectors' keys, the lexical index's keys."""
    index = r.vectorstore
    assert isinstance(index, FaissIndex)
    keys = sorted(r.docstore.yield_keys())
    docs = r.docstore.mget(keys)
    lexical = index.built_lexical()
    return (
        tuple(
            (k, d.page_content if d is not None else None) for k, d in zip(keys, docs, strict=True)
        ),
        tuple(sorted(index.keys())),
        None if lexical is None else tuple(sorted(lexical.keys())),
    )


def snapshots(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name not in {"CURRENT", persist.LOCK_FILE})


def run_threads(targets: list[Callable[[], None]]) -> list[BaseException]:
    """Run each target in a thread of its own; the exceptions they raised."""
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


class TestThreads:
    def test_loads_beside_saves_each_read_one_whole_save(self, tmp_path: Path) -> None:
        """Issue 28: a load while another save finished failed as "damaged" (4 of 139)."""
        path = tmp_path / "idx"
        first = build("marker-first")
        first.save(path)
        savers, rounds = 3, 8
        retrievers = {
            f"marker-{s}-{i}": build(f"marker-{s}-{i}")
            for s in range(savers)
            for i in range(rounds)
        }
        saved = {state(first)} | {state(r) for r in retrievers.values()}
        assert len(saved) == 1 + savers * rounds  # every save is told apart by its marker
        done = threading.Event()
        loaded: list[State] = []

        def save_rounds(s: int) -> None:
            for i in range(rounds):
                assert retrievers[f"marker-{s}-{i}"].save(path).is_dir()

        def load_until_done() -> None:
            while not done.is_set() or len(loaded) < 40:
                loaded.append(state(SmallToBigRetriever.load(path, emb())))

        def savers_then_done() -> None:
            try:
                assert not run_threads([functools.partial(save_rounds, s) for s in range(savers)])
            finally:
                done.set()

        errors = run_threads([savers_then_done, load_until_done, load_until_done])
        assert errors == []
        assert len(loaded) >= 40
        assert [s for s in loaded if s not in saved] == []
        # the last save to finish is the current one; a later save removes every other snapshot
        final = build("marker-final")
        final.save(path)
        assert state(SmallToBigRetriever.load(path, emb())) == state(final)
        assert len(snapshots(path)) == 1

    def test_one_hybrid_retriever_saved_from_many_threads(self, tmp_path: Path) -> None:
        """Issue 28: overlapping saves of one hybrid retriever collided in tantivy (LockBusy)."""
        r = build("marker-one")
        expected = state(r)
        rounds, threads = 6, 4

        def save_rounds(t: int) -> None:
            for i in range(rounds):
                own = tmp_path / f"own-{t}-{i}"
                r.save(own)
                assert state(SmallToBigRetriever.load(own, emb())) == expected
                r.save(tmp_path / "shared")

        assert run_threads([functools.partial(save_rounds, t) for t in range(threads)]) == []
        assert state(SmallToBigRetriever.load(tmp_path / "shared", emb())) == expected
        loaded = SmallToBigRetriever.load(tmp_path / "own-0-0", emb())
        assert loaded.verify().ok
        assert [d.id for d in loaded.invoke("marker-one")] == [d.id for d in r.invoke("marker-one")]


# Processes (spawn: a fresh interpreter each) ---------------------------------------


def _save_in_process(path: str, markers: list[str], out: str) -> None:
    with open(out, "w", encoding="utf-8") as fh:
        try:
            for marker in markers:
                r = build(marker)
                r.save(path)
                fh.write(json.dumps(["saved", state(r)]) + "\n")
        except BaseException as err:
            fh.write(json.dumps(["error", f"save: {err!r}"]) + "\n")


def _load_in_process(path: str, least: int, done: Any, out: str) -> None:
    with open(out, "w", encoding="utf-8") as fh:
        try:
            count = 0
            while not done.is_set() or count < least:
                loaded = SmallToBigRetriever.load(path, emb())
                fh.write(json.dumps(["loaded", state(loaded)]) + "\n")
                count += 1
        except BaseException as err:
            fh.write(json.dumps(["error", f"load: {err!r}"]) + "\n")


class TestProcesses:
    def test_processes_save_and_load_one_path(self, tmp_path: Path) -> None:
        path = tmp_path / "idx"
        first = build("marker-first")
        first.save(path)
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Event()
        rounds = 6
        savers = [
            ctx.Process(
                target=_save_in_process,
                args=(str(path), [f"marker-p{p}-{i}" for i in range(rounds)], f"{tmp_path}/s{p}"),
            )
            for p in range(2)
        ]
        loaders = [
            ctx.Process(target=_load_in_process, args=(str(path), 10, done, f"{tmp_path}/l{p}"))
            for p in range(2)
        ]
        for proc in [*loaders, *savers]:
            proc.start()
        for proc in savers:
            proc.join()
        done.set()
        for proc in loaders:
            proc.join()
        assert [p.exitcode for p in [*savers, *loaders]] == [0, 0, 0, 0]
        got = [
            json.loads(line)
            for name in ("s0", "s1", "l0", "l1")
            for line in (tmp_path / name).read_text(encoding="utf-8").splitlines()
        ]
        assert [g for g in got if g[0] == "error"] == []
        saved = {_key(s) for kind, s in got if kind == "saved"} | {_key(state(first))}
        assert len(saved) == 1 + 2 * rounds
        loads = [_key(s) for kind, s in got if kind == "loaded"]
        assert len(loads) >= 20
        assert [s for s in loads if s not in saved] == []
        assert _key(state(SmallToBigRetriever.load(path, emb()))) in saved


def _key(value: Any) -> str:
    """A state as canonical JSON (what the processes wrote)."""
    return json.dumps(value)
