"""A stateful test of one save path: saves with injected faults, loads, and loads held open.

The model is the state of the last save that took effect (its retriever's
documents, leaves, lexical keys and answers). Rules change the retriever
(add or replace a source, delete one), save it with a fault injected at one
step of the save, load the path, hold a load open (``persist.reading``, what
``load`` holds while it reads) and release one, and load with a fault
injected while the snapshot is read.

Faults (an ``OSError`` such as a full disk, or Ctrl-C: ``KeyboardInterrupt``):

- in a save: writing the FAISS index, the lexical index's files, the nodes,
  ``s2b.json``, the switch of ``CURRENT``, and the removal of an old snapshot
  after the switch;
- in a load: reading the nodes (the snapshot is held at that moment).

Invariants after every step:

- a load returns exactly the model: a failed save left the previous save or
  its own, whole (before the switch: the previous one; after it: its own);
- every snapshot a held load holds is still there, whole;
- after a save that took effect, the path holds the current snapshot and the
  held ones only: a failed load released its hold, a released one is removed
  by the next save.

CI (``CI=true``) runs 60 sequences of 12 steps.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.splitters import section_splitter, size_splitter
from langchain_s2b.store.lexical import lexical_index
from langchain_s2b.store.nodes import node_store
from langchain_s2b.store.snapshots import folder, persist
from langchain_s2b.store.vectors import faiss_index

CI = os.environ.get("CI", "").lower() == "true"
SEQUENCES = 60 if CI else 8
STEPS = 12 if CI else 10
DIM = 16
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]


def emb() -> DeterministicFakeEmbedding:
    return DeterministicFakeEmbedding(size=DIM)


def state(r: SmallToBigRetriever) -> Any:
    index = r.vectorstore
    assert isinstance(index, FaissIndex)
    keys = sorted(r.docstore.yield_keys())
    docs = r.docstore.mget(keys)
    nodes = tuple(
        (k, None if d is None else d.page_content) for k, d in zip(keys, docs, strict=True)
    )
    lexical = index.built_lexical()
    answers = tuple(tuple(d.id for d in r.invoke(w)) for w in WORDS[:3])
    return (
        nodes,
        tuple(sorted(index.keys())),
        None if lexical is None else tuple(sorted(lexical.keys())),
        answers,
    )


class InjectedError(OSError):
    """The injected failure (a full disk)."""


class InjectedInterrupt(KeyboardInterrupt):
    """The injected Ctrl-C."""


SAVE_STEPS: dict[str, tuple[Any, str]] = {
    "faiss": (faiss_index.FaissIndex, "save"),
    "lexical": (lexical_index.LexicalIndex, "save"),
    "nodes": (persist, "write_nodes"),
    "config": (persist, "write_json"),
    "pointer": (persist, "write_text_atomic"),
    "remove old": (folder, "_remove_unread"),
}
AFTER_SWITCH = {"remove old"}


@contextlib.contextmanager
def fault(owner: Any, name: str, error: type[BaseException]) -> Iterator[list[bool]]:
    """``owner.name`` raises ``error`` the first time it is called (after it ran, for removal).

    Yields a list that holds ``True`` once the fault fired.
    """
    original = getattr(owner, name)
    fired: list[bool] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        setattr(owner, name, original)
        fired.append(True)
        if name == "_remove_unread":
            original(*args, **kwargs)  # half way through the removals
        raise error("injected")

    setattr(owner, name, failing)
    try:
        yield fired
    finally:
        setattr(owner, name, original)


class SaveLoadMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="s2b-machine-"))
        self.path = self.dir / "idx"
        self.retriever = SmallToBigRetriever(
            vectorstore=FaissIndex(emb()),
            child_splitter=size_splitter(6),
            parent_splitter=section_splitter(30),
        )
        self.saved: Any = None
        """The state of the save in effect (``None``: nothing saved yet)."""
        self.held: list[tuple[contextlib.ExitStack, Path, Any]] = []
        """Loads held open: the hold, its snapshot, the state saved in it."""

    def teardown(self) -> None:
        for stack, _, _ in self.held:
            stack.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # Changing the retriever -------------------------------------------------------

    @rule(source=st.integers(0, 3), words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
    def add(self, source: int, words: list[str]) -> None:
        text = f"# Source {source}\n\n" + " ".join(words) + ".\n\nMore of " + words[0] + "."
        self.retriever.add_documents([Document(text, id=f"src-{source}")])

    @rule(source=st.integers(0, 3))
    def delete(self, source: int) -> None:
        self.retriever.delete([f"src-{source}"])

    # Saving -----------------------------------------------------------------------

    @rule(
        step=st.none() | st.sampled_from(sorted(SAVE_STEPS)),
        interrupt=st.booleans(),
    )
    def save(self, step: str | None, interrupt: bool) -> None:
        now = state(self.retriever)
        if step is None:
            self.retriever.save(self.path)
            self._took_effect(now)
            return
        owner, name = SAVE_STEPS[step]
        error: type[BaseException] = InjectedInterrupt if interrupt else InjectedError
        try:
            with fault(owner, name, error) as fired:
                self.retriever.save(self.path)
        except error:
            assert fired  # nothing else failed
        else:
            assert not fired  # the step was not reached (no old snapshot to remove)
            self._took_effect(now)
            return
        if step in AFTER_SWITCH:
            self.saved = now  # the switch was made: the new save is in effect
        assert self._load() == self.saved  # before the switch: the previous save, whole

    def _took_effect(self, now: Any) -> None:
        self.saved = now
        current = persist.current_snapshot(self.path)
        kept = {current.name} | {snap.name for _, snap, _ in self.held}
        assert self._snapshots() == kept  # every other snapshot was removed

    def _snapshots(self) -> set[str]:
        return {p.name for p in self.path.iterdir() if p.name.startswith("snapshot-")}

    def _load(self) -> Any:
        if self.saved is None:
            return None  # nothing was saved: the path is no save (or not there)
        return state(SmallToBigRetriever.load(self.path, emb()))

    # Loading ----------------------------------------------------------------------

    @precondition(lambda self: self.saved is not None)
    @rule()
    def load(self) -> None:
        assert self._load() == self.saved

    @precondition(lambda self: self.saved is not None)
    @rule(interrupt=st.booleans())
    def load_fails_while_it_reads(self, interrupt: bool) -> None:
        error: type[BaseException] = InjectedInterrupt if interrupt else InjectedError
        with pytest.raises(error), fault(node_store.NodeStore, "read", error):
            SmallToBigRetriever.load(self.path, emb())

    @precondition(lambda self: self.saved is not None and len(self.held) < 3)
    @rule()
    def hold(self) -> None:
        stack = contextlib.ExitStack()
        snap = stack.enter_context(persist.reading(self.path))
        self.held.append((stack, snap, self.saved))

    @precondition(lambda self: bool(self.held))
    @rule(which=st.integers(0, 2))
    def release(self, which: int) -> None:
        stack, _, _ = self.held.pop(which % len(self.held))
        stack.close()

    @invariant()
    def held_snapshots_are_whole(self) -> None:
        for _, snap, _ in self.held:
            assert (snap / persist.CONFIG_FILE).is_file()
            assert (snap / persist.READERS_FILE).is_file()

    @invariant()
    def the_path_loads_the_save_in_effect(self) -> None:
        if self.saved is not None:
            assert self._load() == self.saved


MACHINE_SETTINGS = settings(
    max_examples=SEQUENCES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

TestSaveLoadMachine = SaveLoadMachine.TestCase
TestSaveLoadMachine.settings = MACHINE_SETTINGS


def test_a_held_snapshot_outlives_saves_and_goes_with_the_next_one(tmp_path: Path) -> None:
    """The reader protocol step by step: held while read, removed by the save after release."""
    path = tmp_path / "idx"
    r = SmallToBigRetriever(vectorstore=FaissIndex(emb()), child_splitter=size_splitter(6))
    r.add_documents([Document("alpha bravo.", id="one")])
    r.save(path)
    with persist.reading(path) as held:
        r.add_documents([Document("charlie delta.", id="two")])
        r.save(path)
        r.save(path)
        assert held.is_dir()
        assert persist.current_snapshot(path) != held
        assert len([p for p in path.iterdir() if p.name.startswith("snapshot-")]) == 2
    r.save(path)
    assert [p.name for p in path.iterdir() if p.name.startswith("snapshot-")] == [
        persist.current_snapshot(path).name
    ]
    assert not held.exists()
