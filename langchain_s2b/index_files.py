"""Reading the child index's files back, checking every value (no pickle).

``FaissIndex.save`` writes ``children.jsonl`` (a JSON header line, then one
record per child) and ``children.faiss`` (``faiss.write_index`` of an
``IndexIDMap2``). These functions parse them and refuse anything that does not
match, so a damaged or foreign directory raises ``ValueError`` instead of
loading half an index.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import faiss

RECORDS_FORMAT = "langchain_s2b.faiss.v1"
_FACTORY = re.compile(r"^[A-Za-z0-9_,.\-]{1,200}$")
Record = tuple[int, str, str, dict[str, Any]]


def _damaged(file: Path, what: str) -> ValueError:
    return ValueError(f"{file} is not a langchain_s2b child index file: {what}.")


def _int(value: Any, name: str, file: Path, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _damaged(file, f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def read_records(file: Path) -> tuple[dict[str, Any], list[Record]]:
    """Parse and type-check ``children.jsonl``."""
    try:
        lines = file.read_bytes().decode("ascii").splitlines()
        rows = [json.loads(line) for line in lines]
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _damaged(file, f"not JSON lines ({err})") from None
    if not rows or not isinstance(rows[0], dict) or rows[0].get("format") != RECORDS_FORMAT:
        raise _damaged(file, f"the first line must be a header with format {RECORDS_FORMAT!r}")
    header = rows[0]
    dim = header.get("dim")
    if dim is not None:
        _int(dim, "dim", file, minimum=1)
    factory = header.get("factory")
    if not isinstance(factory, str) or not _FACTORY.match(factory):
        raise _damaged(file, f"factory must be a FAISS index_factory string, got {factory!r}")
    nxt = _int(header.get("next"), "next", file)
    count = _int(header.get("count"), "count", file)
    records: list[Record] = []
    seen_keys: set[str] = set()
    seen_rows: set[int] = set()
    for rec in rows[1:]:
        if not isinstance(rec, dict):
            raise _damaged(file, f"a record must be an object, got {type(rec).__name__}")
        row = _int(rec.get("row"), "row", file)
        key, text, meta = rec.get("key"), rec.get("text"), rec.get("meta")
        ok = isinstance(key, str) and key and isinstance(text, str) and isinstance(meta, dict)
        if not ok or row >= nxt or key in seen_keys or row in seen_rows:
            raise _damaged(file, f"bad record for row {row!r} (key {key!r})")
        seen_keys.add(str(key))
        seen_rows.add(row)
        records.append((row, str(key), str(text), dict(meta)))  # type: ignore[arg-type]
    if count != len(records):
        raise _damaged(file, f"the header counts {count} records but {len(records)} follow")
    params, size = header.get("search_params"), header.get("train_size")
    if (params is not None and not isinstance(params, str)) or not isinstance(
        header.get("staged", False), bool
    ):
        raise _damaged(file, "search_params must be a string and staged a boolean")
    options = {
        "search_params": params,
        "train_size": None if size is None else _int(size, "train_size", file, minimum=1),
    }
    staged = bool(header.get("staged", False))
    info = {"dim": dim, "factory": factory, "next": nxt, "staged": staged, "options": options}
    return info, records


def read_faiss(file: Path, dim: int, records: list[Record]) -> Any:
    """Read a FAISS file and check it matches the records exactly."""
    try:
        with file.open("rb") as fh:
            magic = fh.read(4)
    except FileNotFoundError:
        raise _damaged(file, "the file is missing") from None
    if magic != b"IxM2":
        raise _damaged(file, f"expected a FAISS IndexIDMap2 (magic b'IxM2'), found {magic!r}")
    try:
        index: Any = faiss.read_index(str(file))
    except RuntimeError as err:
        raise _damaged(file, f"FAISS could not read it ({str(err).splitlines()[-1]})") from None
    if index.d != dim:
        msg = (
            f"{file} holds {index.d}-dimensional vectors but the records say {dim}; "
            "the files do not belong together."
        )
        raise ValueError(msg)
    rows = sorted(int(r) for r in faiss.vector_to_array(index.id_map).tolist())
    if index.ntotal != len(records) or rows != sorted(r[0] for r in records):
        msg = (
            f"{file} holds {index.ntotal} vectors whose ids do not match the "
            f"{len(records)} records; the files do not belong together."
        )
        raise ValueError(msg)
    return index
