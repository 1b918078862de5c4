r"""Keys and source ids: the one place their formats are written and read.

Every node of the span tree has a computed address, ``<source-key>/<level>/<split_id>``,
and every source a manifest at ``<source-key>/manifest``. The source key is
the source id encoded so that every LangChain ``BaseStore`` accepts it:
``LocalFileStore`` allows only ``[a-zA-Z0-9_.\\-/]``, and a key must never name
a path outside the store's directory. Encoding keeps ``[A-Za-z0-9_-]`` and
writes every other UTF-8 byte as ``.xx`` (lower-case hex), so an encoded key
never holds ``/`` and no path component is ``.`` or ``..``. Very long ids are
hashed.

Every written version of a source is a *generation* (copy-on-write): the
first (generation 0) lives under the source key itself, a later generation
``n`` under ``<source-key>.g<n>``. Encoding never writes ``.g`` (it writes
other bytes as ``.xx`` with lower-case hex digits, and hashed keys are hex), so
a generation key can not collide with any encoded id and stays store-safe.
The manifest at ``<source-key>/manifest`` names the current generation.

A source id made of several metadata fields (a composite id) joins their
values with ``|``, escaping ``\`` and ``|`` inside a value, so two different
tuples of values never give the same id.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

MANIFEST = "manifest"
PROXY_LEVEL = "proxy"
"""The reserved level of a proxy's key (:mod:`~langchain_s2b.core.proxy_spans`)."""
PROXY_MARK = f"/{PROXY_LEVEL}/"
"""What every proxy's key holds (``PROXY_MARK in key`` is :func:`is_proxy_key`, inlined)."""
_SAFE = re.compile(r"[A-Za-z0-9_-]")
_MAX_KEY_CHARS = 160
_HASHED_PREFIX = "h-"
_LEVEL_NAME = re.compile(r"^[a-z][a-z0-9_]*\Z")
_GENERATION = ".g"
_GENERATION_KEY = re.compile(r"^(?P<base>[^/]+?)\.g(?P<n>[1-9][0-9]*)\Z")


class NodeKey(NamedTuple):
    """A node key's three parts."""

    source_key: str
    level: str
    split_id: int


def encode_source_key(source_id: str) -> str:
    """Encode a source id into a store-safe key component."""
    if not isinstance(source_id, str) or not source_id:
        msg = f"A source id must be a non-empty string; got {source_id!r}."
        raise ValueError(msg)
    parts = []
    for char in source_id:
        if _SAFE.fullmatch(char):
            parts.append(char)
        else:
            raw = char.encode("utf-8", errors="surrogatepass")
            parts.append("".join(f".{byte:02x}" for byte in raw))
    encoded = "".join(parts)
    if len(encoded) > _MAX_KEY_CHARS or encoded.startswith(_HASHED_PREFIX):
        digest = hashlib.sha256(source_id.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{_HASHED_PREFIX}{digest[:40]}"
    return encoded


def generation_key(source_key: str, generation: int) -> str:
    """The key under which generation ``generation`` of a source keeps its nodes."""
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        msg = f"A generation must be an integer >= 0; got {generation!r}."
        raise ValueError(msg)
    return source_key if generation == 0 else f"{source_key}{_GENERATION}{generation}"


def split_generation(node_source_key: str) -> tuple[str, int]:
    """``(source key, generation)`` of a node's source key (inverse of :func:`generation_key`)."""
    if _GENERATION not in node_source_key:  # generation 0: most keys, no pattern to match
        return node_source_key, 0
    match = _GENERATION_KEY.match(node_source_key)
    if match is None:
        return node_source_key, 0
    return match["base"], int(match["n"])


def base_source_key(node_source_key: str) -> str:
    """The source key a node's (generation) source key belongs to: what ties are ordered by."""
    return split_generation(node_source_key)[0]


def composite_source_id(metadata: Mapping[str, Any], fields: Sequence[str]) -> str:
    r"""The source id from one metadata field, or several joined by ``|`` (escaped)."""
    if len(fields) == 1:
        return str(metadata[fields[0]])
    escaped = (str(metadata[name]).replace("\\", "\\\\").replace("|", "\\|") for name in fields)
    return "|".join(escaped)


def check_level_name(level: str) -> str:
    """Return ``level`` if it can be part of a key, else raise ``ValueError``."""
    if not isinstance(level, str) or not _LEVEL_NAME.match(level) or level == MANIFEST:
        msg = f"Level names must match [a-z][a-z0-9_]* and not be {MANIFEST!r}; got {level!r}."
        raise ValueError(msg)
    return level


def is_proxy_key(key: str) -> bool:
    """Whether a child key is a proxy's (a node key of level :data:`PROXY_LEVEL`)."""
    return PROXY_MARK in key


def node_key(source_key: str, level: str, split_id: int) -> str:
    """The address of node ``split_id`` of ``level`` in source ``source_key``."""
    return f"{source_key}/{level}/{split_id}"


def is_split_id(text: str) -> bool:
    """Whether ``text`` is a split id as :func:`node_key` writes it: ASCII digits, no leading 0."""
    return text.isdigit() and text.isascii() and (text[0] != "0" or text == "0")


def level_prefix(source_key: str, level: str) -> str:
    """What every key of one level of one source starts with (add the split id)."""
    return f"{source_key}/{level}/"


def manifest_key(source_key: str) -> str:
    """The address of a source's manifest."""
    return f"{source_key}/{MANIFEST}"


def parse_node_key(key: str) -> NodeKey:
    """Split a node key into ``(source_key, level, split_id)``; raise if it is not one."""
    parts = key.split("/")
    if (
        len(parts) == 3
        and parts[0]
        and parts[2].isdigit()
        and _LEVEL_NAME.match(parts[1])
        and parts[1] != MANIFEST
    ):
        return NodeKey(parts[0], parts[1], int(parts[2]))
    msg = f"Not a node key of the form '<source>/<level>/<split_id>': {key!r}."
    raise ValueError(msg)


def is_node_key(key: str) -> bool:
    """Whether ``key`` has the form of a node key."""
    try:
        parse_node_key(key)
    except ValueError:
        return False
    return True


def is_manifest_key(key: str) -> bool:
    """Whether ``key`` has the form of a manifest key."""
    source, _, last = key.partition("/")
    return last == MANIFEST and bool(source)


def source_key_of(key: str) -> str:
    """The source key a node or manifest key belongs to."""
    return key.partition("/")[0]


def level_of(key: str) -> str:
    """The level a node key belongs to."""
    return parse_node_key(key).level


def split_id_of(key: str) -> int:
    """The split id of a node key."""
    return parse_node_key(key).split_id
