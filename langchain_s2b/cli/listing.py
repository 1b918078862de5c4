"""``s2b list``: the indexed files, the model and the store's size (light: SQLite only).

It reads the store's settings and its ``files`` table in one snapshot and
imports neither numpy, FAISS nor LangChain, so it answers in about the time
Python takes to start.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TextIO

from langchain_s2b.cli.errors import damaged_store, one_line, safe_json, shown_name
from langchain_s2b.cli.folder import (
    counts,
    counts_line,
    damaged_files,
    dangling_chunks,
    files,
    open_database,
    size,
)
from langchain_s2b.cli.options import EMBEDDING_ENV


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    """``s2b list --store DIR [--json]``: the indexed files, the model and the store's size."""
    directory = Path(args.store)
    db, spec = open_database(directory, args.embedding or os.environ.get(EMBEDDING_ENV) or None)
    try:
        with db.read():
            rows = files(db)
            found = counts(db)
            dangling = dangling_chunks(db)
            damaged_rows = len(damaged_files(db))
    finally:
        db.close()
    total = size(directory)  # closed: the write-ahead log is merged into the database file
    listed = [
        {
            "path": row.path,
            "documents": len(row.sources),
            "chunks": row.chunks,
            "exists": os.path.exists(row.path),
        }
        for row in rows.values()
    ]
    if args.json:
        payload = {"store": str(args.store), "embedding": spec, "bytes": total, **found}
        payload["files_indexed"] = listed
        print(safe_json(json.dumps(payload, ensure_ascii=False, indent=2)), file=out)
    else:
        for f in listed:
            state = "" if f["exists"] else "  (file no longer exists)"
            print(
                one_line(
                    f"{shown_name(str(f['path']))}  {f['documents']} document(s), "
                    f"{f['chunks']} chunk(s){state}"
                ),
                file=out,
            )
        print(one_line(f"{counts_line(found)} in {args.store}"), file=out)
        print(one_line(f"embedding {spec}; {_size(total)} on disk"), file=out)
    problems = [
        f"{dangling} chunk(s) without their vector" if dangling else "",
        f"{damaged_rows} damaged file record(s)" if damaged_rows else "",
    ]
    if dangling or damaged_rows:
        raise damaged_store(directory, ", ".join(p for p in problems if p))
    return 0


def _size(total: int) -> str:
    """``912 bytes``, ``1.3 MB``."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if total >= scale:
            return f"{total / scale:.1f} {unit}"
    return f"{total} bytes"
