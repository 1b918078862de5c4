"""Opening, saving and memory at scale, and the command line on big stores (issue 21).

.. code-block:: bash

    python benchmarks/scale.py                          # 100k children, every mode, the CLI
    python benchmarks/scale.py --sizes 100000 1000000   # adds 1M (make bench FULL=1)
    python benchmarks/scale.py --code ../main           # the same on another checkout (before)
    python benchmarks/scale.py --json scale.json        # rows for run.py's targets table

Every figure is taken in this run, each side in a fresh process with the
checkout's ``langchain_s2b`` on ``PYTHONPATH``; ratios compare sides timed in
the same run (rounds interleave the sides), so a busy machine moves the seconds
but not the verdict. Corpora are built once per checkout and size under
``--workdir`` and reused by every round.

**Python API** (per mode and size): synthetic articles (:mod:`corpus`) are
added with ``HashEmbedding`` (384 dims) into a ``FaissIndex("Flat")`` retriever
with the defaults (``hybrid=True``) until it holds the size in children.

- *s2b*: ``SmallToBigRetriever.load`` of its ``save``; ``save`` itself. Then three
  questions, each timed first (right after ``load``) and warm (again, after the
  others): the worst ratio is the first-query row.
- *baseline*: ``faiss.read_index`` of the same vectors plus ``json.loads`` of
  every line of one JSONL file with the same text (each leaf with its metadata,
  and each source document).
- *peer*: LangChain ``FAISS.save_local``/``load_local`` of the same leaves (text,
  metadata, vectors; its docstore is a pickle) with the parents (every node that
  is not a leaf) in a ``LocalFileStore``.

Memory is the process's resident set (``VmRSS``) after ``gc.collect()``, "at
rest"; the peak (``VmHWM``) is reset through ``/proc/self/clear_refs`` just
before a save. The floor is the vectors (children x 384 x 4 bytes) plus the
sources' text (UTF-8 bytes).

**Command line**: folders of ``.txt`` articles indexed by ``s2b index
--embedding fake`` into stores of ~1k and ~100k chunks (and ~1M with the
size), then ``python -m langchain_s2b query Q --store DIR`` as a user runs it,
interleaved over the stores question by question; ``s2b --version`` and ``s2b
list`` against ``python -c pass``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DIM = 384
MODES = ("window", "parent", "multilevel")
CLI_SIZES = (1_000, 100_000)


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


# In the worker processes ----------------------------------------------------------


def _status(field: str) -> float:
    """A ``/proc/self/status`` field in MB."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb() -> float:
    gc.collect()
    return _status("VmRSS")


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
        fh.write("5")


def peak_mb() -> float:
    return _status("VmHWM")


def _mode_fields(mode: str) -> dict[str, Any]:
    from langchain_s2b.core.splitters import section_splitter, size_splitter

    if mode == "parent":
        return {"child_splitter": size_splitter(100), "parent_splitter": section_splitter(500)}
    return {}


def work_build(mode: str, size: int, where: str) -> dict[str, Any]:
    """Ingest, RSS at rest, save (time, peak), and the baseline and peer inputs."""
    from corpus import HashEmbedding, Synthesiser

    from langchain_s2b import FaissIndex, SmallToBigRetriever

    out = Path(where)
    emb = HashEmbedding(DIM)
    retriever = SmallToBigRetriever(vectorstore=FaissIndex(emb), mode=mode, **_mode_fields(mode))
    synth = Synthesiser(seed=7)
    base = rss_mb()
    docs_done, text_bytes = 0, 0
    began = time.perf_counter()
    while len(retriever.vectorstore) < size:  # type: ignore[arg-type]
        docs = list(synth.documents(20, start=docs_done))
        docs_done += len(docs)
        text_bytes += sum(len(d.page_content.encode("utf-8")) for d in docs)
        retriever.add_documents(docs)
    ingest_s = time.perf_counter() - began
    children = len(retriever.vectorstore)  # type: ignore[arg-type]
    rest = rss_mb()
    reset_peak()
    t0 = time.perf_counter()
    retriever.save(out / "s2b")
    save_s = time.perf_counter() - t0
    save_peak = peak_mb()
    row = {
        "children": children,
        "documents": docs_done,
        "text_mb": text_bytes / 2**20,
        "vectors_mb": children * DIM * 4 / 2**20,
        "ingest_s": ingest_s,
        "rss_base_mb": base,
        "rss_rest_mb": rest,
        "save_s": save_s,
        "save_peak_mb": save_peak,
        "disk_mb": sum(f.stat().st_size for f in (out / "s2b").rglob("*") if f.is_file()) / 2**20,
    }
    _write_sides(retriever, out)
    return row


def _write_sides(retriever: Any, out: Path) -> None:
    """The baseline's JSONL and FAISS file, and the peer's inputs (leaves, parents)."""
    import faiss
    from langchain_core.documents import Document

    index = retriever.vectorstore
    keys = sorted(index.keys())
    leaves = {d.id: d for d in index.get_by_ids(keys)}
    levels = [lv.name for lv in retriever._levels]
    with (out / "leaves.jsonl").open("w", encoding="utf-8") as fh:
        for key in keys:
            doc = leaves[key]
            fh.write(json.dumps({"id": key, "text": doc.page_content, "metadata": doc.metadata}))
            fh.write("\n")
    parents: list[tuple[str, Document]] = []
    with (out / "baseline.jsonl").open("w", encoding="utf-8") as fh:
        for key in keys:
            doc = leaves[key]
            fh.write(json.dumps({"id": key, "text": doc.page_content, "metadata": doc.metadata}))
            fh.write("\n")
        batch: list[str] = []
        for key in retriever.docstore.yield_keys():
            batch.append(key)
            if len(batch) == 1000:
                parents += _nodes(retriever, batch, levels[0], fh)
                batch = []
        parents += _nodes(retriever, batch, levels[0], fh)
    (out / "parents.jsonl").write_text(
        "".join(
            json.dumps({"id": k, "text": d.page_content, "metadata": d.metadata}) + "\n"
            for k, d in parents
        ),
        encoding="utf-8",
    )
    found = sorted((out / "s2b").rglob("*.faiss"))
    faiss.write_index(faiss.read_index(str(found[0])), str(out / "baseline.faiss"))


def _nodes(retriever: Any, batch: list[str], leaf: str, fh: Any) -> list[tuple[str, Any]]:
    """Write the doc nodes of ``batch`` to the baseline; the non-leaf nodes (the parents)."""
    parents = []
    for key, doc in zip(batch, retriever.docstore.mget(batch), strict=True):
        if doc is None or "level" not in doc.metadata or doc.metadata["level"] == leaf:
            continue
        parents.append((key, doc))
        if doc.metadata["level"] == "doc":
            fh.write(json.dumps({"id": key, "text": doc.page_content, "metadata": doc.metadata}))
            fh.write("\n")
    return parents


def work_peer_build(where: str) -> dict[str, Any]:
    """LangChain's FAISS with the same leaves and vectors, parents in a LocalFileStore."""
    from corpus import HashEmbedding
    from langchain_classic.storage import LocalFileStore
    from langchain_community.vectorstores import FAISS
    from langchain_community.vectorstores.utils import DistanceStrategy

    out = Path(where)
    emb = HashEmbedding(DIM)
    rows = [json.loads(line) for line in (out / "leaves.jsonl").open(encoding="utf-8")]
    texts = [r["text"] for r in rows]
    store: Any = None
    for i in range(0, len(texts), 10_000):  # in parts: 1M vectors as Python floats are 12 GB
        part = slice(i, i + 10_000)
        pairs = list(zip(texts[part], emb.matrix(texts[part]).tolist(), strict=True))
        metadatas = [r["metadata"] for r in rows[part]]
        ids = [r["id"] for r in rows[part]]
        if store is None:
            store = FAISS.from_embeddings(
                pairs,
                emb,
                metadatas=metadatas,
                ids=ids,
                distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
            )
        else:
            store.add_embeddings(pairs, metadatas=metadatas, ids=ids)
    del rows, texts
    parents = LocalFileStore(str(out / "peer-parents"))
    batch: list[tuple[str, bytes]] = []
    with (out / "parents.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            batch.append((row["id"], line.encode("utf-8")))
            if len(batch) == 1000:
                parents.mset(batch)
                batch = []
    parents.mset(batch)
    del batch
    rest = rss_mb()
    reset_peak()
    t0 = time.perf_counter()
    store.save_local(str(out / "peer"))
    save_s = time.perf_counter() - t0
    return {"peer_rss_rest_mb": rest, "peer_save_s": save_s, "peer_save_peak_mb": peak_mb()}


def work_load(
    side: str, where: str, mode: str, query: dict[str, Any] | None = None, depth: int = 100
) -> dict[str, Any]:
    """One load in this fresh process: time, RSS at rest after it, its peak; first query.

    ``open_cpu_s`` is the process CPU time of opening plus the first query
    (issue 34 item 3): ``load`` and ``invoke(question, **query)`` for s2b;
    for the ``floor`` side, ``faiss.read_index`` and reading the sources' text
    once (``sources.txt``, UTF-8), then embedding the same question and a bare
    FAISS search ``depth`` deep. Both sides import FAISS before the clock
    starts (``langchain_s2b`` imports it); s2b imports tantivy (~6 ms) inside.
    """
    out = Path(where)
    kwargs = query or {}
    if side in ("s2b", "floor"):
        import faiss
        import numpy as np
        from corpus import HashEmbedding, load_questions

        emb = HashEmbedding(DIM)
        questions = load_questions(12)
    if side == "s2b":
        from langchain_s2b import SmallToBigRetriever
    elif side == "baseline":
        import faiss
    elif side == "peer":
        from corpus import HashEmbedding
        from langchain_classic.storage import LocalFileStore
        from langchain_community.vectorstores import FAISS

        emb = HashEmbedding(DIM)
    before = rss_mb()
    reset_peak()
    t0, c0 = time.perf_counter(), time.process_time()
    if side == "s2b":
        loaded: Any = SmallToBigRetriever.load(out / "s2b", emb)
    elif side == "baseline":
        index = faiss.read_index(str(out / "baseline.faiss"))
        with (out / "baseline.jsonl").open(encoding="utf-8") as fh:
            rows = [json.loads(line) for line in fh]
        loaded = (index, rows)
    elif side == "floor":
        index = faiss.read_index(str(out / "baseline.faiss"))
        loaded = (index, (out / "sources.txt").read_text(encoding="utf-8"))
    else:
        store = FAISS.load_local(str(out / "peer"), emb, allow_dangerous_deserialization=True)
        loaded = (store, LocalFileStore(str(out / "peer-parents")))
    load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    first_ms = None
    if side == "s2b":  # opening includes the first query (issue 34)
        first_ms = _timed_invoke(loaded, questions[0], **kwargs)
    elif side == "floor":
        vector = emb.matrix(questions[:1])
        faiss.normalize_L2(vector)
        index.search(np.ascontiguousarray(vector), depth)
    open_cpu = time.process_time() - c0
    peak = peak_mb()
    row: dict[str, Any] = {"load_s": load_s, "rss_before_mb": before, "rss_rest_mb": rss_mb()}
    row |= {"load_peak_mb": peak, "load_cpu_s": load_cpu, "open_cpu_s": open_cpu}
    if first_ms is not None:  # the same questions first (after load) and warm (after the others)
        first = [first_ms] + [_timed_invoke(loaded, q, **kwargs) for q in questions[1:3]]
        others = [_timed_invoke(loaded, q, **kwargs) for q in questions[3:]]
        warm = [
            statistics.median(_timed_invoke(loaded, q, **kwargs) for _ in range(3))
            for q in questions[:3]
        ]
        row["first_query_ms"] = first[0]
        row["warm_query_ms"] = warm[0]
        row["first_over_warm"] = max(f / w for f, w in zip(first, warm, strict=True))
        row["other_queries_ms"] = statistics.median(others)
    return row


def _timed_invoke(retriever: Any, question: str, **kwargs: Any) -> float:
    t0 = time.perf_counter()
    retriever.invoke(question, **kwargs)
    return (time.perf_counter() - t0) * 1000


def work_cli_build(store: str, folder: str, chunks: int) -> dict[str, Any]:
    """Write articles as .txt files and index them until the store holds ``chunks``."""
    import sqlite3

    from corpus import Synthesiser

    from langchain_s2b.cli.commands import main

    where, files = Path(store), Path(folder)
    files.mkdir(parents=True, exist_ok=True)
    synth = Synthesiser(seed=11)
    made = len(list(files.glob("*.txt")))
    per_article = 200
    began = time.perf_counter()
    while True:
        have = 0
        if (where / "s2b.sqlite").exists():
            with sqlite3.connect(where / "s2b.sqlite") as conn:
                have = int(conn.execute("SELECT count(*) FROM children").fetchone()[0])
        if have >= chunks:
            return {"chunks": have, "files": made, "index_s": time.perf_counter() - began}
        want = max(1, int((chunks - have) / per_article * 1.02) + 1)
        start = made + len(synth.seed_articles)
        for i, doc in enumerate(synth.documents(want, start=start)):
            (files / f"a{made + i:07d}.txt").write_text(doc.page_content, encoding="utf-8")
        made += want
        code = main(["index", str(files), "--store", str(where), "--embedding", "fake"])
        if code != 0:
            msg = f"s2b index failed with status {code}"
            raise RuntimeError(msg)


WORKERS = {
    "build": work_build,
    "peer_build": work_peer_build,
    "load": work_load,
    "cli_build": work_cli_build,
}


# In the driver --------------------------------------------------------------------


class Sides:
    """Runs workers in fresh processes with one checkout's ``langchain_s2b``."""

    def __init__(self, code: Path) -> None:
        self.code = code
        self.env = {
            **os.environ,
            "PYTHONPATH": f"{code}{os.pathsep}{HERE}",
            "OMP_NUM_THREADS": "1",
            "S2B_EMBEDDING": "fake",
        }
        self.neutral = Path(tempfile.mkdtemp(prefix="s2b-scale-cwd-"))

    def work(self, task: str, **kwargs: Any) -> dict[str, Any]:
        argv = [sys.executable, str(Path(__file__)), "--worker", task, json.dumps(kwargs)]
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, check=False, cwd=self.neutral
        )
        if done.returncode != 0:
            msg = f"worker {task} {kwargs} failed:\n{done.stderr[-3000:]}"
            raise RuntimeError(msg)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    def run(self, *argv: str) -> None:
        """Run a command as a user runs it, from a folder that holds no ``langchain_s2b``.

        (``python -m`` puts the current folder first on ``sys.path``: run from a
        checkout, it would import that checkout instead of ``PYTHONPATH``'s.)
        """
        subprocess.run(argv, env=self.env, capture_output=True, check=True, cwd=self.neutral)

    def timed(self, *argv: str) -> float:
        """Wall time of one command as a user runs it (a fresh interpreter)."""
        t0 = time.perf_counter()
        self.run(*argv)
        return time.perf_counter() - t0


def _tag(code: Path) -> str:
    head = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{code.resolve().name}-{head}" if head else code.resolve().name


def measure_api(
    sides: Sides, work: Path, mode: str, size: int, rounds: int
) -> list[dict[str, Any]]:
    where = work / f"api-{mode}-{size}"
    row = _built(sides, where, mode, size, peer=True)
    loads: dict[str, list[dict[str, Any]]] = {"s2b": [], "baseline": [], "peer": []}
    for r in range(rounds):
        order = ["s2b", "baseline", "peer"] if r % 2 == 0 else ["peer", "baseline", "s2b"]
        for side in order:
            loads[side].append(sides.work("load", side=side, where=str(where), mode=mode))
    out = {"section": "scale", "mode": mode, **row}
    floor = row["vectors_mb"] + row["text_mb"]
    out["floor_mb"] = floor
    for side, runs in loads.items():
        prefix = "" if side == "s2b" else f"{side}_"
        out[f"{prefix}load_s"] = statistics.median(r["load_s"] for r in runs)
        out[f"{prefix}load_all_s"] = [round(r["load_s"], 2) for r in runs]
        out[f"{prefix}load_rss_rest_mb"] = statistics.median(r["rss_rest_mb"] for r in runs)
        out[f"{prefix}load_peak_mb"] = max(r["load_peak_mb"] for r in runs)
    s2b = loads["s2b"]
    out["first_query_ms"] = statistics.median(r["first_query_ms"] for r in s2b)
    out["warm_query_ms"] = statistics.median(r["warm_query_ms"] for r in s2b)
    out["first_over_warm"] = statistics.median(r["first_over_warm"] for r in s2b)
    out["other_queries_ms"] = statistics.median(r["other_queries_ms"] for r in s2b)
    out["load_peak_over_rest"] = max(r["load_peak_mb"] / r["rss_rest_mb"] for r in s2b)
    return [out]


def _built(sides: Sides, where: Path, mode: str, size: int, *, peer: bool) -> dict[str, Any]:
    """Build (once) the saved retriever and the baseline's files, and the peer's if asked."""
    built, core = where / "built.json", where / "built-core.json"
    if built.exists():
        return dict(json.loads(built.read_text()))
    if core.exists():
        row = json.loads(core.read_text())
    else:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        log(f"  building {mode} {size:,} ...")
        row = sides.work("build", mode=mode, size=size, where=str(where))
        core.write_text(json.dumps(row))
    if peer:
        row |= sides.work("peer_build", where=str(where))
        built.write_text(json.dumps(row))
    return dict(row)


def _sources_text(where: Path) -> None:
    """``sources.txt``: every source document's text (UTF-8), from the baseline's JSONL, once."""
    target = where / "sources.txt"
    if target.exists():
        return
    with (
        (where / "baseline.jsonl").open(encoding="utf-8") as fh,
        target.open("w", encoding="utf-8") as out,
    ):
        for line in fh:
            row = json.loads(line)
            if row["metadata"].get("level") == "doc":
                out.write(row["text"])
                out.write("\n")


def measure_opening(
    code: Path,
    work: Path,
    sizes: list[int],
    query: dict[str, Any],
    depth: int,
    rounds: int = 3,
    mode: str = "window",
) -> list[dict[str, Any]]:
    """Opening with the first query vs its floor, in fresh processes (issue 34 item 3).

    Process CPU time of ``load`` + ``invoke(question, **query)`` against
    ``faiss.read_index`` + reading the sources' text once (``sources.txt``) +
    the same bare search ``depth`` deep; the corpora of :func:`measure_api`
    (built here without the peer's files when missing).
    """
    sides = Sides(code.resolve())
    work = work / _tag(code)
    rows: list[dict[str, Any]] = []
    for size in sizes:
        where = work / f"api-{mode}-{size}"
        built = _built(sides, where, mode, size, peer=False)
        _sources_text(where)
        runs: dict[str, list[dict[str, Any]]] = {"s2b": [], "floor": []}
        # at 1M three rounds (not one): the page cache decides which side of one round reads disk
        for r in range(rounds if size < 1_000_000 else min(rounds, 3)):
            for side in ("s2b", "floor") if r % 2 == 0 else ("floor", "s2b"):
                runs[side].append(
                    sides.work(
                        "load", side=side, where=str(where), mode=mode, query=query, depth=depth
                    )
                )
        s2b = statistics.median(r["open_cpu_s"] for r in runs["s2b"])
        floor = statistics.median(r["open_cpu_s"] for r in runs["floor"])
        rows.append(
            {
                "section": "opening",
                "mode": mode,
                "children": built["children"],
                "open_cpu_s": s2b,
                "load_cpu_s": statistics.median(r["load_cpu_s"] for r in runs["s2b"]),
                "first_query_ms": statistics.median(r["first_query_ms"] for r in runs["s2b"]),
                "floor_cpu_s": floor,
                "floor_load_cpu_s": statistics.median(r["load_cpu_s"] for r in runs["floor"]),
                "ratio": s2b / floor,
                "all_s": [round(r["open_cpu_s"], 3) for r in runs["s2b"]],
                "floor_all_s": [round(r["open_cpu_s"], 3) for r in runs["floor"]],
            }
        )
    return rows


QUESTIONS = (
    "In what country is Normandy located?",
    "When were the Normans in Normandy?",
    "What is the original meaning of the word Norman?",
    "Who was the duke in the battle of Hastings?",
    "What religion were the Normans",
)


def measure_cli(sides: Sides, work: Path, sizes: list[int], rounds: int) -> list[dict[str, Any]]:
    stores = {}
    for size in sizes:
        store = work / f"cli-{size}"
        if not (store / "built.json").exists():
            log(f"  building the {size:,}-chunk store ...")
            shutil.rmtree(store, ignore_errors=True)
            store.mkdir(parents=True)
            row = sides.work(
                "cli_build", store=str(store / "store"), folder=str(store / "files"), chunks=size
            )
            (store / "built.json").write_text(json.dumps(row))
        stores[size] = (store / "store", json.loads((store / "built.json").read_text()))
    py = sys.executable
    s2b = [py, "-m", "langchain_s2b"]
    times: dict[str, list[float]] = {"pass": [], "version": [], "list": []}
    queries: dict[int, list[float]] = {size: [] for size in sizes}
    budgeted: dict[int, list[float]] = {size: [] for size in sizes}
    for store, _ in stores.values():  # once each, untimed: the first run after a build
        sides.run(*s2b, "query", QUESTIONS[0], "--store", str(store))
    smallest = stores[min(sizes)][0]
    for _ in range(rounds):
        times["pass"].append(sides.timed(py, "-c", "pass"))
        times["version"].append(sides.timed(*s2b, "--version"))
        times["list"].append(sides.timed(*s2b, "list", "--store", str(smallest)))
        for question in QUESTIONS:
            for size, (store, _) in stores.items():
                queries[size].append(sides.timed(*s2b, "query", question, "--store", str(store)))
        for question in QUESTIONS[:2]:  # hybrid: the lexical index searched too
            for size, (store, _) in stores.items():
                argv = [*s2b, "query", question, "--store", str(store), "--max-tokens", "800"]
                budgeted[size].append(sides.timed(*argv))
    rows: list[dict[str, Any]] = []
    base = statistics.median(queries[min(sizes)])
    for size, (_, built) in stores.items():
        rows.append(
            {
                "section": "scale cli",
                "command": "s2b query",
                "chunks": built["chunks"],
                "median_s": statistics.median(queries[size]),
                "all_s": [round(t, 2) for t in queries[size]],
                "over_smallest": statistics.median(queries[size]) / base,
            }
        )
    base = statistics.median(budgeted[min(sizes)])
    for size, (_, built) in stores.items():
        rows.append(
            {
                "section": "scale cli",
                "command": "s2b query --max-tokens 800",
                "chunks": built["chunks"],
                "median_s": statistics.median(budgeted[size]),
                "all_s": [round(t, 2) for t in budgeted[size]],
                "over_smallest": statistics.median(budgeted[size]) / base,
            }
        )
    floor = statistics.median(times["pass"])
    for name in ("version", "list"):
        rows.append(
            {
                "section": "scale cli",
                "command": f"s2b {name}" if name != "version" else "s2b --version",
                "median_s": statistics.median(times[name]),
                "python_c_pass_s": floor,
                "above_python_s": statistics.median(times[name]) - floor,
            }
        )
    return rows


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 21's table: every row next to its target, from this run's figures."""
    out: list[dict[str, Any]] = []

    def add(measure: str, figure: str, target: str, met: bool) -> None:
        out.append({"section": "targets", "measure": measure, "figure": figure, "target": target})
        out[-1]["met"] = "yes" if met else "NO"

    for r in (r for r in rows if r["section"] == "scale"):
        n, mode = f"{r['children']:,}", r["mode"]
        ratio = r["load_s"] / r["baseline_load_s"]
        add(
            f"load, {mode}, {n} children",
            f"{r['load_s']:.2f} s = {ratio:.2f}x baseline ({r['baseline_load_s']:.2f} s); "
            f"peer {r['peer_load_s']:.2f} s",
            "<= 3x baseline and < peer",
            ratio <= 3 and r["load_s"] < r["peer_load_s"],
        )
        add(
            f"peak RSS during load / RSS at rest after it, {mode}, {n}",
            f"{r['load_peak_mb']:,.0f} / {r['load_rss_rest_mb']:,.0f} MB = "
            f"{r['load_peak_over_rest']:.2f}x (baseline {r['baseline_load_peak_mb']:,.0f}, "
            f"peer {r['peer_load_peak_mb']:,.0f} MB)",
            "<= 1.3x",
            r["load_peak_over_rest"] <= 1.3,
        )
        save_ratio = r["save_peak_mb"] / r["rss_rest_mb"]
        add(
            f"peak RSS during save / RSS at rest, {mode}, {n}",
            f"{r['save_peak_mb']:,.0f} / {r['rss_rest_mb']:,.0f} MB = {save_ratio:.2f}x "
            f"(peer {r['peer_save_peak_mb'] / r['peer_rss_rest_mb']:.2f}x)",
            "<= 1.3x",
            save_ratio <= 1.3,
        )
        for what, rss in (
            ("after ingest", r["rss_rest_mb"]),
            ("after load", r["load_rss_rest_mb"]),
        ):
            add(
                f"RSS at rest {what} / floor, {mode}, {n}",
                f"{rss:,.0f} / {r['floor_mb']:,.0f} MB = {rss / r['floor_mb']:.2f}x "
                f"(peer {r['peer_rss_rest_mb'] / r['floor_mb']:.2f}x after ingest, "
                f"{r['peer_load_rss_rest_mb'] / r['floor_mb']:.2f}x after load)",
                "<= 1.5x",
                rss / r["floor_mb"] <= 1.5,
            )
        add(
            f"save, {mode}, {n}",
            f"{r['save_s']:.2f} s = {r['save_s'] / r['peer_save_s']:.2f}x the peer's "
            f"save_local ({r['peer_save_s']:.2f} s)",
            "<= 2x the peer (the target is set at 1M)",
            r["save_s"] <= 2 * r["peer_save_s"],
        )
        add(
            f"first query after load / the same query warm, {mode}, {n}",
            f"{r['first_query_ms']:.1f} / {r['warm_query_ms']:.1f} ms; worst of 3 questions "
            f"{r['first_over_warm']:.2f}x",
            "<= 2x",
            r["first_over_warm"] <= 2,
        )
    for r in (r for r in rows if r["section"] == "scale cli"):
        if r["command"].startswith("s2b query"):
            add(
                f"{r['command']}, {r['chunks']:,} chunks",
                f"{r['median_s']:.2f} s = {r['over_smallest']:.2f}x the smallest store",
                "<= 1.5x the 1k-chunk store",
                r["over_smallest"] <= 1.5,
            )
        else:
            add(
                r["command"],
                f"{r['median_s']:.2f} s = python -c pass + {r['above_python_s']:.2f} s",
                "<= 0.5 s above python -c pass",
                r["above_python_s"] <= 0.5,
            )
    return out


def measure(
    code: Path,
    work: Path,
    sizes: list[int],
    modes: list[str],
    rounds: int = 3,
    skip: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Every row for one checkout (built corpora under ``work/<checkout>`` are reused)."""
    sides = Sides(code.resolve())
    work = work / _tag(code)
    work.mkdir(parents=True, exist_ok=True)
    log(f"scale: code {code} ({_tag(code)}), corpora in {work}")
    rows: list[dict[str, Any]] = []
    for size in sizes:
        for mode in modes if "api" not in skip else ():
            log(f"scale: {mode}, {size:,} children")
            rows += measure_api(sides, work, mode, size, rounds if size < 1_000_000 else 1)
    if "cli" not in skip:
        cli_sizes = sorted({*CLI_SIZES, *(s for s in sizes if s >= 1_000_000)})
        log(f"scale: the command line on {cli_sizes} chunks")
        rows += measure_cli(sides, work, cli_sizes, rounds)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    out: list[str] = []
    for section in dict.fromkeys(row["section"] for row in rows):
        mine = [row for row in rows if row["section"] == section]
        cols = [c for c in dict.fromkeys(k for row in mine for k in row) if c != "section"]
        out += ["", f"### {section}", "", "| " + " | ".join(cols) + " |"]
        out.append("|" + " --- |" * len(cols))
        for row in mine:
            cells = []
            for c in cols:
                v = row.get(c, "")
                cells.append(f"{v:.3g}" if isinstance(v, float) and abs(v) < 1000 else str(v))
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--worker"]:
        sys.path.insert(0, str(HERE))
        result = WORKERS[args_in[1]](**json.loads(args_in[2]))
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000])
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/s2b-scale"))
    parser.add_argument("--skip", nargs="*", default=[], help="api and/or cli")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(args_in)
    began = os.getloadavg()
    rows = measure(
        args.code, args.workdir, args.sizes, args.modes, args.rounds, frozenset(args.skip)
    )
    rows += targets(rows)
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load average at start": " ".join(f"{x:.1f}" for x in began),
        "load average at end": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "code": f"{args.code} ({_tag(args.code)})",
    }
    print("machine:", json.dumps(machine))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
