"""What a user mistake is to the command line, and how text reaches the terminal safely.

Document text, file names and error messages can hold control characters and
escape sequences (clear the screen, set the window title, move the cursor,
reverse the text direction). :func:`safe` removes them before anything is
printed; :func:`one_line` also folds line breaks, for headers and errors.
"""

from __future__ import annotations

import re
from pathlib import Path

_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor, clear screen
    r"|\x1b\][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC: window title, hyperlinks, clipboard
    r"|\x1b[PX^_][^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"  # any other escape
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # 8-bit string controls
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JSON_UNSAFE = re.compile(
    r"[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069\ud800-\udfff]"
)
_SURROGATES = re.compile(r"[\ud800-\udfff]")
"""Lone surrogates (a JSONL row can hold them): no terminal encoding can print them."""


_ACTS = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
"""Characters of a name that a terminal acts on, or that :func:`safe` would remove."""
_ESCAPED = re.compile(r"\\(\\|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4})")


def shown_name(name: str) -> str:
    r"""A file name to print so that ``s2b delete`` takes it back (see :func:`unescape_name`).

    A name without characters a terminal acts on is shown as it is. Else each
    such character is written as its escape (ESC as ``\x1b``), and each
    backslash as ``\\``: the terminal shows every character, none acts.
    """
    if not _ACTS.search(name):
        return name
    return re.sub(r"[\\]|" + _ACTS.pattern, _escape, name)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\\":
        return "\\\\"
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def unescape_name(text: str) -> str:
    r"""The name that :func:`shown_name` shows as ``text`` (``\x1b`` -> ESC, ``\\`` -> ``\``)."""
    return _ESCAPED.sub(
        lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1)[1:], 16)), text
    )


class UserError(Exception):
    """A mistake in the command line or its inputs, or a damaged store: one line."""


class DamagedDatabaseError(UserError):
    """The store's database file can not be read: ``s2b verify --repair`` indexes it again."""


def safe(text: str) -> str:
    """``text`` without escape sequences and control characters (newline and tab stay).

    A lone surrogate becomes U+FFFD.
    """
    return _SURROGATES.sub("\ufffd", _CONTROLS.sub("", _ESCAPES.sub("", text)))


def one_line(text: str) -> str:
    """:func:`safe`, with line breaks and tabs turned into spaces."""
    return re.sub(r"[\n\t]", " ", safe(text)).strip()


def safe_json(text: str) -> str:
    r"""JSON text with C1 controls, direction marks and lone surrogates as ``\uXXXX`` escapes.

    ``json.dumps`` already escapes C0 controls (ESC, BEL, ...); the characters
    replaced here are legal raw in JSON but act on a terminal. They only occur
    inside strings, so escaping them leaves every value as it was.
    """
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def damaged_store(directory: Path, what: str) -> UserError:
    """A damaged store as one line that names it and the repair."""
    msg = (
        f"the index in {directory} is damaged ({what}); "
        f"run: s2b verify --repair --store {directory}"
    )
    return UserError(msg)
