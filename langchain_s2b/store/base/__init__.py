"""The low room every other room may use: durable files, all-or-nothing writes, columns.

It owns what no single concept owns: fsync, hashes and atomic replace (``files``),
one write of several steps that undoes itself on any error (``undo``), and metadata
kept as shared shapes plus numbers per node, with growable arrays (``columns``),
and the lazy face every room's ``__init__`` is (``face``). It imports no other room.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_s2b.store.base.face import lazy_face

if TYPE_CHECKING:
    from langchain_s2b.store.base.columns import (
        SLOTS_PER_ENTRY,
        SLOTS_SLACK,
        Column,
        Shapes,
        check_slots,
        decode_utf8,
        first_line,
        read_arrays,
        utf8_block,
    )
    from langchain_s2b.store.base.files import (
        CHECKSUM,
        TEMP_PREFIX,
        checksum_matches,
        class_name,
        file_checksum,
        fsync_and_hash,
        fsync_dir,
        sha256_file,
        write_json,
        write_text_atomic,
    )
    from langchain_s2b.store.base.undo import Undo, all_or_nothing, undone, warn_undo

__all__ = [
    "CHECKSUM",
    "Column",
    "lazy_face",
    "SLOTS_PER_ENTRY",
    "SLOTS_SLACK",
    "Shapes",
    "TEMP_PREFIX",
    "Undo",
    "all_or_nothing",
    "check_slots",
    "checksum_matches",
    "class_name",
    "decode_utf8",
    "file_checksum",
    "first_line",
    "fsync_and_hash",
    "fsync_dir",
    "read_arrays",
    "sha256_file",
    "undone",
    "utf8_block",
    "warn_undo",
    "write_json",
    "write_text_atomic",
]

_HOMES = {
    "lazy_face": "langchain_s2b.store.base.face",
    "SLOTS_PER_ENTRY": "langchain_s2b.store.base.columns",
    "SLOTS_SLACK": "langchain_s2b.store.base.columns",
    "Column": "langchain_s2b.store.base.columns",
    "Shapes": "langchain_s2b.store.base.columns",
    "check_slots": "langchain_s2b.store.base.columns",
    "decode_utf8": "langchain_s2b.store.base.columns",
    "first_line": "langchain_s2b.store.base.columns",
    "read_arrays": "langchain_s2b.store.base.columns",
    "utf8_block": "langchain_s2b.store.base.columns",
    "CHECKSUM": "langchain_s2b.store.base.files",
    "TEMP_PREFIX": "langchain_s2b.store.base.files",
    "checksum_matches": "langchain_s2b.store.base.files",
    "file_checksum": "langchain_s2b.store.base.files",
    "class_name": "langchain_s2b.store.base.files",
    "fsync_and_hash": "langchain_s2b.store.base.files",
    "fsync_dir": "langchain_s2b.store.base.files",
    "sha256_file": "langchain_s2b.store.base.files",
    "write_json": "langchain_s2b.store.base.files",
    "write_text_atomic": "langchain_s2b.store.base.files",
    "Undo": "langchain_s2b.store.base.undo",
    "all_or_nothing": "langchain_s2b.store.base.undo",
    "undone": "langchain_s2b.store.base.undo",
    "warn_undo": "langchain_s2b.store.base.undo",
}


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
