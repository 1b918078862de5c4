"""The node keys a node store keeps as spans: ``<source_key>/<level>/<split id>``.

A key the grammar does not name (a manifest, a key of the user's) is kept as
given. :class:`KeyReader` parses keys on the read path, where a query reads a
few dozen keys of a few levels: it parses each ``<source_key>/<level>`` once
(issue 34), and agrees with :data:`NODE_KEY` on every string.
"""

from __future__ import annotations

import re

NODE_KEY = re.compile(r"^([^/]+)/([a-z][a-z0-9_]*)/(0|[1-9][0-9]*)\Z")
"""``(source key, level name, split id)`` of a node key."""
_HEAD = re.compile(r"([^/]+)/([a-z][a-z0-9_]*)\Z")
"""A node key's ``<source_key>/<level>`` (matched from its start)."""
_NO_NODE = ("", "")
"""What :class:`KeyReader` keeps for a head that names no node (a source key is never empty)."""
HEADS_KEPT = 4096
"""How many parsed heads :class:`KeyReader` keeps (cleared when full)."""


class KeyReader:
    """:data:`NODE_KEY` for reads: each key's head parsed once, its split id checked inline.

    Safe to share between threads: each lookup is one ``dict.get`` (a head
    another thread's clearing removed is parsed again).
    """

    __slots__ = ("_heads",)

    def __init__(self) -> None:
        self._heads: dict[str, tuple[str, str]] = {}
        """Head -> ``(source key, level name)``, or :data:`_NO_NODE` where it names none."""

    def __call__(self, key: str) -> tuple[tuple[str, str], int] | None:
        """``((source key, level name), split id)`` of a node key, else ``None``."""
        head, _, digits = key.rpartition("/")
        if not (digits.isascii() and digits.isdigit()) or (digits[0] == "0" and digits != "0"):
            return None
        pair = self._heads.get(head) or self._parse(head)
        return None if pair is _NO_NODE else (pair, int(digits))

    def level_of(self, prefix: str) -> tuple[str, str] | None:
        """``(source key, level name)`` of a prefix ``<source_key>/<level>/``, else ``None``.

        The pair every key ``prefix + split id`` parses to.
        """
        head = prefix[:-1]
        if prefix[-1:] != "/":
            return None
        pair = self._heads.get(head) or self._parse(head)
        return None if pair is _NO_NODE else pair

    def _parse(self, head: str) -> tuple[str, str]:
        heads = self._heads
        match = _HEAD.match(head)
        pair = _NO_NODE if match is None else (match[1], match[2])
        if len(heads) >= HEADS_KEPT:
            heads.clear()
        heads[head] = pair
        return pair
