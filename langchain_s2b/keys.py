r"""Store-safe keys: every node of the span tree has a computed address.

A key is ``<source-key>/<level>/<split_id>``. The source key is the source id
encoded so that every LangChain ``BaseStore`` accepts it: ``LocalFileStore``
allows only ``[a-zA-Z0-9_.\\-/]``, and a key must never name a path outside the
store's directory. Encoding keeps ``[A-Za-z0-9_-]`` and writes every other
UTF-8 byte as ``.xx`` (lower-case hex), so an encoded key never holds ``/``
and no path component is ``.`` or ``..``; decoding is exact. Very long ids are
hashed.
"""

from __future__ import annotations

import hashlib
import re

MANIFEST = "manifest"
_SAFE = re.compile(r"[A-Za-z0-9_-]")
_MAX_KEY_CHARS = 160
_HASHED_PREFIX = "h-"
_LEVEL_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def encode_source_key(source_id: str) -> str:
    """Encode a source id into a store-safe, reversible key component."""
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


def decode_source_key(key: str) -> str | None:
    """Invert :func:`encode_source_key`; ``None`` for a hashed (long) id."""
    if key.startswith(_HASHED_PREFIX):
        return None
    out = bytearray()
    i = 0
    while i < len(key):
        if key[i] == ".":
            out.append(int(key[i + 1 : i + 3], 16))
            i += 3
        else:
            out.extend(key[i].encode("ascii"))
            i += 1
    return out.decode("utf-8", errors="surrogatepass")


def check_level_name(level: str) -> str:
    """Return ``level`` if it can be part of a key, else raise ``ValueError``."""
    if not _LEVEL_NAME.match(level) or level == MANIFEST:
        msg = f"Level names must match [a-z][a-z0-9_]* and not be {MANIFEST!r}; got {level!r}."
        raise ValueError(msg)
    return level


def node_key(source_key: str, level: str, split_id: int) -> str:
    """The address of node ``split_id`` of ``level`` in source ``source_key``."""
    return f"{source_key}/{level}/{split_id}"


def manifest_key(source_key: str) -> str:
    """The address of a source's manifest."""
    return f"{source_key}/{MANIFEST}"


def parse_node_key(key: str) -> tuple[str, str, int]:
    """Split a node key into ``(source_key, level, split_id)``."""
    try:
        source_key, level, split = key.rsplit("/", 2)
        return source_key, level, int(split)
    except ValueError:
        msg = f"Not a node key of the form '<source>/<level>/<split_id>': {key!r}."
        raise ValueError(msg) from None
