"""The node store's files: numpy columns, one UTF-8 text file, JSON lines.

:func:`write_nodes` saves a node store's columns as they are: the ``(source,
level)`` columns concatenated (``np.savez``, read with ``allow_pickle=False``),
the sources' texts and the nodes' own texts in one UTF-8 file, the metadata
shapes and what is kept as given as JSON lines. :func:`read_nodes` reads them
back, every value checked, each level's columns cut from the sorted ones in
one pass: nothing is parsed or built per node.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document

from langchain_s2b.core.keys import is_manifest_key
from langchain_s2b.store.base import (
    Column,
    Shapes,
    check_slots,
    first_line,
    read_arrays,
    utf8_block,
)
from langchain_s2b.store.nodes.codec import check_document, encode_document
from langchain_s2b.store.nodes.levels import ABSENT, COLUMNS, DTYPES, Level, decode

ARRAYS_FILE = "nodes.npz"
TEXT_FILE = "nodes.utf8"
SHAPES_FILE = "nodes.shapes.jsonl"
NAMES_FILE = "nodes.names.json"
OTHER_FILE = "nodes.other.jsonl"
FILES = (ARRAYS_FILE, TEXT_FILE, SHAPES_FILE, NAMES_FILE, OTHER_FILE)


@dataclass
class NodeColumns:
    """What a node store holds, as its files save it."""

    shapes: Shapes
    texts: dict[str, bytes]
    """Source key -> its text as UTF-8 (a source none of whose nodes is held: none)."""
    levels: dict[tuple[str, str], Level]
    other: dict[str, Document | bytes]
    """Everything kept as given; read from a file: its JSON (a ``Document`` when asked for)."""
    held: dict[str, int] = field(default_factory=dict)
    """Source key -> how many of its nodes are held as spans."""


def write_nodes(directory: Path, nodes: NodeColumns) -> None:
    """Write ``nodes`` into ``directory`` as :data:`FILES`."""
    levels, texts = nodes.levels, nodes.texts
    sources = sorted({source for source, _ in levels} | set(texts))
    source_index = {s: i for i, s in enumerate(sources)}
    names = sorted({name for _, name in levels})
    name_index = {n: i for i, n in enumerate(names)}
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("source", "level", "split", "own")}
    parts |= {k: [] for k in COLUMNS}
    owns: list[str] = []
    for (source, name), level in sorted(levels.items()):
        splits = level.present()
        if not len(splits):
            continue
        parts["source"].append(np.full(len(splits), source_index[source], dtype=np.int32))
        parts["level"].append(np.full(len(splits), name_index[name], dtype=np.int32))
        parts["split"].append(splits)
        for column in COLUMNS:
            parts[column].append(getattr(level, column).data[splits])
        own = np.asarray([s in level.own for s in splits.tolist()], dtype=np.bool_)
        parts["own"].append(own)
        owns.extend(level.own[s] for s in splits[own].tolist())
    arrays = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in parts.items()}
    block, offsets = utf8_block(owns)
    arrays["text_bytes"] = np.asarray(
        [len(texts[s]) if s in texts else -1 for s in sources], dtype=np.int64
    )
    arrays["own_offsets"] = offsets
    np.savez(directory / ARRAYS_FILE, **arrays)  # type: ignore[arg-type]
    with (directory / TEXT_FILE).open("wb") as out:
        for source in sources:
            out.write(texts.get(source, b""))
        out.write(block)
    with (directory / SHAPES_FILE).open("w", encoding="ascii") as out:
        out.writelines(text + "\n" for text in nodes.shapes.texts)
    names_json = json.dumps({"sources": sources, "levels": names})
    (directory / NAMES_FILE).write_text(names_json + "\n", encoding="ascii")
    with (directory / OTHER_FILE).open("wb") as out:
        for key, doc in nodes.other.items():
            raw = doc if isinstance(doc, bytes) else encode_document(doc)
            out.write(json.dumps(key).encode("ascii") + b"\t" + raw + b"\n")


def read_nodes(directory: Path) -> tuple[NodeColumns, int]:
    """:func:`write_nodes`'s files read back, and how many node keys their manifests name.

    ``ValueError`` (:func:`damaged`) naming what is wrong.
    """
    where = directory / ARRAYS_FILE
    try:
        cols = read_arrays(where)
        raw = (directory / TEXT_FILE).read_bytes()
        shapes = (directory / SHAPES_FILE).read_text(encoding="ascii").split("\n")[:-1]
        names = json.loads((directory / NAMES_FILE).read_text(encoding="ascii"))
        other = (directory / OTHER_FILE).read_bytes().splitlines()
    except FileNotFoundError as err:
        raise damaged(Path(err.filename or where), "the file is missing") from None
    except (OSError, ValueError, KeyError, RecursionError) as err:
        raise damaged(where, f"it can not be read ({first_line(err)})") from None
    nodes = NodeColumns(Shapes.from_texts(shapes), {}, {}, {})
    try:  # a shape is checked when first decoded (a crafted one: a ValueError then)
        _fill(nodes, cols, raw, names)
        named = sum(_read_other(nodes, number, line) for number, line in enumerate(other, 1))
    except (ValueError, KeyError, IndexError, TypeError, RecursionError) as err:
        raise damaged(where, first_line(err)) from None
    return nodes, named


def damaged(file: Path, what: str) -> ValueError:
    """The error for a node store's file that can not be read."""
    return ValueError(f"{file} is not a langchain_s2b nodes file: {what}.")


def _read_other(nodes: NodeColumns, number: int, line: bytes) -> int:
    """Keep one line of :data:`OTHER_FILE`; how many node keys it names, if a manifest."""
    head, tab, raw = line.partition(b"\t")
    key = json.loads(head) if tab else None
    if not isinstance(key, str):
        msg = f"line {number} of {OTHER_FILE}: expected a JSON string key, a tab and a document"
        raise ValueError(msg)
    meta = check_document(raw, key)["metadata"]  # a Document is made when asked for
    nodes.other[key] = raw
    counts = meta.get("counts") if is_manifest_key(key) else None
    if not isinstance(counts, dict):
        return 0
    return sum(n for n in counts.values() if type(n) is int and n > 0)


def _fill(nodes: NodeColumns, cols: dict[str, np.ndarray], raw: bytes, names: Any) -> None:
    """``nodes``' texts, levels and held counts from the columns and the text file."""
    sources, levels = names["sources"], names["levels"]
    ok = isinstance(sources, list) and isinstance(levels, list)
    if not ok or not all(isinstance(x, str) and x for x in [*sources, *levels]):
        msg = "source keys and level names must be lists of non-empty strings"
        raise ValueError(msg)
    if len(set(sources)) != len(sources) or len(set(levels)) != len(levels):
        msg = "a source key or a level name is listed twice"
        raise ValueError(msg)
    n = len(cols["split"])
    col = {k: _ints(cols, k, n) for k in ("source", "level", "split", *COLUMNS)}
    own = _ints(cols, "own", n).astype(np.bool_)
    sizes = _ints(cols, "text_bytes", len(sources))
    own_offsets = _ints(cols, "own_offsets", int(own.sum()) + 1)
    lengths = np.maximum(sizes, 0)
    if (sizes < -1).any() or (sizes > len(raw)).any():
        msg = "a text length is outside the text file"
        raise ValueError(msg)
    total = int(lengths.sum())
    if own_offsets[0] != 0 or (np.diff(own_offsets) < 0).any():
        msg = "the own texts' offsets do not run forward from 0"
        raise ValueError(msg)
    if total + int(own_offsets[-1]) != len(raw):
        msg = "the text lengths do not add up to the text file"
        raise ValueError(msg)
    bounds = np.zeros(len(sources) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    for i, source in enumerate(sources):
        if sizes[i] >= 0:
            nodes.texts[source] = raw[bounds[i] : bounds[i + 1]]
    owns = raw[total:]
    for name, top in (("source", len(sources)), ("level", len(levels))):
        if n and (col[name].min() < 0 or col[name].max() >= top):
            msg = f"a node names a {name} that is not there"
            raise ValueError(msg)
    if n and (col["shape"].min() < 0 or col["shape"].max() >= len(nodes.shapes)):
        msg = "a node names a shape that is not there"
        raise ValueError(msg)
    if n and col["split"].min() < 0:
        msg = "a split id is negative"
        raise ValueError(msg)
    group = col["source"] * len(levels) + col["level"]
    order = np.lexsort((col["split"], group))
    cuts = np.flatnonzero(np.diff(group[order])) + 1
    if n:  # one slot per split id up to the largest, per source and level
        tops = col["split"][order][np.append(cuts, n) - 1].tolist()
        check_slots(sum(tops) + len(tops), n, "split ids")
    _check_levels(col, own, order, cuts, sizes, sources, levels)
    _fill_levels(nodes.levels, col, order, cuts, sources, levels)
    own_at = np.cumsum(own) - 1
    for member in np.flatnonzero(own).tolist():
        j = int(own_at[member])
        source, name = sources[int(col["source"][member])], levels[int(col["level"][member])]
        piece = owns[own_offsets[j] : own_offsets[j + 1]]
        nodes.levels[(source, name)].own[int(col["split"][member])] = decode(piece)
    counts = np.bincount(col["source"], minlength=len(sources)) if n else np.zeros(0, np.int64)
    held = nodes.held
    for i in np.flatnonzero(counts).tolist():
        held[sources[i]] = int(counts[i])
    for source in [s for s in nodes.texts if s not in held]:
        del nodes.texts[source]


def _fill_levels(
    into: dict[tuple[str, str], Level],
    col: dict[str, np.ndarray],
    order: np.ndarray,
    cuts: np.ndarray,
    sources: list[str],
    levels: list[str],
) -> None:
    """One :class:`Level` per source and level, its columns cut from the sorted ones.

    One pass of numpy over every node (issue 34: 1M nodes in ~20k levels
    opened 10x slower level by level): a level whose split ids run from 0
    without a gap takes its slice of each sorted column as it is.
    """
    if not len(order):
        return
    splits = col["split"][order]
    typed = {name: np.asarray(col[name][order], dtype=DTYPES[name]) for name in COLUMNS}
    firsts = np.append(0, cuts).tolist()
    lasts = np.append(cuts, len(order)).tolist()
    heads = order[firsts]
    names = zip(col["source"][heads].tolist(), col["level"][heads].tolist(), strict=True)
    for (source, name), a, b in zip(names, firsts, lasts, strict=True):
        size = int(splits[b - 1]) + 1
        level = Level.__new__(Level)
        level.own = {}
        whole = size == b - a  # distinct split ids, sorted: 0 .. size - 1 exactly
        for column in COLUMNS:
            fill = ABSENT if column == "shape" else 0
            if whole:
                data = typed[column][a:b].copy()
            else:
                data = np.full(size, fill, dtype=DTYPES[column])
                data[splits[a:b]] = typed[column][a:b]
            setattr(level, column, Column(DTYPES[column], fill, data))
        into[(sources[source], levels[name])] = level


def _check_levels(
    col: dict[str, np.ndarray],
    own: np.ndarray,
    order: np.ndarray,
    cuts: np.ndarray,
    sizes: np.ndarray,
    sources: list[str],
    levels: list[str],
) -> None:
    """Refuse a node given twice in its level, or a span outside its source's text.

    Levels in the order of ``order``; within one, a node given twice first.
    """
    if not len(order):
        return
    group_of = np.zeros(len(order), dtype=np.int64)  # each sorted node's level, 0, 1, ...
    group_of[cuts] = 1
    group_of = np.cumsum(group_of)
    ordered = col["split"][order]
    twice = np.zeros(len(order), dtype=np.bool_)
    twice[1:] = (np.diff(group_of) == 0) & (np.diff(ordered) == 0)
    text = np.maximum(sizes, 0)[col["source"][order]]
    absent = (sizes < 0)[col["source"][order]]
    bs, be = col["bstart"][order], col["bend"][order]
    cs, ce = col["start"][order], col["end"][order]
    outside = ~own[order] & (absent | (bs < 0) | (be < bs) | (be > text) | (cs < 0) | (ce < cs))
    bad_twice = group_of[twice].min() if twice.any() else len(order)
    bad_span = group_of[outside].min() if outside.any() else len(order)
    if bad_twice == bad_span == len(order):
        return
    first = int(order[np.flatnonzero(group_of == min(bad_twice, bad_span))[0]])
    source, name = sources[int(col["source"][first])], levels[int(col["level"][first])]
    if bad_twice <= bad_span:
        msg = f"a node of {source!r}, level {name!r} is given twice"
    else:
        msg = f"a span of {source!r} is outside its text"
    raise ValueError(msg)


def _ints(cols: dict[str, np.ndarray], name: str, n: int) -> np.ndarray:
    value = cols[name]
    if value.ndim != 1 or len(value) != n or value.dtype.kind not in "biu":
        msg = f"column {name!r} has shape {value.shape} of {value.dtype}, expected ({n},) integers"
        raise ValueError(msg)
    return value.astype(np.int64, copy=False)
