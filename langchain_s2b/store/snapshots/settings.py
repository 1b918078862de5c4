"""A snapshot's ``s2b.json``: its format, what was embedded, and every check a load makes of it.

The format and version, the embedding (class, model, dimension and a probe
vector, so a load warns when another model is passed), the setting of what is
embedded beside each leaf, and the checksum of every file.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from langchain_core.embeddings import Embeddings

from langchain_s2b.store.base import checksum_matches, class_name, first_line
from langchain_s2b.store.nodes import NODE_FILES
from langchain_s2b.store.vectors import LEGACY_RECORDS_FILE, SAVED_FILES

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "READABLE_VERSIONS",
    "CONFIG_FILE",
    "LEGACY_NODES_FILE",
    "LEXICAL_DIR",
    "embedded_setting",
    "NOTHING_EMBEDDED",
    "check_embedded",
    "PROBE_TEXT",
    "model_name",
    "check_dimension",
]


FORMAT = "langchain_s2b"
FORMAT_VERSION = 3
"""3: files checksummed with xxh3-128 (2: SHA-256; 1: records and nodes as JSON lines)."""
READABLE_VERSIONS = (1, 2, 3)
CONFIG_FILE = "s2b.json"
LEGACY_NODES_FILE = "nodes.txt"
"""Format version 1's docstore: per line the key as JSON, a tab, the document as JSON."""
LEXICAL_DIR = "lexical"
"""The lexical index's files (tantivy's own format), inside a snapshot."""
_LEXICAL_FILE = re.compile(rf"^{LEXICAL_DIR}/(?!\.\.?$)[A-Za-z0-9_.-]+$")


def embedded_setting(
    headers: str, context_model: str | None, proxies: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """What a save records of what is embedded beside each leaf's text.

    ``headers``: ``"off"``, ``"sections"`` or ``"custom"``
    (:func:`~langchain_s2b.core.headers.describe_headers`); ``context_model``:
    the name of the chat model that wrote the contexts, if any; ``proxies``: the
    model-written proxies' ``{"kind", "model"}``, if any (recorded only then, so
    a save without them reads as before).
    """
    out: dict[str, Any] = {"contextual_headers": headers, "context_model": context_model}
    if proxies is not None:
        out["proxies"] = {"kind": proxies["kind"], "model": proxies["model"]}
    return out


NOTHING_EMBEDDED = embedded_setting("off", None)
"""The setting of a save that records none (made before headers existed)."""


def check_embedded(
    path: str | Path,
    saved: Mapping[str, Any] | None,
    headers: str,
    context_model: str | None,
    proxies: Mapping[str, str] | None = None,
) -> None:
    """Refuse to open a save with another header, context or proxy setting than it was built with.

    A retriever whose leaves were embedded one way and whose next leaves would
    be embedded another would rank them on two scales; one line says what to pass.
    """
    saved = dict(saved or NOTHING_EMBEDDED)
    _check_proxies(path, saved.get("proxies"), proxies)
    was, model = saved["contextual_headers"], saved.get("context_model")  # absent: none
    if was != headers:
        names = {"off": "False", "sections": "True", "custom": "<its callable>"}
        msg = (
            f"{path} was built with contextual_headers={names[was]}, not {names[headers]}; "
            f"pass contextual_headers={names[was]} to load(), or build the index again."
        )
        raise ValueError(msg)
    if (model is None) != (context_model is None):
        msg = (
            f"{path} was built without a context model; load it without context_model="
            if model is None
            else f"{path} was built with the context model {model!r}; pass it again: "
            "load(path, embedding, context_model=...)"
        )
        raise ValueError(msg)
    if model is not None and model != context_model:
        warnings.warn(
            f"{path} was built with the context model {model!r}, and {context_model!r} was "
            "passed to load(): sources added from now on get its contexts.",
            UserWarning,
            stacklevel=3,
        )


def _check_proxies(
    path: str | Path, was: Mapping[str, str] | None, proxies: Mapping[str, str] | None
) -> None:
    """Refuse another kind of model-written proxies (or none); warn on another model."""
    if was is None and proxies is not None:
        msg = (
            f"{path} was built without model-written proxies; load it without proxies= and "
            "proxy_model=, or build the index again."
        )
        raise ValueError(msg)
    if was is None:
        return
    if proxies is None:
        msg = (
            f"{path} was built with proxies={was['kind']!r} written by {was['model']!r}; pass "
            "the model again: load(path, embedding, proxy_model=...)."
        )
        raise ValueError(msg)
    if proxies["kind"] != was["kind"]:
        msg = (
            f"{path} was built with proxies={was['kind']!r}, not {proxies['kind']!r}; pass "
            f"proxies={was['kind']!r} to load(), or build the index again."
        )
        raise ValueError(msg)
    if proxies["model"] != was["model"]:
        warnings.warn(
            f"{path} was built with the proxy model {was['model']!r}, and "
            f"{proxies['model']!r} was passed to load(): sources added from now on get its "
            "proxies.",
            UserWarning,
            stacklevel=4,
        )


PROBE_TEXT = "dimension check"
"""Embedded at save and at load: the same model gives the same vector."""
_MODEL_ATTRIBUTES = ("model", "model_name", "model_id", "deployment")


def model_name(embedding: Embeddings) -> str | None:
    """The model an embedding object names (``model``, ``model_name`` ...), if any."""
    for attr in _MODEL_ATTRIBUTES:
        value = getattr(embedding, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def _probe(embedding: Embeddings) -> list[float]:
    return [round(float(x), 6) for x in embedding.embed_query(PROBE_TEXT)]


def _warn_if_other_model(embedding: Embeddings, saved: Mapping[str, Any]) -> None:
    """Warn when the model passed to load() embeds differently from the saved one."""
    probe = saved.get("probe")
    if not isinstance(probe, list) or not all(isinstance(x, int | float) for x in probe):
        return
    now = _probe(embedding)
    dot = sum(a * b for a, b in zip(probe, now, strict=False))
    norms = (sum(a * a for a in probe) * sum(b * b for b in now)) ** 0.5
    if len(now) == len(probe) and norms and dot / norms >= 0.999:
        return
    was = saved.get("model") or saved.get("class")
    given = model_name(embedding) or class_name(embedding)
    warnings.warn(
        f"The embedding passed to load() ({given}) embeds text differently from the one "
        f"this index was built with ({was}); queries will not match the stored vectors. "
        "Pass the model the index was built with.",
        UserWarning,
        stacklevel=4,
    )


def check_dimension(embedding: Embeddings, dim: int, saved_class: str) -> None:
    """Refuse an embedding whose vectors do not have ``dim`` numbers."""
    got = len(embedding.embed_query(PROBE_TEXT))
    if got != dim:
        msg = (
            f"This index was built with {dim}-dimensional embeddings ({saved_class}); "
            f"the embedding passed to load() ({class_name(embedding)}) returns {got}-"
            "dimensional vectors. Pass the model the index was built with."
        )
        raise ValueError(msg)


def _read_config(snap: Path) -> dict[str, Any]:
    file = snap / CONFIG_FILE
    try:
        meta = json.loads(file.read_bytes())
    except FileNotFoundError:
        msg = f"{file} is missing; the save is incomplete or damaged."
        raise ValueError(msg) from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        msg = f"{file} is not JSON ({first_line(err)}); it is not a langchain_s2b save."
        raise ValueError(msg) from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        msg = f"{file} is not a langchain_s2b save (no format {FORMAT!r})."
        raise ValueError(msg)
    version = meta.get("format_version")
    if version not in READABLE_VERSIONS:
        msg = (
            f"{file} has format version {version!r}; this langchain_s2b reads versions "
            f"{list(READABLE_VERSIONS)}. Load it with the version that wrote it and save it "
            "again, or re-index."
        )
        raise ValueError(msg)
    _check_shape(file, meta)
    return meta


def _check_shape(file: Path, meta: dict[str, Any]) -> None:
    """Type-check the parts of ``s2b.json`` that load relies on."""
    emb, vec, doc = meta.get("embedding"), meta.get("vectorstore"), meta.get("docstore")
    files, levels = meta.get("files"), meta.get("levels")
    problems = []
    if not isinstance(emb, dict) or not isinstance(emb.get("class"), str) or "dim" not in emb:
        problems.append("embedding must be an object with a class name and a dim")
    elif emb.get("dim") is not None and (
        isinstance(emb["dim"], bool) or not isinstance(emb["dim"], int) or emb["dim"] < 1
    ):
        problems.append(f"embedding.dim must be a positive integer, got {emb['dim']!r}")
    if not isinstance(vec, dict) or vec.get("kind") not in ("faiss", "external"):
        problems.append("vectorstore.kind must be 'faiss' or 'external'")
    if not isinstance(doc, dict) or doc.get("kind") not in _KINDS:
        problems.append(f"docstore.kind must be one of {list(_KINDS)}")
    elif not isinstance(doc.get("saved"), bool):
        problems.append("docstore.saved must be true or false")
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        problems.append("files must map file names to checksums")
    if not isinstance(meta.get("retriever"), dict) or not isinstance(meta.get("fingerprint"), str):
        problems.append("retriever must be an object and fingerprint a string")
    if (
        not isinstance(levels, list)
        or not levels
        or not all(
            isinstance(lv, dict)
            and isinstance(lv.get("name"), str)
            and isinstance(lv.get("splitter"), dict)
            for lv in levels
        )
    ):
        problems.append("levels must be a non-empty list of {name, splitter}")
    embedded = meta.get("embedded", NOTHING_EMBEDDED)
    if (
        not isinstance(embedded, dict)
        or embedded.get("contextual_headers") not in ("off", "sections", "custom")
        or not isinstance(embedded.get("context_model"), str | None)
    ):
        problems.append(
            "embedded must be {contextual_headers: off|sections|custom, context_model: a name "
            "or null}"
        )
    elif not _proxy_setting(embedded.get("proxies")):
        problems.append("embedded proxies must be {kind: a name, model: a name} or absent")
    if problems:
        msg = f"{file} is malformed: {'; '.join(problems)}."
        raise ValueError(msg)


def _proxy_setting(value: Any) -> bool:
    """Whether a save's ``embedded.proxies`` is absent or ``{kind, model}`` (strings)."""
    if value is None:
        return True
    return (
        isinstance(value, dict)
        and value.get("kind") in ("propositions", "summaries", "questions")
        and isinstance(value.get("model"), str)
    )


_KINDS = ("nodes", "memory", "memory-bytes", "external")


def _check_files(snap: Path, files: Mapping[str, str]) -> None:
    allowed = {*SAVED_FILES, *NODE_FILES, LEGACY_RECORDS_FILE, LEGACY_NODES_FILE}
    for name, digest in files.items():
        lexical = _LEXICAL_FILE.match(name) is not None
        if name not in allowed and not lexical:
            msg = f"{snap / CONFIG_FILE} lists an unexpected file {name!r}; allowed: {allowed}."
            raise ValueError(msg)
        file = snap / name
        if not file.is_file() or not checksum_matches(file, digest):
            msg = f"{file} is missing or does not match its checksum; the save is damaged."
            raise ValueError(msg)
