"""One ``search`` through ``s2b serve`` against the same query through ``s2b query`` (issue 23).

.. code-block:: bash

    python benchmarks/serve_bench.py                       # 100k-chunk store in a temp folder
    python benchmarks/serve_bench.py --store /tmp/s2b-100k  # build it once, reuse it after
    python benchmarks/serve_bench.py --json serve.json

The store: synthetic articles (:class:`corpus.Synthesiser`, ~200 sentences
each) written as one ``.txt`` file per article and indexed by ``s2b index
--embedding fake`` until it holds at least ``--chunks`` children (100,000).

The two sides, in one run, same store, same questions (SQuAD dev questions),
same options (``k=4``, parent mode, the defaults):

- **server**: ``s2b serve --store DIR`` over stdio, driven by the MCP SDK's own
  client (``ClientSession.call_tool("search", ...)``). Reported: the time from
  starting the process to an initialised session (the store is opened: its
  FAISS file read, memory-mapped, before the server answers), the first
  ``search``, then each ``search`` call's round trip.
- **s2b query**: ``python -m langchain_s2b query Q --store DIR`` as a user runs
  it, a fresh process per question (imports, opening the store and its FAISS
  file, the search, printing).

Rounds interleave the sides (a server call, then the command, per question).
Then one file is indexed into the store by another process while the server
runs, and the next ``search`` is timed (it sees the commit and opens the FAISS
file of that commit), then the one after it. The server's top context is checked against
``s2b query --json``'s for every question. Figures are medians; the machine's
load average is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from corpus import Synthesiser, load_questions
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "S2B_EMBEDDING": "fake"}


def children(store: Path) -> int:
    with sqlite3.connect(store / "s2b.sqlite") as conn:
        return int(conn.execute("SELECT count(*) FROM children").fetchone()[0])


def s2b(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "langchain_s2b", *argv],
        capture_output=True, text=True, env=ENV, check=True,
    )  # fmt: skip


def build(store: Path, folder: Path, chunks: int) -> int:
    """Index synthetic articles until the store holds ``chunks`` children; returns the count."""
    if (store / "s2b.sqlite").exists() and children(store) >= chunks:
        return children(store)
    folder.mkdir(parents=True, exist_ok=True)
    synth = Synthesiser()
    start, batch = len(list(folder.glob("*.txt"))), 100
    while True:
        docs = synth.documents(batch, start=start + len(synth.seed_articles))
        for i, doc in enumerate(docs, start):
            (folder / f"a{i:05d}.txt").write_text(doc.page_content, encoding="utf-8")
        start += batch
        began = time.perf_counter()
        s2b("index", str(folder), "--store", str(store))
        have = children(store)
        print(f"  {start} files, {have} children ({time.perf_counter() - began:.0f} s)")
        if have >= chunks:
            return have
        batch = max(5, min(100, int((chunks - have) / (have / start)) + 5))


def command_query(store: Path, question: str) -> tuple[float, dict[str, Any]]:
    began = time.perf_counter()
    s2b("query", question, "--store", str(store))
    took = time.perf_counter() - began
    top = json.loads(s2b("query", question, "--store", str(store), "--json").stdout)["results"][0]
    return took, top


async def measure(store: Path, questions: list[str], extra: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "langchain_s2b", "serve", "--store", str(store)]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=ENV)
    server_s: list[float] = []
    command_s: list[float] = []
    began = time.perf_counter()
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        startup = time.perf_counter() - began

        async def search(question: str) -> tuple[float, dict[str, Any]]:
            t0 = time.perf_counter()
            result = await session.call_tool("search", {"query": question})
            took = time.perf_counter() - t0
            assert not result.isError, result.content
            return took, result.structuredContent["contexts"][0]

        first, _ = await search(questions[0])
        for question in questions:
            took, context = await search(question)
            server_s.append(took)
            took_cmd, top = command_query(store, question)
            command_s.append(took_cmd)
            meta = top["metadata"]
            assert (context["source"], context["start"], context["end"]) == (
                meta["source_id"], meta["start"], meta["end"],
            ), question  # fmt: skip
        extra.write_text("Duke William of Normandy conquered England in 1066.\n")
        s2b("index", str(extra.parent), "--store", str(store))  # another process commits
        after_commit, context = await search("Duke William conquered England")
        assert context["source"] == str(extra), context
        next_call, _ = await search("Duke William conquered England")
    server, command = statistics.median(server_s), statistics.median(command_s)
    return {
        "children": children(store),
        "questions": len(questions),
        "server_startup_s": round(startup, 3),
        "server_first_search_s": round(first, 3),
        "server_search_s": round(server, 4),
        "server_search_all_s": [round(t, 4) for t in server_s],
        "s2b_query_s": round(command, 3),
        "s2b_query_all_s": [round(t, 3) for t in command_s],
        "s2b_query_over_server": round(command / server, 1),
        "server_search_after_a_commit_s": round(after_commit, 3),
        "server_search_next_s": round(next_call, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="the store (built when missing)")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=9)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or Path(tmp) / "store"
        folder = store.parent / f"{store.name}-files"
        print(f"store {store}: building to >= {args.chunks} children ...")
        build(store, folder, args.chunks)
        extra_dir = store.parent / f"{store.name}-extra"
        extra_dir.mkdir(exist_ok=True)
        questions = load_questions(args.questions)
        result = anyio.run(measure, store, questions, extra_dir / "william.txt")
        s2b("delete", str(extra_dir), "--store", str(store))
    result["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
