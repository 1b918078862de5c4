"""Junk leaves: fragments with nothing to match (``..``, ``----``, ``1.``) are stored, not embedded.

A sentence splitter run over reStructuredText, Markdown or a numbered list
leaves fragments such as ``..``, ``----``, ``*`` or ``1.`` as leaves of their
own. Embedded, they match almost any query a little, come back as hits and
crowd out real text. A leaf without a letter (in any script) is therefore not
embedded; it stays in the docstore, so windows, parents and documents keep
every character and their spans stay exact. Digits alone do not make a leaf
worth embedding: a list number or a page number has nothing to match.
"""

from __future__ import annotations


def is_junk(text: str) -> bool:
    """True when ``text`` has no letter: it is stored but not embedded."""
    # most leaves start with a letter; the rest are read in C (map), not by a generator
    return not (text[:1].isalpha() or any(map(str.isalpha, text)))
