"""save/load: round trips, crafted files, version and dimension checks, atomicity."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pytest
import xxhash
from langchain_classic.storage import LocalFileStore
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.stores import InMemoryByteStore, InMemoryStore

from langchain_s2b import (
    FaissIndex,
    Level,
    SentenceSplitter,
    SmallToBigRetriever,
)
from langchain_s2b.core.splitters import paragraph_splitter, section_splitter, size_splitter
from langchain_s2b.store.nodes.codec import encode_document
from langchain_s2b.store.nodes.node_store import NodeStore
from langchain_s2b.store.snapshots import persist

DIM = 32
REPO = Path(__file__).resolve().parents[2]


def emb(size: int = DIM) -> DeterministicFakeEmbedding:
    return DeterministicFakeEmbedding(size=size)


def corpus(tag: str = "v1") -> list[Document]:
    return [
        Document(
            f"# Part {i}\n\nThe {tag} text of part {i}. It has two sentences.\n\n"
            f"Another paragraph {i} in {tag}. More words here.",
            id=f"doc-{i}",
            metadata={"tag": tag, "n": i},
        )
        for i in range(6)
    ]


def build(**kwargs: Any) -> SmallToBigRetriever:
    kwargs.setdefault("child_splitter", size_splitter(8))
    kwargs.setdefault("parent_splitter", section_splitter(40))
    r = SmallToBigRetriever(vectorstore=FaissIndex(emb()), **kwargs)
    r.add_documents(corpus())
    return r


QUERIES = ["The v1 text of part 3.", "Another paragraph 1 in v1.", "More words here."]


def answers(r: SmallToBigRetriever) -> list[list[tuple[str, str, float]]]:
    return [
        [(d.id or "", d.page_content, round(d.metadata["score"], 5)) for d in r.invoke(q)]
        for q in QUERIES
    ]


def snapshot(path: Path) -> Path:
    return persist.current_snapshot(path)


def reseal(snap: Path) -> None:
    """Recompute the checksums in s2b.json, as an attacker editing files would."""
    meta = json.loads((snap / "s2b.json").read_text())
    for name in meta["files"]:
        if (snap / name).is_file():
            meta["files"][name] = hashlib.sha256((snap / name).read_bytes()).hexdigest()
    (snap / "s2b.json").write_text(json.dumps(meta))


def edit_config(snap: Path, change: Any) -> None:
    meta = json.loads((snap / "s2b.json").read_text())
    change(meta)
    (snap / "s2b.json").write_text(json.dumps(meta))


class TestRoundTrip:
    def test_parent_mode_round_trip(self, tmp_path: Path) -> None:
        r = build(k=3, fetch_k=7)
        r.save(tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert answers(loaded) == answers(r)
        assert (loaded.mode, loaded.k, loaded.fetch_k) == ("parent", 3, 7)
        assert [lv.name for lv in loaded._levels] == ["child", "parent"]
        assert loaded.add_documents(corpus()).unchanged == [d.id for d in corpus()]
        assert loaded.verify().ok

    def test_window_mode_round_trip_with_byte_store(self, tmp_path: Path) -> None:
        r = build(mode="window", window_size=1, byte_store=InMemoryByteStore(), child_splitter=None)
        r.save(tmp_path / "idx")
        meta = json.loads((snapshot(tmp_path / "idx") / "s2b.json").read_text())
        assert meta["docstore"]["kind"] == "memory-bytes"
        assert meta["levels"] == [  # window mode's tree carries the ladder (issue 32)
            {"name": "sentence", "splitter": {"kind": "sentence", "max_tokens": 200}},
            {
                "name": "paragraph",
                "splitter": {
                    "kind": "block",
                    "boundary": "paragraph",
                    "chunk_size": 400,
                    "pack": False,
                },
            },
            {"name": "section", "splitter": {"kind": "section", "chunk_size": 1200}},
        ]
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert isinstance(loaded.byte_store, InMemoryByteStore)
        assert (loaded.mode, loaded.window_size) == ("window", 1)
        assert answers(loaded) == answers(r)

    def test_all_builtin_splitters_are_rebuilt(self, tmp_path: Path) -> None:
        levels = [
            Level("sentence", SentenceSplitter(50)),
            Level("paragraph", paragraph_splitter(100)),
            Level("section", section_splitter(300)),
        ]
        r = build(mode="multilevel", levels=levels)
        r.save(tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        got = [persist.describe_splitter(lv) for lv in loaded._levels]
        assert got == [persist.describe_splitter(lv) for lv in levels]
        assert loaded.add_documents(corpus()).unchanged == [d.id for d in corpus()]

    def test_overrides_at_load(self, tmp_path: Path) -> None:
        build().save(tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb(), k=1)
        assert loaded.k == 1
        assert len(loaded.invoke(QUERIES[0])) == 1

    def test_empty_retriever(self, tmp_path: Path) -> None:
        SmallToBigRetriever(vectorstore=FaissIndex(emb())).save(tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert loaded.invoke("anything") == []
        loaded.add_documents(corpus())
        assert loaded.invoke(QUERIES[0])

    def test_resave_replaces_and_cleans(self, tmp_path: Path) -> None:
        r = build()
        r.save(tmp_path / "idx")
        r.add_documents(corpus("v2"))
        r.save(tmp_path / "idx")
        names = sorted(p.name for p in (tmp_path / "idx").iterdir())
        assert len(names) == 3
        assert names[:2] == [persist.LOCK_FILE, "CURRENT"]
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert answers(loaded) == answers(r)


class TestStores:
    def test_file_store_is_not_copied_and_must_be_passed(self, tmp_path: Path) -> None:
        store = LocalFileStore(tmp_path / "nodes")
        r = build(byte_store=store)
        r.save(tmp_path / "idx")
        assert not (snapshot(tmp_path / "idx") / "nodes.npz").exists()
        with pytest.raises(ValueError, match="did not copy its docstore"):
            SmallToBigRetriever.load(tmp_path / "idx", emb())
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb(), byte_store=store)
        assert answers(loaded) == answers(r)

    def test_include_docstore_copies_an_external_store(self, tmp_path: Path) -> None:
        r = build(byte_store=LocalFileStore(tmp_path / "nodes"))
        r.save(tmp_path / "idx", include_docstore=True)
        target = InMemoryStore()
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb(), docstore=target)
        assert answers(loaded) == answers(r)
        assert sorted(target.yield_keys()) == sorted(r.docstore.yield_keys())

    def test_both_stores_is_an_error(self, tmp_path: Path) -> None:
        build().save(tmp_path / "idx")
        with pytest.raises(ValueError, match="not both"):
            SmallToBigRetriever.load(
                tmp_path / "idx", emb(), docstore=InMemoryStore(), byte_store=InMemoryByteStore()
            )


class TestRefusals:
    def test_dimension_mismatch(self, tmp_path: Path) -> None:
        build().save(tmp_path / "idx")
        with pytest.raises(ValueError, match=r"32-dimensional.*returns 16-dimensional"):
            SmallToBigRetriever.load(tmp_path / "idx", emb(16))

    def test_format_version_mismatch(self, tmp_path: Path) -> None:
        build().save(tmp_path / "idx")
        edit_config(snapshot(tmp_path / "idx"), lambda m: m.update(format_version=4))
        with pytest.raises(
            ValueError, match=r"format version 4; this langchain_s2b reads versions \[1, 2, 3\]"
        ):
            SmallToBigRetriever.load(tmp_path / "idx", emb())

    def test_custom_splitter_must_be_passed_again(self, tmp_path: Path) -> None:
        def by_line(text: str) -> list[str]:
            return text.split("\n")

        r = build(parent_splitter=by_line)
        r.save(tmp_path / "idx")
        with pytest.raises(ValueError, match=r"custom splitter.*splitters=\{'parent'"):
            SmallToBigRetriever.load(tmp_path / "idx", emb())
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb(), splitters={"parent": by_line})
        assert answers(loaded) == answers(r)

    def test_a_different_custom_splitter_warns_on_load(self, tmp_path: Path) -> None:
        """Issue 11 C5: two callables had the same fingerprint, so no warning came."""

        def by_line(text: str) -> list[str]:
            return text.split("\n")

        def by_blank_line(text: str) -> list[str]:
            return text.split("\n\n")

        build(parent_splitter=by_line).save(tmp_path / "idx")
        with pytest.warns(UserWarning, match="differ from the saved ones"):
            SmallToBigRetriever.load(tmp_path / "idx", emb(), splitters={"parent": by_blank_line})
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb(), splitters={"parent": by_line})
        assert loaded.add_documents(corpus()).unchanged == [f"doc-{i}" for i in range(6)]

    def test_unsaveable_option(self, tmp_path: Path) -> None:
        r = build(search_kwargs={"filter": lambda meta: True})
        with pytest.raises(ValueError, match=r"search_kwargs=.*pass search_kwargs=\.\.\. to load"):
            r.save(tmp_path / "idx")
        assert not (tmp_path / "idx").exists() or not any((tmp_path / "idx").iterdir())

    def test_refuses_a_foreign_directory_and_a_file(self, tmp_path: Path) -> None:
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "precious.txt").write_text("keep me")
        with pytest.raises(ValueError, match="not empty and not an earlier"):
            build().save(tmp_path / "other")
        (tmp_path / "file").write_text("x")
        with pytest.raises(ValueError, match="is a file"):
            build().save(tmp_path / "file")
        with pytest.raises(ValueError, match="CURRENT is missing"):
            SmallToBigRetriever.load(tmp_path / "other", emb())


EVIL = "cposix\nsystem\n(S'touch {marker}'\ntR."
"""A classic pickle payload: unpickling it runs ``touch``."""


def _evil(marker: Path) -> bytes:
    return EVIL.format(marker=marker).encode()


def _faiss_bytes(dim: int, rows: list[int]) -> bytes:
    index = faiss.IndexIDMap2(faiss.index_factory(dim, "Flat", faiss.METRIC_INNER_PRODUCT))
    vectors = np.ones((len(rows), dim), dtype=np.float32)
    index.add_with_ids(vectors, np.asarray(rows, dtype=np.int64))
    return bytes(faiss.serialize_index(index))


def _npz(snap: Path, name: str) -> dict[str, np.ndarray]:
    with np.load(snap / name) as arrays:
        return {key: arrays[key] for key in arrays.files}


def _edit_npz(snap: Path, name: str, change: Callable[[dict[str, np.ndarray]], Any]) -> None:
    arrays = _npz(snap, name)
    change(arrays)
    np.savez(snap / name, **arrays)


def _rows(snap: Path) -> list[int]:
    return [int(r) for r in _npz(snap, "records.npz")["rows"]]


def _edit_header(snap: Path, **change: Any) -> None:
    header = json.loads((snap / "children.json").read_text())
    (snap / "children.json").write_text(json.dumps({**header, **change}))


CRAFTED: dict[str, Callable[[Path, Path], Any]] = {
    "pickle as faiss": lambda snap, m: (snap / "children.faiss").write_bytes(_evil(m)),
    "pickle as config": lambda snap, m: (snap / "s2b.json").write_bytes(_evil(m)),
    "pickle as records": lambda snap, m: (snap / "records.npz").write_bytes(_evil(m)),
    "pickle as nodes": lambda snap, m: (snap / "nodes.npz").write_bytes(_evil(m)),
    "pickle as pointer": lambda snap, m: (snap.parent / "CURRENT").write_bytes(_evil(m)),
    "pointer escapes": lambda snap, m: (snap.parent / "CURRENT").write_text("../../etc\n"),
    "object array in records": lambda snap, m: _edit_npz(
        snap, "records.npz", lambda a: a.update(rows=np.asarray([{"x": 1}] * len(a["rows"])))
    ),
    "faiss of wrong dimension": lambda snap, m: (snap / "children.faiss").write_bytes(
        _faiss_bytes(8, _rows(snap))
    ),
    "faiss of another type": lambda snap, m: (snap / "children.faiss").write_bytes(
        bytes(faiss.serialize_index(faiss.IndexFlatIP(DIM)))
    ),
    "faiss with other ids": lambda snap, m: (snap / "children.faiss").write_bytes(
        _faiss_bytes(DIM, [r + 1000 for r in _rows(snap)])
    ),
    "dim is a string": lambda snap, m: edit_config(snap, lambda c: c["embedding"].update(dim="32")),
    "levels not a list": lambda snap, m: edit_config(snap, lambda c: c.update(levels="child")),
    "docstore kind unknown": lambda snap, m: edit_config(
        snap, lambda c: c["docstore"].update(kind="pickle")
    ),
    "option of wrong type": lambda snap, m: edit_config(
        snap, lambda c: c["retriever"].update(k="many")
    ),
    "unknown option": lambda snap, m: edit_config(snap, lambda c: c["retriever"].update(evil=1)),
    "splitter size negative": lambda snap, m: edit_config(
        snap, lambda c: c["levels"][0]["splitter"].update(chunk_size=-1)
    ),
    "unexpected file listed": lambda snap, m: edit_config(
        snap, lambda c: c["files"].update({"../../x": "0"})
    ),
    "record row a string": lambda snap, m: _edit_npz(
        snap, "records.npz", lambda a: a.update(rows=np.asarray(["x"] * len(a["rows"])))
    ),
    "record row past next": lambda snap, m: _edit_header(snap, next=0),
    "factory and a newline": lambda snap, m: _edit_header(
        snap, factory=json.loads((snap / "children.json").read_text())["factory"] + "\n"
    ),
    "record shape not pairs": lambda snap, m: (snap / "records.shapes.jsonl").write_text(
        '{"a": 1}\n'
    ),
    "record count off": lambda snap, m: _edit_header(snap, count=len(_rows(snap)) + 1),
    "duplicate record key": lambda snap, m: _edit_npz(
        snap, "records.npz", lambda a: a["split"].__setitem__(1, a["split"][0])
    ),
    "record text cut short": lambda snap, m: (snap / "records.utf8").write_bytes(
        (snap / "records.utf8").read_bytes()[:-1]
    ),
    "node value not a document": lambda snap, m: (snap / "nodes.other.jsonl").write_text(
        '"a/child/0"\t{"v": 1, "page_content": 5, "metadata": {}}\n'
    ),
    "node line without a key": lambda snap, m: (snap / "nodes.other.jsonl").write_text(
        '{"key": "a/child/0", "doc": {}}\n'
    ),
    "node span outside its text": lambda snap, m: _edit_npz(
        snap, "nodes.npz", lambda a: a["bend"].__setitem__(0, 10**9)
    ),
    "node names a missing shape": lambda snap, m: _edit_npz(
        snap, "nodes.npz", lambda a: a["shape"].__setitem__(0, 10**6)
    ),
    "node twice": lambda snap, m: _edit_npz(
        snap, "nodes.npz", lambda a: a["split"].__setitem__(1, a["split"][0])
    ),
}


DEEP_JSON = "[" * 100_000 + "]" * 100_000
"""Valid JSON nested deeper than Python's parser goes (a ``RecursionError`` there)."""


def _npy(shape: tuple[int, ...], dtype: str, data: bytes) -> bytes:
    """A ``.npy`` member whose header claims ``shape`` whatever ``data`` holds."""
    out = io.BytesIO()
    header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(out, header)  # the magic string, then the header
    return out.getvalue() + data


def _zip_member(
    snap: Path, name: str, member: str, payload: bytes, *, deflate: bool = False
) -> None:
    """Replace one member of an ``.npz`` file by ``payload``."""
    file = snap / name
    with zipfile.ZipFile(file) as old:
        members = {info.filename: old.read(info) for info in old.infolist()}
    members[member] = payload
    mode = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
    with zipfile.ZipFile(file, "w", compression=mode) as new:
        for member_name, data in members.items():
            new.writestr(member_name, data)


def _npy_file(file: Path) -> None:
    with file.open("wb") as out:
        np.save(out, np.arange(3), allow_pickle=False)


def _faiss_patch(snap: Path, offset: int, value: int) -> None:
    """Write a 64-bit number into ``children.faiss`` at ``offset``."""
    data = bytearray((snap / "children.faiss").read_bytes())
    data[offset : offset + 8] = value.to_bytes(8, "little")
    (snap / "children.faiss").write_bytes(bytes(data))


_FLAT_CODES = 2 * 37
"""Where an IndexIDMap2 over a flat index stores the size of its codes (two headers in)."""


def _segment_file(snap: Path, suffix: str) -> Path:
    (found,) = (snap / "lexical").glob(f"*{suffix}")
    return found


def _flip_segment_byte(
    snap: Path, suffix: str, *, crc: bool, at: Callable[[int], int] = lambda body: body // 2
) -> None:
    """Flip a byte inside a tantivy segment file (``crc``: and write its footer's CRC again)."""
    file = _segment_file(snap, suffix)
    data = bytearray(file.read_bytes())
    length = int.from_bytes(data[-8:-4], "little")
    body = len(data) - 8 - length
    data[at(body)] ^= 0xFF
    if crc:
        footer = json.loads(data[body:-8])
        footer["crc"] = zlib.crc32(bytes(data[:body]))
        raw = json.dumps(footer).encode()
        data = data[:body] + raw + len(raw).to_bytes(4, "little") + data[-4:]
    file.write_bytes(bytes(data))


def _edit_tantivy_meta(snap: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    meta = json.loads((snap / "lexical" / "meta.json").read_text())
    change(meta)
    (snap / "lexical" / "meta.json").write_text(json.dumps(meta))


def _hybrid_snap(snap: Path) -> None:
    if not (snap / "lexical").is_dir():
        pytest.skip("this save has no lexical index")


CRAFTED_28: dict[str, Callable[[Path, Path], Any]] = {
    "one huge split id in records": lambda snap, m: _edit_npz(
        snap, "records.npz", lambda a: a["split"].__setitem__(0, 10**12)
    ),
    "one huge split id in nodes": lambda snap, m: _edit_npz(
        snap, "nodes.npz", lambda a: a["split"].__setitem__(0, 10**12)
    ),
    "one huge row id and next": lambda snap, m: (
        _edit_npz(snap, "records.npz", lambda a: a["rows"].__setitem__(-1, 10**12)),
        _edit_header(snap, next=10**12 + 1),
    ),
    "records array claims a terabyte": lambda snap, m: _zip_member(
        snap, "records.npz", "split.npy", _npy((1 << 40,), "<i8", b"\0" * 64)
    ),
    "nodes array claims a terabyte": lambda snap, m: _zip_member(
        snap, "nodes.npz", "start.npy", _npy((1 << 40,), "<i8", b"\0" * 64)
    ),
    "records is one array, not a zip": lambda snap, m: _npy_file(snap / "records.npz"),
    "records zip cut short": lambda snap, m: (snap / "records.npz").write_bytes(
        (snap / "records.npz").read_bytes()[:-40]
    ),
    "nodes member fails its CRC": lambda snap, m: (snap / "nodes.npz").write_bytes(
        (snap / "nodes.npz").read_bytes().replace(b"shape.npy", b"shapX.npy", 1)
    ),
    "faiss codes claim half a terabyte": lambda snap, m: _faiss_patch(snap, _FLAT_CODES, 1 << 37),
    "config a deep JSON": lambda snap, m: (snap / "s2b.json").write_text(DEEP_JSON),
    "header a deep JSON": lambda snap, m: (snap / "children.json").write_text(DEEP_JSON),
    "record keys a deep JSON": lambda snap, m: (snap / "records.keys.jsonl").write_text(
        DEEP_JSON + "\n"
    ),
    "record groups a deep JSON": lambda snap, m: (snap / "records.groups.json").write_text(
        DEEP_JSON
    ),
    "node names a deep JSON": lambda snap, m: (snap / "nodes.names.json").write_text(DEEP_JSON),
    "node line a deep JSON": lambda snap, m: (snap / "nodes.other.jsonl").write_text(
        '"a/manifest"\t' + DEEP_JSON + "\n"
    ),
    "node sources listed twice": lambda snap, m: (snap / "nodes.names.json").write_text(
        json.dumps(
            {**json.loads((snap / "nodes.names.json").read_text()), "sources": ["doc-0"] * 6}
        )
    ),
    "a manifest names four trillion nodes": lambda snap, m: _edit_lines(
        snap,
        "nodes.other.jsonl",
        lambda line: re.sub(r'"child": [0-9]+\}', '"child": 4000000000000}', line),
    ),
    "config without embedding.dim": lambda snap, m: edit_config(
        snap, lambda c: c["embedding"].pop("dim")
    ),
    "version 1 named, version 2 files": lambda snap, m: edit_config(
        snap, lambda c: c.update(format_version=1)
    ),
    "lexical segment damaged": lambda snap, m: _flip_segment_byte(snap, ".store", crc=False),
    "lexical fast field damaged, its CRC written again": lambda snap, m: _flip_segment_byte(
        snap, ".fast", crc=True, at=lambda body: body // 3
    ),
    "lexical meta claims a billion documents": lambda snap, m: _edit_tantivy_meta(
        snap, lambda meta: meta["segments"][0].update(max_doc=10**9)
    ),
    "lexical meta of another schema": lambda snap, m: _edit_tantivy_meta(
        snap, lambda meta: meta["schema"][2]["options"]["indexing"].update(tokenizer="default")
    ),
}
"""Issue 28: crafted files that made load() allocate terabytes, raise something other than a
``ValueError`` (``MemoryError``, ``BadZipFile``, ``RecursionError``, ``FileNotFoundError``,
tantivy's ``PanicException``), or accept a damaged index."""

CRAFTED_MORE: dict[str, Callable[[Path, Path], Any]] = {
    "records array compressed": lambda snap, m: _zip_member(
        snap, "records.npz", "end.npy", _npy((4,), "<i8", b"\0" * 32), deflate=True
    ),
    "faiss id map claims more ids": lambda snap, m: _faiss_patch(
        snap, (snap / "children.faiss").stat().st_size - 8 * (len(_rows(snap)) + 1), 1 << 40
    ),
    "faiss header claims more vectors": lambda snap, m: _faiss_patch(snap, 8, 1 << 40),
    "config nested too deep": lambda snap, m: edit_config(
        snap, lambda c: c.update(retriever=json.loads("[" * 500 + "]" * 500))
    ),
    "lexical segment without a footer": lambda snap, m: _segment_file(snap, ".term").write_bytes(
        _segment_file(snap, ".term").read_bytes()[:-30]
    ),
    "lexical meta a deep JSON": lambda snap, m: (snap / "lexical" / "meta.json").write_text(
        DEEP_JSON
    ),
}
"""Crafted files that FAISS, numpy or tantivy refused already (checked, not regressions)."""


def save_v1(r: SmallToBigRetriever, path: Path) -> Path:
    """A save of format version 1, as langchain_s2b wrote it before columns (one JSON per line)."""
    r.save(path)
    snap = snapshot(path)
    meta = json.loads((snap / "s2b.json").read_text())
    for name in [n for n in meta["files"] if n != "children.faiss" and "/" not in n]:
        (snap / name).unlink()
        del meta["files"][name]
    index = r.vectorstore
    assert isinstance(index, FaissIndex)
    header = {
        "format": "langchain_s2b.faiss.v1", "dim": index.dim, "factory": index.index_factory,
        "next": index._next_id, "count": len(index), "staged": False, "search_params": None,
        "train_size": None,
    }  # fmt: skip
    keys = sorted(index.keys())
    lines = [header] + [
        {"row": index._ids[d.id], "key": d.id, "text": d.page_content, "meta": d.metadata}
        for d in index.get_by_ids(keys)
    ]
    (snap / "children.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    with (snap / "nodes.txt").open("wb") as out:
        for key in r.docstore.yield_keys():
            (doc,) = r.docstore.mget([key])
            assert doc is not None
            out.write(json.dumps(key).encode() + b"\t" + encode_document(doc) + b"\n")
    meta["files"].update({"children.jsonl": "", "nodes.txt": ""})
    meta["format_version"] = 1
    meta["docstore"]["kind"] = "memory"
    (snap / "s2b.json").write_text(json.dumps(meta))
    reseal(snap)
    return snap


def _v1_records(snap: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (snap / "children.jsonl").read_text().splitlines()]


def _v1_write(snap: Path, rows: list[dict[str, Any]]) -> None:
    (snap / "children.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _set(rows: list[dict[str, Any]], i: int, **change: Any) -> list[dict[str, Any]]:
    rows[i] = {**rows[i], **change}
    return rows


CRAFTED_V1: dict[str, Callable[[Path, Path], Any]] = {
    "pickle as records": lambda snap, m: (snap / "children.jsonl").write_bytes(_evil(m)),
    "pickle as nodes": lambda snap, m: (snap / "nodes.txt").write_bytes(_evil(m)),
    "record row a string": lambda snap, m: _v1_write(snap, _set(_v1_records(snap), 1, row="x")),
    "record meta a list": lambda snap, m: _v1_write(snap, _set(_v1_records(snap), 1, meta=[])),
    "record count off": lambda snap, m: _v1_write(snap, _v1_records(snap)[:-1]),
    "duplicate record key": lambda snap, m: _v1_write(
        snap, _set(_v1_records(snap), 2, key=_v1_records(snap)[1]["key"])
    ),
    "node value not a document": lambda snap, m: (snap / "nodes.txt").write_text(
        '"a/child/0"\t{"v": 1, "page_content": 5, "metadata": {}}\n'
    ),
    "node line without a key": lambda snap, m: (snap / "nodes.txt").write_text(
        '{"key": "a/child/0", "doc": {}}\n'
    ),
}


class TestChecksums:
    """A save records an xxh3-128 checksum per file (format 3); a format-2 save's SHA-256s
    still verify. Either way one changed byte in any file is a one-line damaged save."""

    def test_every_file_of_a_save_has_its_xxh3_checksum(self, tmp_path: Path) -> None:
        build().save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        meta = json.loads((snap / "s2b.json").read_text())
        assert meta["format_version"] == 3
        for name, recorded in meta["files"].items():
            data = (snap / name).read_bytes()
            assert recorded == f"xxh3-128:{xxhash.xxh3_128(data).hexdigest()}", name

    def test_a_format_2_save_of_sha256s_loads(self, tmp_path: Path) -> None:
        r = build()
        r.save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        reseal(snap)  # SHA-256 hex digests, as format 2 wrote them
        edit_config(snap, lambda m: m.update(format_version=2))
        assert answers(SmallToBigRetriever.load(tmp_path / "idx", emb())) == answers(r)

    @pytest.mark.parametrize("kind", ["xxh3-128", "sha256"])
    def test_one_changed_byte_in_any_file_is_a_damaged_save(
        self, tmp_path: Path, kind: str
    ) -> None:
        build().save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        if kind == "sha256":
            reseal(snap)
        names = json.loads((snap / "s2b.json").read_text())["files"]
        for name in names:
            file = snap / name
            data = bytearray(file.read_bytes())
            if not data:
                continue
            data[len(data) // 2] ^= 1
            file.write_bytes(bytes(data))
            with pytest.raises(ValueError, match="does not match its checksum") as err:
                SmallToBigRetriever.load(tmp_path / "idx", emb())
            assert len(str(err.value).splitlines()) == 1
            assert name in str(err.value)
            data[len(data) // 2] ^= 1
            file.write_bytes(bytes(data))
        SmallToBigRetriever.load(tmp_path / "idx", emb())  # every byte back: it loads


class TestFormatVersion1:
    def test_a_version_1_save_is_read_and_saved_again_as_the_current(self, tmp_path: Path) -> None:
        r = build()
        save_v1(r, tmp_path / "idx")
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert answers(loaded) == answers(r)
        assert isinstance(loaded.docstore, NodeStore)
        assert loaded.verify().ok
        loaded.save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        assert json.loads((snap / "s2b.json").read_text())["format_version"] == 3
        assert not (snap / "children.jsonl").exists()
        assert answers(SmallToBigRetriever.load(tmp_path / "idx", emb())) == answers(r)

    @pytest.mark.parametrize("attack", sorted(CRAFTED_V1))
    def test_crafted_version_1_file_is_a_clear_error(self, tmp_path: Path, attack: str) -> None:
        marker = tmp_path / "pwned"
        snap = save_v1(build(), tmp_path / "idx")
        CRAFTED_V1[attack](snap, marker)
        reseal(snap)
        with pytest.raises(ValueError) as err:
            SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert str(err.value)
        assert "Traceback" not in str(err.value)
        assert not marker.exists()


class TestCraftedFiles:
    @pytest.mark.parametrize("attack", sorted({**CRAFTED, **CRAFTED_MORE}))
    def test_crafted_file_is_a_clear_error(self, tmp_path: Path, attack: str) -> None:
        marker = tmp_path / "pwned"
        build().save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        {**CRAFTED, **CRAFTED_MORE}[attack](snap, marker)
        if attack not in ("pickle as config",) and (snap / "s2b.json").exists():
            with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError, RecursionError):
                reseal(snap)
        with pytest.raises(ValueError) as err:
            SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert len(str(err.value).splitlines()) == 1, str(err.value)
        assert not marker.exists()

    @pytest.mark.parametrize("attack", sorted(CRAFTED_28))
    def test_crafted_file_ends_in_one_line(self, tmp_path: Path, attack: str) -> None:
        """Issue 28: every crafted file (checksums written again) is one ``ValueError`` line."""
        build().save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        CRAFTED_28[attack](snap, tmp_path / "pwned")
        with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            reseal(snap)
        with pytest.raises(ValueError) as err:
            SmallToBigRetriever.load(tmp_path / "idx", emb())
        assert type(err.value) is ValueError
        assert len(str(err.value).splitlines()) == 1, str(err.value)

    def test_a_crafted_shape_is_one_line_when_it_is_read(self, tmp_path: Path) -> None:
        """A shape is checked when first decoded: too deep a JSON is a ValueError then, too."""
        build().save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        lines = (snap / "nodes.shapes.jsonl").read_text().splitlines()
        (snap / "nodes.shapes.jsonl").write_text("\n".join([DEEP_JSON] * len(lines)) + "\n")
        reseal(snap)
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        with pytest.raises(ValueError, match="is not a list of \\[name, value\\] pairs") as err:
            loaded.invoke(QUERIES[0])
        assert len(str(err.value).splitlines()) == 1

    def test_a_crafted_lexical_store_is_one_line_when_it_is_read(self, tmp_path: Path) -> None:
        """Tantivy panics (a ``BaseException``) on a crafted store that only a read reaches."""
        r = build()
        r.invoke(QUERIES[0])  # the lexical index is built, and saved
        r.save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        _flip_segment_byte(snap, ".store", crc=True, at=lambda body: body - 98)  # its skip index
        reseal(snap)
        loaded = SmallToBigRetriever.load(tmp_path / "idx", emb())
        index = loaded.vectorstore
        assert isinstance(index, FaissIndex)
        with pytest.raises(ValueError, match=r"^The lexical index is damaged \(tantivy: ") as err:
            index.lexical().keys()
        assert len(str(err.value).splitlines()) == 1
        index.rebuild_lexical()  # what the message says to do
        assert loaded.verify().ok

    def test_tampered_file_fails_its_checksum(self, tmp_path: Path) -> None:
        build().save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        with (snap / "records.utf8").open("a") as fh:
            fh.write("\n")
        with pytest.raises(ValueError, match="does not match its checksum"):
            SmallToBigRetriever.load(tmp_path / "idx", emb())


SLOW_SAVE = textwrap.dedent(
    """
    import sys, time
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_s2b import SmallToBigRetriever
    from langchain_s2b.store.snapshots import persist

    path, point = sys.argv[1], sys.argv[2]
    r = SmallToBigRetriever.load(path, DeterministicFakeEmbedding(size={dim}))
    r.add_documents([Document("A brand new v2 source. " * 20, id="new-v2")])
    module, target = {{
        "files": (persist, "write_nodes"),
        "pointer": (persist, "write_text_atomic"),
    }}[point]
    original = getattr(module, target)

    def stall(*args, **kwargs):
        if point == "files":
            original(*args, **kwargs)
        print("STALLED", flush=True)
        time.sleep(120)

    setattr(module, target, stall)
    r.save(path)
    """
).format(dim=DIM)


def _edit_lines(snap: Path, name: str, change: Callable[[str], str]) -> None:
    lines = (snap / name).read_text().splitlines()
    (snap / name).write_text("".join(change(line) + "\n" for line in lines))


class TestCraftedValues:
    """Issue 28: crafted values of a save that loads reached core as KeyError or TypeError."""

    def _load(self, tmp_path: Path, name: str, change: Callable[[str], str]) -> SmallToBigRetriever:
        build().save(tmp_path / "idx")
        snap = snapshot(tmp_path / "idx")
        _edit_lines(snap, name, change)
        reseal(snap)
        return SmallToBigRetriever.load(tmp_path / "idx", emb())

    @staticmethod
    def _one_line(call: Callable[[], Any], match: str) -> None:
        with pytest.raises(ValueError, match=match) as err:
            call()
        assert len(str(err.value).splitlines()) == 1

    def test_a_stored_document_without_an_id(self, tmp_path: Path) -> None:
        loaded = self._load(
            tmp_path, "nodes.other.jsonl", lambda line: line.replace('"id": "doc-2/manifest", ', "")
        )
        (manifest,) = loaded.docstore.mget(["doc-2/manifest"])
        assert manifest is not None
        assert manifest.id is None
        assert manifest.metadata["source_id"] == "doc-2"

    def test_a_leaf_whose_ancestors_are_malformed(self, tmp_path: Path) -> None:
        loaded = self._load(
            tmp_path,
            "records.shapes.jsonl",
            lambda line: re.sub(r'\["ancestors",\[.*?\]\]\]', '["ancestors",[[1]]]', line),
        )
        self._one_line(lambda: loaded.invoke(QUERIES[0]), r"^Child .* has malformed metadata;")

    def test_a_node_whose_start_is_null(self, tmp_path: Path) -> None:
        loaded = self._load(
            tmp_path,
            "nodes.shapes.jsonl",
            lambda line: line.replace('["start"]', '["start",null]'),
        )
        call = lambda: loaded.invoke(QUERIES[0], max_tokens=60)  # noqa: E731 -- reads the leaves
        self._one_line(call, r"^Node .* has malformed offsets")

    def test_a_manifest_whose_levels_are_not_names(self, tmp_path: Path) -> None:
        loaded = self._load(
            tmp_path,
            "nodes.other.jsonl",
            lambda line: line.replace('"levels": ["child", "parent", "doc"]', '"levels": [[1]]'),
        )
        report = loaded.verify()
        assert not report.ok
        assert report.bad_manifests == [f"doc-{i}/manifest" for i in range(6)]


class TestAtomicSave:
    @pytest.mark.parametrize("point", ["files", "pointer"])
    def test_kill_mid_save_keeps_the_previous_save(self, tmp_path: Path, point: str) -> None:
        path = tmp_path / "idx"
        r = build()
        r.save(path)
        before = answers(SmallToBigRetriever.load(path, emb()))
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_SAVE, str(path), point],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "STALLED", proc.stderr.read() if proc.stderr else ""
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        leftovers = [p.name for p in path.iterdir() if p.name not in {"CURRENT", persist.LOCK_FILE}]
        assert len(leftovers) == 2  # the complete old snapshot and the unfinished new one
        loaded = SmallToBigRetriever.load(path, emb())
        assert answers(loaded) == before
        assert "new-v2" not in {k.split("/")[0] for k in loaded.docstore.yield_keys()}
        loaded.save(path)  # the next save cleans up
        assert len([p for p in path.iterdir() if p.name not in {"CURRENT", persist.LOCK_FILE}]) == 1

    def test_error_mid_save_keeps_the_previous_save(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "idx"
        r = build()
        r.save(path)
        before = answers(r)
        r.add_documents(corpus("v2"))

        def fail(*args: Any) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(persist, "write_nodes", fail)
        with pytest.raises(OSError, match="disk full"):
            r.save(path)
        assert len([p for p in path.iterdir() if p.name not in {"CURRENT", persist.LOCK_FILE}]) == 1
        assert answers(SmallToBigRetriever.load(path, emb())) == before
