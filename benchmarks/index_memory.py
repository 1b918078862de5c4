"""Peak memory of ``s2b index`` on one big text file against a folder of the same size (issue 28).

.. code-block:: bash

    python benchmarks/index_memory.py                              # this checkout, 10 and 50 MB
    python benchmarks/index_memory.py --code ../base --code .      # before / after, one run
    python benchmarks/index_memory.py --sizes 10 --json out.json   # rows as JSON

The text: synthetic articles (:class:`corpus.Synthesiser`, real sentences from the
bundled SQuAD dev articles with 15% of the words swapped, so every sentence is
distinct), each ``Article N`` and ~40 paragraphs, ~28 KB. For each size the same
articles are written twice: as **one file** (``one.txt``, the articles joined by
blank lines) and as a **folder** of one ``.txt`` file per article (a docs tree:
``/usr/share/doc`` averages 39 KB a file). Both hold the same text, so the same
chunks and vectors.

Each run is ``s2b index PATH --store NEW --embedding fake`` in a fresh process
with the checkout's ``langchain_s2b`` on ``PYTHONPATH``. ``fake`` is
:class:`~langchain_s2b.embeddings.HashingEmbeddings` (a hashed bag of words, 256
dimensions, no model): the command's own memory is measured, not a model's, and
the runs finish. Its peak RSS is that child's ``ru_maxrss`` (``os.wait4``), and
**growth** is the peak less the peak of a bare interpreter that imports what
``s2b index`` imports (``baseline``), so ``growth_x`` is the memory the run
added per byte of text. Every line the run prints on stderr (a pipe: progress
lines every 5 s) is timed: ``longest_silence_s`` is the longest time without
one between the first progress line and the end of the process, and
``phases`` the phases that printed a line; ``longest_still_s`` is the longest time
the count a progress line shows stood still (a line that repeats it does not move it).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import Synthesiser

MB = 10**6
ARTICLE_SEED = 11
IMPORTS = (
    "import langchain_s2b.cli.actions, langchain_s2b.cli.indexer, langchain_s2b.cli.index_dir, "
    "langchain_s2b.store.sqlite.sqlite_faiss, langchain_s2b.embeddings"
)
"""What ``s2b index`` has imported before it reads a file (the baseline process imports it)."""
RUN = "import sys; from langchain_s2b.cli.commands import main; sys.exit(main(sys.argv[1:]))"
_PHASE = re.compile(r"^s2b: ([^:]+): ")
_COUNT = re.compile(r"^s2b: ([^:]+): ([\d.]+ ?\w*)/")


def write_corpus(where: Path, size: int) -> tuple[Path, Path, int]:
    """``(one file, folder, articles)`` of ``size`` bytes of text each (the same articles)."""
    one, folder = where / f"one-{size // MB}mb.txt", where / f"folder-{size // MB}mb"
    folder.mkdir(parents=True, exist_ok=True)
    synth = Synthesiser(seed=ARTICLE_SEED)
    articles: list[str] = []
    total = 0
    while total < size:
        article = f"Article {len(articles)}\n\n{synth.article()}"
        articles.append(article)
        total += len(article.encode()) + 2
    one.write_text("\n\n".join(articles), encoding="utf-8")
    for i, article in enumerate(articles):
        (folder / f"article-{i:05d}.txt").write_text(article, encoding="utf-8")
    return one, folder, len(articles)


def _env(code: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(code.resolve()), OMP_NUM_THREADS="1")
    env.pop("S2B_EMBEDDING", None)
    return env


def _child(argv: list[str], code: Path) -> tuple[int, float, float, list[tuple[float, str]]]:
    """Run ``python argv`` with the checkout: ``(exit code, peak RSS MB, seconds, stderr lines)``.

    Peak RSS is this child's ``ru_maxrss`` (``os.wait4``: its own, not that of
    every child so far); each stderr line comes with the seconds since the start.
    It runs in the filesystem root: ``python -c`` puts its working directory
    first on ``sys.path``, which would import the checkout it was started from.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, *argv],
        env=_env(code),
        cwd="/",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.monotonic() - start, line.rstrip("\n")))

    reader = threading.Thread(target=read)
    reader.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    return proc.returncode, usage.ru_maxrss / 1024, seconds, lines


def baseline(code: Path) -> float:
    """Peak RSS (MB) of an interpreter that imports what ``s2b index`` imports, and nothing else."""
    _, peak, _, _ = _child(["-c", IMPORTS], code)
    return peak


def index_run(code: Path, path: Path, store: Path) -> dict[str, Any]:
    """One ``s2b index`` in a fresh process; its peak RSS and how often it spoke."""
    shutil.rmtree(store, ignore_errors=True)
    argv = ["-c", RUN, "index", str(path), "--store", str(store), "--embedding", "fake"]
    code_, peak, seconds, lines = _child(argv, code)
    if code_ != 0:
        msg = f"s2b index {path} failed ({code_}): {[line for _, line in lines][-3:]}"
        raise RuntimeError(msg)
    progress = [(t, m.group(1)) for t, line in lines if (m := _PHASE.match(line))]
    times = [t for t, _ in progress] + [seconds]
    silence = max((b - a for a, b in itertools.pairwise(times)), default=seconds)
    phases = list(dict.fromkeys(phase for _, phase in progress))
    return {
        "longest_still_s": round(_longest_still(lines, seconds), 1),
        "peak_rss_mb": round(peak, 1),
        "seconds": round(seconds, 1),
        "first_line_s": round(progress[0][0], 1) if progress else None,
        "longest_silence_s": round(silence, 1),
        "phases": phases,
        "lines": len(progress),
    }


def _longest_still(lines: list[tuple[float, str]], seconds: float) -> float:
    """The longest time the shown count stood still: from a line to the next one whose
    phase or count differs (a line that repeats the count does not move it), or the end."""
    shown = [(t, (m.group(1), m.group(2))) for t, line in lines if (m := _COUNT.match(line))]
    moved = [t for i, (t, what) in enumerate(shown) if i == 0 or what != shown[i - 1][1]]
    times = [*moved, seconds]
    return max((b - a for a, b in itertools.pairwise(times)), default=seconds)


def _commit(code: Path) -> str:
    try:
        found = subprocess.run(
            ["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return found.stdout.strip()


def machine() -> dict[str, Any]:
    """Where the figures come from."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def measure(
    codes: list[Path], sizes: list[int], work: Path, cases: tuple[str, ...] = ("file", "folder")
) -> list[dict[str, Any]]:
    """Every checkout on every size, one file and one folder; rows in run order."""
    rows: list[dict[str, Any]] = []
    bases = {code: baseline(code) for code in codes}
    for size in sizes:
        one, folder, articles = write_corpus(work / "text", size * MB)
        for code in codes:
            for case, path in (("file", one), ("folder", folder)):
                if case not in cases:
                    continue
                run = index_run(code, path, work / "store")
                growth = run["peak_rss_mb"] - bases[code]
                row = {
                    "code": str(code),
                    "commit": _commit(code),
                    "case": case,
                    "mb": size,
                    "files": 1 if case == "file" else articles,
                    "baseline_mb": round(bases[code], 1),
                    **run,
                    "growth_mb": round(growth, 1),
                    "growth_x": round(growth / size, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def measure_file(code: Path, text: Path, work: Path) -> dict[str, Any]:
    """One given file indexed by one checkout, with its chunks (what FAISS holds per byte)."""
    run = index_run(code, text, work / "store")
    chunks = _chunks(work / "store")
    base = baseline(code)
    size = text.stat().st_size / MB
    growth = run["peak_rss_mb"] - base
    row = {
        "code": str(code),
        "commit": _commit(code),
        "case": "file",
        "text": text.name,
        "mb": round(size, 1),
        "files": 1,
        "chunks": chunks,
        "chars_per_chunk": round(size * MB / chunks),
        "baseline_mb": round(base, 1),
        **run,
        "growth_mb": round(growth, 1),
        "growth_x": round(growth / size, 1),
    }
    print(json.dumps(row), flush=True)
    return row


def _chunks(store: Path) -> int:
    """The chunks (FAISS rows) of the store just indexed."""
    import sqlite3

    with sqlite3.connect(store / "s2b.sqlite") as db:
        (count,) = db.execute("SELECT COUNT(*) FROM children").fetchone()
    return int(count)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    head = (
        "| commit | text | peak RSS | growth | growth / text | seconds | longest silence "
        "| count still |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )
    body = "".join(
        f"| {r['commit']} | {r['mb']} MB, "
        f"{'one file' if r['case'] == 'file' else str(r['files']) + ' files'} | "
        f"{r['peak_rss_mb']:.0f} MB | {r['growth_mb']:.0f} MB | {r['growth_x']}x | "
        f"{r['seconds']:.0f} | {r['longest_silence_s']:.0f} s | {r['longest_still_s']:.0f} s |\n"
        for r in rows
    )
    return head + body


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print the table; write the rows as JSON when asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", action="append", type=Path, help="a checkout (repeatable)")
    parser.add_argument("--sizes", nargs="+", type=int, default=[10, 50], help="sizes in MB")
    parser.add_argument("--json", type=Path, help="write {machine, rows} here")
    parser.add_argument(
        "--text", type=Path, action="append",
        help="index this file too (one file), e.g. a text of short lines (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--cases", nargs="+", choices=("file", "folder"), default=["file", "folder"],
        help="one file, a folder of the same text, or both",
    )  # fmt: skip
    args = parser.parse_args(argv)
    codes = args.code or [Path(__file__).resolve().parents[1]]
    with tempfile.TemporaryDirectory(prefix="s2b-memory-") as tmp:
        rows = measure(codes, args.sizes, Path(tmp), tuple(args.cases))
        rows += [measure_file(code, text, Path(tmp)) for text in args.text or [] for code in codes]
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
