"""``s2b index`` end to end against the embedding model's own throughput on the same chunks.

.. code-block:: bash

    python benchmarks/cli_bench.py                       # the bundled articles, offline e5
    python benchmarks/cli_bench.py --data examples/data/squad2-dev/documents.jsonl
    python benchmarks/cli_bench.py --repeat 2 --json out.json

Each paragraph of each article becomes one Markdown file in a temporary
folder (``--whole``: one file per article). ``raw`` is
``LocalE5Embeddings().embed_documents`` on exactly the chunks ``s2b index``
embeds (its own split), model already loaded, once in document order and once
shortest first (less padding); the ratio is taken against the faster of the two. ``s2b`` is
``s2b index FOLDER --store NEW`` through the command's ``main`` in this process
(reading files, splitting, embedding, the SQLite writes; the model load
included). Both are timed in the same run, alternately; the ratio is the
figure. The store's size is reported beside the text and the raw vectors.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_core.documents import Document  # noqa: E402

from langchain_s2b.cli.commands import main as s2b  # noqa: E402
from langchain_s2b.embeddings import LocalE5Embeddings  # noqa: E402

DATA = ROOT / "examples" / "data" / "articles.jsonl"


def write_corpus(data: Path, folder: Path, *, per_paragraph: bool) -> list[Document]:
    """One Markdown file per article, or per paragraph (many small files, as in a docs tree)."""
    docs = []
    with data.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh):
            text = json.loads(line)["text"]
            parts = [p for p in text.split("\n\n") if p.strip()] if per_paragraph else [text]
            for part_no, part in enumerate(parts):
                path = folder / f"article{number:03d}" / f"part{part_no:03d}.md"
                path.parent.mkdir(exist_ok=True)
                path.write_text(part, encoding="utf-8")
                docs.append(Document(page_content=part, metadata={"source": str(path)}))
    return docs


def chunks_of(docs: list[Document]) -> list[str]:
    """The chunks ``s2b index`` embeds, split the way it splits them."""
    try:
        from langchain_s2b.cli.indexer import leaf_texts
    except ImportError:  # an s2b before the planning pass: same tree, same split
        from langchain_core.embeddings import Embeddings

        from langchain_s2b.retriever import SmallToBigRetriever
        from langchain_s2b.store.faiss_index import FaissIndex

        class Recorder(Embeddings):
            texts: list[str] = []  # noqa: RUF012

            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                Recorder.texts += texts
                return [[1.0]] * len(texts)

            def embed_query(self, text: str) -> list[float]:
                return [1.0]

        SmallToBigRetriever(vectorstore=FaissIndex(Recorder()), mode="multilevel").add_documents(
            docs
        )
        return Recorder.texts
    return leaf_texts(docs)


def time_raw(model: LocalE5Embeddings, texts: list[str]) -> float:
    start = time.perf_counter()
    model.embed_documents(texts)
    return time.perf_counter() - start


def time_s2b(folder: Path, store: Path) -> float:
    start = time.perf_counter()
    code = s2b(["index", str(folder), "--store", str(store), "--embedding", "e5"])
    elapsed = time.perf_counter() - start
    if code != 0:
        msg = f"s2b index exited with {code}"
        raise SystemExit(msg)
    return elapsed


def store_size(store: Path, text_bytes: int) -> dict[str, float]:
    db = store / "s2b.sqlite"
    if not db.exists():
        files = [p for p in store.rglob("*") if p.is_file()]
        return {"bytes": sum(p.stat().st_size for p in files), "files": len(files)}
    with sqlite3.connect(db) as conn:
        vectors = int(conn.execute("SELECT sum(length(vec)) FROM vectors").fetchone()[0] or 0)
    size = db.stat().st_size
    return {
        "bytes": size,
        "files": 1,
        "text_bytes": text_bytes,
        "vector_bytes": vectors,
        "beyond_vectors_per_text_byte": round((size - vectors) / text_bytes, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="JSONL with a text field")
    parser.add_argument("--repeat", type=int, default=1, help="alternate raw/s2b this many times")
    parser.add_argument(
        "--whole", action="store_true", help="one file per article (default: one per paragraph)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    os.environ.pop("S2B_EMBEDDING", None)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        docs = write_corpus(args.data, folder, per_paragraph=not args.whole)
        texts = chunks_of(docs)
        model = LocalE5Embeddings()
        model.embed_documents(texts[:8])  # warm up
        by_length = sorted(texts, key=len)
        raw, raw_sorted, end_to_end = [], [], []
        for run in range(args.repeat):
            raw.append(time_raw(model, texts))
            raw_sorted.append(time_raw(model, by_length))
            store = Path(tmp) / f"store{run}"
            end_to_end.append(time_s2b(folder, store))
        size = store_size(store, sum(len(d.page_content.encode()) for d in docs))
    raw_rate = len(texts) / statistics.median(raw)
    sorted_rate = len(texts) / statistics.median(raw_sorted)
    best = max(raw_rate, sorted_rate)
    s2b_rate = len(texts) / statistics.median(end_to_end)
    result = {
        "data": str(args.data.relative_to(ROOT) if args.data.is_relative_to(ROOT) else args.data),
        "files": len(docs),
        "chunks": len(texts),
        "raw_chunks_per_s": round(raw_rate, 1),
        "raw_sorted_chunks_per_s": round(sorted_rate, 1),
        "s2b_index_chunks_per_s": round(s2b_rate, 1),
        "ratio": round(s2b_rate / best, 3),
        "store": size,
    }
    print(
        "| data | files | chunks | embedding alone (document order / shortest first) "
        "| s2b index end to end | ratio to the faster |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(
        f"| {result['data']} | {len(docs)} | {len(texts)} | {raw_rate:.1f} / {sorted_rate:.1f} "
        f"chunks/s | {s2b_rate:.1f} chunks/s | {s2b_rate / best:.2f} |"
    )
    print(f"store: {json.dumps(size)}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
