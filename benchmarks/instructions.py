"""What a query costs in instructions, against its floor: a count no busy machine moves.

.. code-block:: bash

    python benchmarks/instructions.py                        # 10k children, this checkout
    python benchmarks/instructions.py --code ../base --code .  # two checkouts, one table
    python benchmarks/instructions.py --size 100000 --json out.json
    python benchmarks/instructions.py --objects              # each phase by shared object

The timings of :mod:`query_cost` move with the machine's load by more than a change of a few
per cent of a query's own work (on this project's VMs: 0.1-0.4x of the ratio between two runs of
the same code). This counts instructions instead, under valgrind's callgrind (``apt install
valgrind``), which runs the same code the same way every time (hash seed fixed): runs of the
same checkout agreed within 0.2% on the hybrid path's own work, 0.6% on the dense path's (a
smaller number), and 1% on the floors. Each checkout runs in
a process of its own (its package; this script's corpus and floor), under callgrind with
instrumentation off while the corpus is built; the parent turns it on (``callgrind_control``)
around four loops over the same queries, one count each:

- ``dense`` / ``hybrid``: ``invoke(q, k=4, fetch_k=20, window_size=1)`` (``query_cost.QUERY``)
  on the retrievers :mod:`query_cost` measures (HNSW32, the synthetic corpus, memoised
  query vectors), after one warm-up round;
- ``floor_dense``: bare FAISS top-20 + LangChain's ``invoke`` of an empty retriever;
- ``floor_hybrid``: bare FAISS top-100 + tantivy's own top-100 + the empty ``invoke``.

``own`` = invoke - floor. Instructions are not time (a FAISS or tantivy instruction waits on
memory more often than the interpreter's), so the ratio here is not the issue's timed ratio;
what it is for is telling whether a change made the library's own work smaller, and by how much.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PHASES = ("dense", "hybrid", "floor_dense", "floor_hybrid")


def child(size: int, queries: int, out: Path) -> None:
    """Build the corpus, then run each phase when the parent says go (instrumented by it).

    The package is the measured checkout's (``--code``, which :mod:`run` puts
    first on the path); the corpus and the floor's parts are this script's
    (:mod:`run`, :mod:`query_cost`), so two checkouts are measured the same way.
    """
    import faiss
    from query_cost import QUERY, TextFloor  # imports run, which puts --code's package first
    from run import EMPTY_RETRIEVER, query_cost_pair

    import langchain_s2b

    (out / "package").write_text(str(Path(langchain_s2b.__file__).resolve()))
    asked, qvecs, corpus, dense = query_cost_pair(size, queries)
    hybrid = corpus.retriever
    faiss.omp_set_num_threads(1)
    raw = corpus.index._index
    text = TextFloor(corpus.index)

    def floor(depth: int, lexical: bool) -> None:
        for i, q in enumerate(asked):
            raw.search(qvecs[i : i + 1], depth)
            if lexical:
                text.timed(q, depth)
            EMPTY_RETRIEVER.invoke(q)

    loops = {
        "dense": lambda: [dense.invoke(q, **QUERY) for q in asked],
        "hybrid": lambda: [hybrid.invoke(q, **QUERY) for q in asked],
        "floor_dense": lambda: floor(20, lexical=False),
        "floor_hybrid": lambda: floor(100, lexical=True),
    }
    for run in loops.values():  # warm: caches filled, lazily built parts built
        run()
    for name in PHASES:
        (out / f"{name}.ready").touch()
        _wait(out / f"{name}.go")
        loops[name]()
        (out / f"{name}.done").touch()
        _wait(out / f"{name}.dumped")


def _wait(path: Path, timeout: float = 3600.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > end:
            msg = f"instructions.py: waited {timeout:.0f} s for {path.name}"
            raise TimeoutError(msg)
        time.sleep(0.02)


def count(
    root: Path, size: int, queries: int, objects: dict[str, dict[str, float]] | None = None
) -> dict[str, float]:
    """Instructions per query of each phase, for the checkout at ``root``.

    ``objects``: filled with each phase's instructions per query by the shared
    object they ran in (:func:`by_object`).
    """
    with tempfile.TemporaryDirectory(prefix="s2b-instr-") as tmp:
        out = Path(tmp)
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        cmd = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}/cg.out",
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            "--code",  # run.py puts the measured checkout's package first on the path
            str(root),
            "--size",
            str(size),
            "--queries",
            str(queries),
            "--out",
            str(out),
        ]
        with open(out / "log", "w") as log:
            proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
            pid = str(proc.pid)
            for name in PHASES:
                _running_until(out / f"{name}.ready", proc, root)
                _control("-z", pid)
                _control("-i", "on", pid)
                (out / f"{name}.go").touch()
                _running_until(out / f"{name}.done", proc, root)
                _control("-i", "off", pid)
                _control("-d", name, pid)
                (out / f"{name}.dumped").touch()
            proc.wait()
        package = Path((out / "package").read_text())
        if not package.is_relative_to(root):
            msg = f"instructions.py: the run of {root} imported the package at {package}"
            raise RuntimeError(msg)
        totals: dict[str, float] = {}
        for dump in out.glob("cg.out.*"):
            text = dump.read_text()
            trigger = re.search(r"^desc: Trigger: dump (\w+)$", text, re.M)
            total = re.search(r"^totals: (\d+)$", text, re.M)
            if trigger and total:
                totals[trigger.group(1)] = int(total.group(1)) / queries
                if objects is not None:
                    split = by_object(dump)
                    objects[trigger.group(1)] = {k: v / queries for k, v in split.items()}
        missing = [name for name in PHASES if name not in totals]
        if missing:
            msg = f"instructions.py: no count for {missing} in the run of {root}"
            raise RuntimeError(msg)
        return totals


_COST_LINE = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+(.*)$")
_OBJECT = re.compile(r"\[([^\]]+)\]\s*$")


def by_object(dump: Path) -> dict[str, int]:
    """A dump's instructions by the shared object each function is in (``callgrind_annotate``).

    The interpreter's own functions count as ``python``, whether callgrind names
    their object (``libpython3.x.so``) or only their source file (inlined).
    """
    listing = subprocess.run(
        ["callgrind_annotate", "--inclusive=no", "--threshold=100", str(dump)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    out: dict[str, int] = {}
    for line in listing.splitlines():
        cost = _COST_LINE.match(line)
        if cost is None or "PROGRAM TOTALS" in line:
            continue
        where = _OBJECT.search(cost.group(2))
        name = where.group(1).rsplit("/", 1)[-1] if where else cost.group(2)
        if "libpython" in name or "/Python-" in name or name.startswith("python"):
            name = "python"
        elif where is None:
            name = "?"
        else:
            name = name.split(".", 1)[0]  # tantivy, libfaiss, _multiarray_umath, libc, ...
        out[name] = out.get(name, 0) + int(cost.group(1).replace(",", ""))
    return out


def render_objects(root: Path, objects: dict[str, dict[str, float]]) -> str:
    """Each phase's instructions per query by shared object (millions), largest first."""
    names = sorted(
        {name for split in objects.values() for name in split},
        key=lambda name: -max(split.get(name, 0.0) for split in objects.values()),
    )
    lines = [
        f"by shared object, {root} (millions per query)",
        "",
        "| object | " + " | ".join(PHASES) + " |",
        "| --- |" + " --- |" * len(PHASES),
    ]
    for name in names:
        cells = [f"{objects[p].get(name, 0.0) / 1e6:.3f}" for p in PHASES]
        if any(float(c) > 0.0005 for c in cells):
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _running_until(path: Path, proc: subprocess.Popen[bytes], root: Path) -> None:
    """Wait for the child to write ``path``; its log's end, if it stops first."""
    while not path.exists():
        if proc.poll() is not None:
            tail = (path.parent / "log").read_text()[-2000:]
            msg = f"instructions.py: the run of {root} stopped:\n{tail}"
            raise RuntimeError(msg)
        time.sleep(0.05)


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)


def rows(root: Path, totals: dict[str, float]) -> list[dict[str, Any]]:
    out = []
    for path in ("dense", "hybrid"):
        invoke, floor = totals[path], totals[f"floor_{path}"]
        out.append(
            {
                "code": str(root),
                "path": path,
                "invoke": invoke,
                "floor": floor,
                "own": invoke - floor,
                "ratio": invoke / floor,
            }
        )
    return out


def render(table: list[dict[str, Any]], size: int) -> str:
    lines = [
        f"instructions per query, {size:,} children (millions)",
        "",
        "| code | path | invoke | floor | own work | invoke / floor |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in table:
        lines.append(
            f"| {r['code']} | {r['path']} | {r['invoke'] / 1e6:.3f} | {r['floor'] / 1e6:.3f} "
            f"| {r['own'] / 1e6:.3f} | {r['ratio']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument("--size", type=int, default=10_000, help="children (default 10000)")
    parser.add_argument("--queries", type=int, default=30, help="queries per loop (default 30)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument(
        "--objects", action="store_true", help="also split each phase by shared object"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.size, args.queries, args.out)
        return 0
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"instructions.py needs {tool} on PATH (apt install valgrind); not found.")
            return 2
    roots = [p.resolve() for p in (args.code or [Path(__file__).resolve().parent.parent])]
    table: list[dict[str, Any]] = []
    splits: list[str] = []
    for root in roots:
        print(f"counting {root} ({args.size:,} children; a few minutes) ...", flush=True)
        objects: dict[str, dict[str, float]] | None = {} if args.objects else None
        table += rows(root, count(root, args.size, args.queries, objects))
        if objects:
            splits.append(render_objects(root, objects))
    print(render(table, args.size))
    for split in splits:
        print("\n" + split)
    if args.json is not None:
        args.json.write_text(json.dumps({"size": args.size, "rows": table}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
