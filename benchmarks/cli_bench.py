"""``s2b index`` with the offline model against the model alone on the same chunks (issue 14).

.. code-block:: bash

    python benchmarks/cli_bench.py                          # this checkout, 3 rounds
    python benchmarks/cli_bench.py --code ../main --code .  # before / after, interleaved
    python benchmarks/cli_bench.py --json cli.json          # rows for run.py's targets table
    python benchmarks/cli_bench.py --profile prof.out       # cProfile of one s2b index run

The folder: dev-set articles (``examples/data/squad2-dev``), each paragraph one
Markdown file under a folder per article (a docs tree of small files). The two
sides, each in a fresh process with the same ``OMP_NUM_THREADS`` (``--threads``,
default 1) and the checkout's ``langchain_s2b`` on ``PYTHONPATH``:

- **model**: ``LocalE5Embeddings()`` (default batch size) embeds, in one
  ``embed_documents`` call in document order, exactly the distinct chunk texts
  ``s2b index`` embeds (``leaf_texts`` of each file's documents; the set is
  checked against the store's vector hashes after every run).
- **s2b**: ``main(["index", FOLDER, "--store", NEW, "--embedding", "e5"])``,
  in process: finding and reading files, splitting, embedding, the SQLite writes.

Both are steady-state figures: imports are outside both timings, and the
one-time model load (every ``LocalE5Embeddings.__init__`` the side runs,
SHA-256 check included) is timed on its own and subtracted from both; it is
reported beside them. Rounds interleave the sides (model, s2b, model, s2b ...;
with several ``--code``, each round runs every checkout). Figures are medians
over the rounds of wall clock and of process CPU time; ``share_of_model`` is
``s2b`` chunks/s divided by the model's (wall clock), ``share_of_model_cpu``
the same in CPU time. The machine's load average is recorded at every run.

Two runs of the same model on the same text differ by a few per cent here
(a shared 2-core machine), so ``share_of_model`` can come out above 100%.
Inside the ``s2b`` run the model's own calls are timed as well
(``s2b_model_s``; ``s2b_own_s`` is the rest, ``model_share_in_run`` the
model's share of the run): that split is the steadier view of where the
command's time goes. The order of the model side (document order, one call)
was checked against the command's (shortest first, 64 at a time): 11.5 and
10.8 s vs 11.2 and 11.1 s for the same 262 chunks, no difference.

``--json`` writes ``{"machine", "rows"}`` as ``run.py --json`` does, one
``section: "cli"`` row per checkout; :func:`measure` returns the same rows
for ``run.py`` to add to its own.
"""

from __future__ import annotations

import argparse
import hashlib
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

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "data" / "squad2-dev" / "documents.jsonl"
ARTICLES = ("sq2-1973_oil_crisis", "sq2-Packet_switching")
"""The two shortest dev articles: 262 chunks, ~13 s of model time per run at one thread."""


# The folder ------------------------------------------------------------------------


def write_folder(data: Path, folder: Path, articles: list[str]) -> int:
    """Each paragraph of each chosen article as ``folder/<article>/pNNN.md``; returns files."""
    files = 0
    wanted = set(articles)
    with data.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if wanted and row["id"] not in wanted:
                continue
            where = folder / row["id"]
            where.mkdir(parents=True, exist_ok=True)
            paragraphs = [p for p in row["text"].split("\n\n") if p.strip()]
            for number, paragraph in enumerate(paragraphs):
                (where / f"p{number:03d}.md").write_text(paragraph, encoding="utf-8")
                files += 1
    return files


# The two sides, each in its own process -----------------------------------------------


def _digest(hashes: list[bytes]) -> str:
    return hashlib.sha256(b"".join(sorted(hashes))).hexdigest()[:16]


class _LoadTimer:
    """Times every ``LocalE5Embeddings.__init__`` (the model load) in this process."""

    def __init__(self) -> None:
        from langchain_s2b.embeddings import LocalE5Embeddings

        self.wall = self.cpu = 0.0
        self.loads = 0
        original = LocalE5Embeddings.__init__
        timer = self

        def timed(model: Any, *args: Any, **kwargs: Any) -> None:
            w, c = time.perf_counter(), time.process_time()
            original(model, *args, **kwargs)
            timer.wall += time.perf_counter() - w
            timer.cpu += time.process_time() - c
            timer.loads += 1

        LocalE5Embeddings.__init__ = timed  # type: ignore[method-assign]


def _chunk_texts(folder: Path) -> list[str]:
    """The distinct chunks ``s2b index`` embeds for ``folder``, in document order."""
    from langchain_s2b.cli.indexer import leaf_texts
    from langchain_s2b.cli.loaders import find_files, read_documents

    texts: list[str] = []
    for path in find_files([folder]).files:
        docs = [d for d in read_documents(path, path.read_bytes()) if d.page_content.strip()]
        texts += leaf_texts(docs)
    return list(dict.fromkeys(texts))


def child_model(folder: Path) -> dict[str, Any]:
    """The model alone: load it, then embed the chunks in one call."""
    from langchain_s2b.embeddings import LocalE5Embeddings
    from langchain_s2b.store.sqlite import text_hash

    texts = _chunk_texts(folder)
    loads = _LoadTimer()
    model = LocalE5Embeddings()
    w, c = time.perf_counter(), time.process_time()
    vectors = model.embed_documents(texts)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    assert len(vectors) == len(texts)
    return {
        "chunks": len(texts),
        "texts": _digest([text_hash(t) for t in texts]),
        "wall": wall,
        "cpu": cpu,
        "load_wall": loads.wall,
        "load_cpu": loads.cpu,
        "loads": loads.loads,
    }


def child_s2b(folder: Path, store: Path, profile: Path | None) -> dict[str, Any]:
    """``s2b index FOLDER --store NEW`` through the command's ``main``, in this process."""
    import sqlite3

    from langchain_s2b.cli.commands import main
    from langchain_s2b.embeddings import LocalE5Embeddings

    loads = _LoadTimer()
    model_time = {"wall": 0.0, "cpu": 0.0}
    embed = LocalE5Embeddings.embed_documents

    def timed_embed(model: Any, texts: list[str]) -> list[list[float]]:
        w, c = time.perf_counter(), time.process_time()
        try:
            return embed(model, texts)
        finally:
            model_time["wall"] += time.perf_counter() - w
            model_time["cpu"] += time.process_time() - c

    LocalE5Embeddings.embed_documents = timed_embed  # type: ignore[method-assign]
    argv = ["index", str(folder), "--store", str(store), "--embedding", "e5"]
    w, c = time.perf_counter(), time.process_time()
    if profile is None:
        code = main(argv)
    else:
        import cProfile

        profiler = cProfile.Profile()
        code = profiler.runcall(main, argv)
        profiler.dump_stats(profile)
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    if code != 0:
        msg = f"s2b index exited with {code}"
        raise SystemExit(msg)
    with sqlite3.connect(store / "s2b.sqlite") as conn:
        hashes = [bytes(r[0]) for r in conn.execute("SELECT hash FROM vectors")]
    return {
        "chunks": len(hashes),
        "texts": _digest(hashes),
        "wall": wall - loads.wall,
        "cpu": cpu - loads.cpu,
        "load_wall": loads.wall,
        "load_cpu": loads.cpu,
        "loads": loads.loads,
        "model_wall": model_time["wall"],
        "model_cpu": model_time["cpu"],
    }


def run_child(side: str, code: Path, folder: Path, store: Path, threads: int) -> dict[str, Any]:
    """One side in a fresh Python process with ``code``'s ``langchain_s2b``."""
    env = dict(os.environ, PYTHONPATH=str(code), OMP_NUM_THREADS=str(threads))
    env.pop("S2B_EMBEDDING", None)
    load = os.getloadavg()[0]
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--child", side, "--folder", str(folder)]
        command += ["--store", str(store), "--out", out.name]
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, cwd=code)
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
    if not Path(result["module"]).is_relative_to(code):
        msg = f"the {side} run imported {result['module']}, not the langchain_s2b of {code}"
        raise SystemExit(msg)
    result["load_average"] = load
    return result


# Summary ----------------------------------------------------------------------------


def summarise(code: str, runs: dict[str, list[dict[str, Any]]], files: int) -> dict[str, Any]:
    """One row per checkout: medians of both sides and the shares."""
    model, s2b = runs["model"], runs["s2b"]
    chunks = model[0]["chunks"]

    def med(side: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in side)

    model_rate, s2b_rate = chunks / med(model, "wall"), chunks / med(s2b, "wall")
    model_cpu_rate, s2b_cpu_rate = chunks / med(model, "cpu"), chunks / med(s2b, "cpu")
    return {
        "section": "cli",
        "code": code,
        "files": files,
        "chunks": chunks,
        "rounds": len(s2b),
        "model_alone_per_s": round(model_rate, 2),
        "s2b_index_per_s": round(s2b_rate, 2),
        "share_of_model": round(s2b_rate / model_rate, 3),
        "model_alone_cpu_per_s": round(model_cpu_rate, 2),
        "s2b_index_cpu_per_s": round(s2b_cpu_rate, 2),
        "share_of_model_cpu": round(s2b_cpu_rate / model_cpu_rate, 3),
        "model_load_s": round(med(model, "load_wall"), 3),
        "s2b_load_s": round(med(s2b, "load_wall"), 3),
        "s2b_model_loads": s2b[0]["loads"],
        "s2b_model_s": round(med(s2b, "model_wall"), 2),
        "s2b_own_s": round(statistics.median(r["wall"] - r["model_wall"] for r in s2b), 2),
        "model_share_in_run": round(statistics.median(r["model_wall"] / r["wall"] for r in s2b), 3),
        "share_with_load": round(
            (med(model, "wall") + med(model, "load_wall"))
            / (med(s2b, "wall") + med(s2b, "load_wall")),
            3,
        ),
        "load_average": " ".join(
            f"{r['load_average']:.1f}" for pair in zip(model, s2b, strict=True) for r in pair
        ),
    }


def print_rows(rows: list[dict[str, Any]]) -> None:
    """The rows as a Markdown table."""
    print(
        "| code | files | chunks | rounds | model alone | s2b index | share (wall / CPU) "
        "| load: model / s2b | s2b: model / own (model's share) | with load | load average |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        print(
            f"| {r['code']} | {r['files']} | {r['chunks']} | {r['rounds']} "
            f"| {r['model_alone_per_s']:.2f}/s | {r['s2b_index_per_s']:.2f}/s "
            f"| **{r['share_of_model']:.1%}** / {r['share_of_model_cpu']:.1%} "
            f"| {r['model_load_s']:.2f} / {r['s2b_load_s']:.2f} s ({r['s2b_model_loads']}x) "
            f"| {r['s2b_model_s']:.2f} / {r['s2b_own_s']:.2f} s ({r['model_share_in_run']:.1%}) "
            f"| {r['share_with_load']:.1%} "
            f"| {r['load_average']} |"
        )


def machine() -> dict[str, Any]:
    """What the figures ran on."""
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }


def measure(
    codes: list[Path],
    *,
    rounds: int = 3,
    threads: int = 1,
    articles: list[str] | None = None,
    data: Path = DATA,
) -> list[dict[str, Any]]:
    """Interleaved rounds for every checkout in ``codes``; one ``cli`` row per checkout."""
    tmp = Path(tempfile.mkdtemp(prefix="s2b-cli-bench-"))
    try:
        folder = tmp / "docs"
        files = write_folder(data, folder, list(ARTICLES if articles is None else articles))
        runs: dict[str, Any] = {str(c): {"model": [], "s2b": []} for c in codes}
        for number in range(rounds):
            for code in codes:
                store = tmp / f"store-{number}-{codes.index(code)}"
                for side in ("model", "s2b"):
                    result = run_child(side, code, folder, store, threads)
                    runs[str(code)][side].append(result)
                    print(
                        f"round {number + 1} {code} {side}: {result['chunks']} chunks "
                        f"{result['wall']:.2f} s wall {result['cpu']:.2f} s CPU "
                        f"(load {result['load_wall']:.2f} s; load average "
                        f"{result['load_average']:.1f})",
                        file=sys.stderr,
                    )
                mine = runs[str(code)]
                if mine["model"][-1]["texts"] != mine["s2b"][-1]["texts"]:
                    msg = f"{code}: s2b index embedded other chunks than the model side"
                    raise SystemExit(msg)
                shutil.rmtree(store)
        return [summarise(str(c), runs[str(c)], files) for c in codes]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, action="append", help="checkout(s) to measure")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS for both sides")
    parser.add_argument("--articles", nargs="*", help="dev-set article ids (default: two)")
    parser.add_argument("--all", action="store_true", help="all 16 dev articles (slow)")
    parser.add_argument("--json", type=Path, help="write {machine, rows} here (run.py --render)")
    parser.add_argument("--profile", type=Path, help="cProfile one s2b index run into this file")
    parser.add_argument("--child", choices=["model", "s2b"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--store", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        profile = (
            Path(os.environ["S2B_BENCH_PROFILE"]) if "S2B_BENCH_PROFILE" in os.environ else None
        )
        if args.child == "model":
            result = child_model(args.folder)
        else:
            result = child_s2b(args.folder, args.store, profile)
        import langchain_s2b

        result["module"] = langchain_s2b.__file__
        args.out.write_text(json.dumps(result), encoding="utf-8")
        return 0
    codes = [c.resolve() for c in (args.code or [ROOT])]
    articles = [] if args.all else args.articles
    if args.profile:
        os.environ["S2B_BENCH_PROFILE"] = str(args.profile.resolve())
        rows = measure(codes[:1], rounds=1, threads=args.threads, articles=articles)
        print(f"profile of one s2b index run: {args.profile}", file=sys.stderr)
    else:
        rows = measure(codes, rounds=args.rounds, threads=args.threads, articles=articles)
    info = machine()
    print("machine:", json.dumps(info))
    print_rows(rows)
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
