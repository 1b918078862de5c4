"""Add and delete sources across both stores, as operations (generators of requests).

Writing is copy-on-write, in two phases. :func:`stage` splits the sources,
skips unchanged ones (same digest: text, metadata, split configuration and the
spans the splitters produced) and embeds the new leaves, each distinct text
once (with its header and model-written context, when the retriever writes
them: :func:`~langchain_s2b.core.headers.embedded_text`; the contexts are
asked for first, :func:`_situate`); it changes nothing, so it runs without the
write lock and a failed embedding or context call loses nothing.
:func:`commit` then writes each changed source as a new *generation* (its nodes
under a generation key, see :mod:`~langchain_s2b.core.keys`): nodes, then the
leaf vectors, then the manifests (the commit record), and only then removes
the previous generation. If a write fails before the manifests are in, the
new generation is removed again and the previous version stays served: one
call is all or nothing. Deletion removes the manifests first (restoring them
if removing the leaves fails), then the leaves and the nodes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langchain_core.documents import Document

from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.core.headers import HeaderFunction, describe_headers
from langchain_s2b.core.ingest import (
    IndexingResult,
    Prepared,
    Source,
    child_keys,
    generation_of,
    identify,
    is_empty,
    node_keys,
    prepare,
    with_proxies,
)
from langchain_s2b.core.keys import encode_source_key, manifest_key
from langchain_s2b.core.proxies import NodeProxies, Proxy
from langchain_s2b.core.proxy_spans import check_proxies, node_proxies
from langchain_s2b.core.requests import (
    AddLeaves,
    EmbedLeaves,
    Fetch,
    Op,
    Put,
    Remove,
    RemoveLeaves,
    WriteContexts,
    ask,
)
from langchain_s2b.core.situate import PROMPT_VERSION, Piece, leaf_contexts, pieces
from langchain_s2b.core.splitters import describe_splitter
from langchain_s2b.core.tree import Level, Tree

Vectors = list[list[float]]
_T = TypeVar("_T")
WRITE_BATCH = 2048
"""Nodes per ``Put`` and leaves per ``AddLeaves`` request of one write."""


@dataclass
class Config:
    """What ingestion needs to know about the retriever."""

    levels: list[Level]
    source_fields: list[str] = field(default_factory=list)
    input_limit: int | None = None
    """The embedding model's input window in tokens, when known."""
    count_tokens: Callable[[str], int] = estimate_tokens
    headers: bool | HeaderFunction = False
    """Each leaf's contextual header: off, the title and section path, or a callable's."""
    context_model: str | None = None
    """The name of the chat model that writes the leaves' contexts (``None``: none)."""
    node_proxies: NodeProxies | None = None
    """The user's proxies by node: texts standing for each node's span (every level)."""
    write_proxies: Callable[[list[Document], list[Tree]], Op[list[list[Proxy]]]] | None = None
    """Model-written proxies for the sources to write, given their documents and trees
    (one list per source; they join the user's and are covered by the fingerprint)."""

    def fingerprint(self) -> str:
        """Identifies the split configuration: every level's name and whole splitter setup.

        Built-in splitters are described by their JSON form; any other
        ``TextSplitter`` by its class and every setting (the length function
        included); a plain callable by its name, code, defaults and closure.
        Where a description can not see a change (a callable that calls
        something else), the digest of each source still does: it covers the
        spans the splitters produce, so a source is re-indexed whenever its
        split changes.
        """
        described: Any = [
            {"level": level.name, "splitter": _splitter_description(level)} for level in self.levels
        ]
        embedded = self.embedded_setting()
        if embedded:  # off and without a model: the fingerprint of a store made before them
            described = {"levels": described, "embedded": embedded}
        text = json.dumps(described, sort_keys=True, default=str)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def embedded_setting(self) -> dict[str, Any]:
        """What is embedded beside a leaf's text, described (``{}``: nothing)."""
        out: dict[str, Any] = {}
        if self.headers is not False:
            out["headers"] = describe_headers(self.headers)
            if not isinstance(self.headers, bool):
                out["function"] = describe_object(self.headers, depth=3)
        if self.context_model is not None:
            out["context_model"] = self.context_model
            out["prompt"] = PROMPT_VERSION
        if self.write_proxies is not None:  # model-written proxies: a change writes them again
            setting = getattr(self.write_proxies, "setting", None)
            out["proxies"] = (
                setting() if callable(setting) else describe_object(self.write_proxies, 3)
            )
        return out


def _splitter_description(level: Level) -> Any:
    spec = describe_splitter(level)
    if spec.get("kind") != "custom":
        return spec
    return describe_object(level.splitter, depth=3)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_MAX_ITEMS = 64


def describe_object(obj: Any, depth: int) -> Any:
    """A JSON-able description of ``obj``'s configuration, ``depth`` levels deep."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if isinstance(obj, list | tuple | set | frozenset | dict) and (
        depth <= 0 or len(obj) > _MAX_ITEMS
    ):
        return {"type": type(obj).__name__, "len": len(obj)}
    if isinstance(obj, list | tuple | set | frozenset):
        items = [describe_object(x, depth - 1) for x in obj]
        return sorted(items, key=str) if isinstance(obj, set | frozenset) else items
    if isinstance(obj, dict):
        return {str(k): describe_object(v, depth - 1) for k, v in sorted(obj.items(), key=str)}
    if isinstance(obj, re.Pattern):
        return {"regex": obj.pattern, "flags": obj.flags}
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}"
    code = getattr(obj, "__code__", None)
    if code is not None:  # a function or lambda: its code says what it does
        return _describe_function(obj, code, depth)
    func = getattr(obj, "__func__", None)
    if func is not None and hasattr(func, "__code__"):  # a bound method
        return {
            "method": _describe_function(func, func.__code__, depth),
            "of": describe_object(getattr(obj, "__self__", None), depth - 1),
        }
    if callable(obj) and not hasattr(obj, "__dict__"):  # a builtin such as len
        return {"callable": f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', obj)}"}
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict) and depth > 0:
        settings = {k: describe_object(v, depth - 1) for k, v in sorted(state.items())}
        return {"class": name, "settings": settings}
    return {"class": name, "repr": _ADDRESS.sub("", repr(obj))[:200]}


def _describe_function(func: Any, code: Any, depth: int) -> Any:
    digest = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16]
    cells = getattr(func, "__closure__", None) or ()
    closure = []
    for cell in cells:
        try:
            closure.append(describe_object(cell.cell_contents, depth - 1))
        except ValueError:  # an empty cell
            closure.append(None)
    return {
        "function": f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', '')}",
        "code": digest,
        "defaults": describe_object(getattr(func, "__defaults__", None), depth - 1),
        "closure": closure,
    }


# Adding ---------------------------------------------------------------------------


@dataclass
class Write:
    """One source to write: its prepared nodes and, once embedded, its leaf vectors."""

    prepared: Prepared
    generation: int
    vectors: Vectors | None = None


@dataclass
class Staged:
    """What :func:`stage` found: the sources to write and what was skipped."""

    writes: list[Write]
    result: IndexingResult
    forced: frozenset[str] = frozenset()


def stage(
    config: Config,
    documents: Sequence[Document],
    ids: Sequence[str] | None,
    *,
    force: Collection[str] = (),
    proxies: Sequence[Sequence[Proxy]] | None = None,
) -> Op[Staged]:
    """Split the sources, skip unchanged ones and embed the rest; writes nothing.

    Sources in ``force`` are written even when unchanged (repair). ``proxies``:
    the user's proxies of each document (parallel to ``documents``); with
    :attr:`Config.node_proxies`'s, they are part of a source's digest.
    """
    sources = identify(documents, ids, config.source_fields, config.fingerprint())
    given = _given_proxies(sources, proxies)
    result = IndexingResult()
    current = [(s, p) for s, p in zip(sources, given, strict=True) if not is_empty(s)]
    result.empty = [s.source_id for s in sources if is_empty(s)]
    manifests = yield from ask(Fetch([manifest_key(s.source_key) for s, _ in current]))
    writes: list[Write] = []
    for (source, own), manifest in zip(current, manifests, strict=True):
        generation = _next_generation(manifest)
        prepared = prepare(source, config.levels, generation, config.headers)
        if config.node_proxies is not None:
            name = _name(source)
            own = own + node_proxies(config.node_proxies, source.doc, prepared.tree, name)
        prepared = with_proxies(prepared, own, own)
        if source.source_id not in force and _same(manifest, prepared):
            result.unchanged.append(source.source_id)
            continue
        writes.append(Write(prepared, generation))
    if config.write_proxies is not None and writes:
        yield from _write_proxies(config.write_proxies, writes)
    if config.context_model is not None:
        yield from _situate(config.context_model, writes)
    texts = []
    for write in writes:
        embedded = write.prepared.embedded_texts()
        _warn_if_too_long(config, embedded, write.prepared)
        texts += embedded
    if texts:
        vectors = yield from _embed_once(texts)
        if vectors is not None:
            _assign(writes, vectors)
    return Staged(writes, result, frozenset(force))


def _name(source: Source) -> str:
    return repr(source.source_id)


def _given_proxies(
    sources: Sequence[Source], proxies: Sequence[Sequence[Proxy]] | None
) -> list[list[Proxy]]:
    """The user's proxies of each source, checked (one empty list each without any)."""
    if proxies is None:
        return [[] for _ in sources]
    if isinstance(proxies, str) or len(proxies) != len(sources):
        got = len(proxies) if not isinstance(proxies, str) else "a str"
        msg = (
            f"Got {len(sources)} documents but proxies for {got}; pass one list of Proxy "
            "per document (an empty one for none)."
        )
        raise ValueError(msg)
    return [
        check_proxies(_name(source), source.doc.page_content, given)
        for source, given in zip(sources, proxies, strict=True)
    ]


def _write_proxies(
    write: Callable[[list[Document], list[Tree]], Op[list[list[Proxy]]]], writes: list[Write]
) -> Op[None]:
    """The model-written proxies of the sources to write, joined to the user's."""
    documents = [w.prepared.source.doc for w in writes]
    found = yield from write(documents, [w.prepared.tree for w in writes])
    if len(found) != len(writes):
        msg = f"write_proxies gave proxies for {len(found)} of {len(writes)} documents."
        raise ValueError(msg)
    for w, extra in zip(writes, found, strict=True):
        if extra:
            source = w.prepared.source
            checked = check_proxies(_name(source), source.doc.page_content, extra)
            own, digested = w.prepared.given
            w.prepared = with_proxies(w.prepared, [*own, *checked], digested)


def _situate(model: str, writes: list[Write]) -> Op[None]:
    """Each written leaf's model-written context: one request for every piece (each key once)."""
    per_write: list[tuple[list[Piece], list[int]]] = []
    wanted: dict[str, Piece] = {}
    for write in writes:
        source = write.prepared.source
        found = pieces(source.source_id, source.doc.page_content, write.prepared.tree, model)
        per_write.append(found)
        for piece in found[0]:
            wanted.setdefault(piece.key, piece)
    if not wanted:
        return
    answers = yield from ask(WriteContexts(list(wanted.values())))
    if len(answers) != len(wanted):
        msg = f"The context model gave {len(answers)} contexts for {len(wanted)} pieces."
        raise ValueError(msg)
    by_key = dict(zip(wanted, answers, strict=True))
    for write, (found_pieces, owner) in zip(writes, per_write, strict=True):
        write.prepared.notes.contexts = leaf_contexts(found_pieces, owner, by_key)


def _embed_once(texts: list[str]) -> Op[Vectors | None]:
    """Embed each distinct text once (boilerplate, repeated headers) and share its vector."""
    unique = list(dict.fromkeys(texts))
    vectors = yield from ask(EmbedLeaves(unique))
    if vectors is None or len(unique) == len(texts):
        return vectors
    if len(vectors) != len(unique):
        msg = f"The embedding returned {len(vectors)} vectors for {len(unique)} texts."
        raise ValueError(msg)
    position = {text: i for i, text in enumerate(unique)}
    return [vectors[position[text]] for text in texts]


def commit(config: Config, staged: Staged) -> Op[IndexingResult]:
    """Write the staged sources (all or nothing), then remove their previous generations.

    Run under the write lock. The manifests are read again: a source another
    writer changed since :func:`stage` is written after that change.
    """
    result = staged.result
    writes = staged.writes
    keys = [manifest_key(w.prepared.source.source_key) for w in writes]
    manifests = (yield from ask(Fetch(keys))) if writes else []
    todo: list[tuple[Write, Document | None]] = []
    for write, manifest in zip(writes, manifests, strict=True):
        sid = write.prepared.source.source_id
        if sid not in staged.forced and _same(manifest, write.prepared):
            result.unchanged.append(sid)
            continue
        if write.generation != _next_generation(manifest):  # changed since stage
            generation = _next_generation(manifest)
            again = prepare(write.prepared.source, config.levels, generation, config.headers)
            again = with_proxies(again, *write.prepared.given)
            again.notes.contexts = write.prepared.notes.contexts
            write = Write(again, generation, write.vectors)
        (result.updated if manifest is not None else result.added).append(sid)
        todo.append((write, manifest))
    if not todo:
        return result
    yield from _write_all(todo)
    result.num_children = sum(len(w.prepared.leaves) for w, _ in todo)
    result.num_proxies = sum(len(w.prepared.proxies) for w, _ in todo)
    old = [m for _, m in todo if m is not None]
    result.deleted_keys = sum(len(node_keys(m)) for m in old)
    yield from _cleanup(old)
    return result


def add(
    config: Config,
    documents: Sequence[Document],
    ids: Sequence[str] | None,
    *,
    force: Collection[str] = (),
    proxies: Sequence[Sequence[Proxy]] | None = None,
) -> Op[IndexingResult]:
    """Upsert sources in one operation: :func:`stage`, then :func:`commit`."""
    staged = yield from stage(config, documents, ids, force=force, proxies=proxies)
    return (yield from commit(config, staged))


def _next_generation(manifest: Document | None) -> int:
    return 0 if manifest is None else generation_of(manifest) + 1


def _same(manifest: Document | None, prepared: Prepared) -> bool:
    return (
        manifest is not None
        and manifest.metadata.get("digest") == (prepared.manifest.metadata["digest"])
    )


def _assign(writes: list[Write], vectors: Vectors) -> None:
    start = 0
    for write in writes:
        end = start + len(write.prepared.leaves) + len(write.prepared.proxies)
        write.vectors = vectors[start:end]
        start = end
    if start != len(vectors):
        msg = f"The embedding returned {len(vectors)} vectors for {start} texts."
        raise ValueError(msg)


def _write_all(todo: list[tuple[Write, Document | None]]) -> Op[None]:
    """Nodes, leaves, manifests; on a failure, undo what was written and re-raise.

    Nodes and leaves go in batches of :data:`WRITE_BATCH` (a source's documents
    are made batch by batch, so a large source is never all objects at once);
    the caller's transaction, if any, still commits them together.
    """
    vectors: Vectors | None = [v for w, _ in todo for v in (w.vectors or [])]
    if any(w.vectors is None for w, _ in todo):
        vectors = None
    manifests = [(str(w.prepared.manifest.id), w.prepared.manifest) for w, _ in todo]
    step = 0
    try:
        for nodes in _batches(pair for w, _ in todo for pair in w.prepared.nodes):
            yield from ask(Put(nodes))
        step = 1
        done = 0
        children = (child for w, _ in todo for child in w.prepared.children())
        for leaves in _batches(children):
            part = None if vectors is None else vectors[done : done + len(leaves)]
            yield from ask(AddLeaves(leaves, part))
            done += len(leaves)
        step = 2
        yield from ask(Put(manifests))
    except GeneratorExit:  # abandoned by its driver (a crash): no more I/O can happen
        raise
    except BaseException as err:  # cancellation and Ctrl-C undo too, then go on up
        yield from _undo(todo, step, err)
        raise


def _batches(items: Iterable[_T]) -> Iterator[list[_T]]:
    """``items`` in lists of :data:`WRITE_BATCH`."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, WRITE_BATCH)):
        yield batch


def _undo(todo: list[tuple[Write, Document | None]], step: int, err: BaseException) -> Op[None]:
    """Put back the previous manifests and remove the new generation's pieces."""
    try:
        if step >= 2:
            restore = [(manifest_key(m.metadata["source_key"]), m) for _, m in todo if m]
            if restore:
                yield from ask(Put(restore))
            fresh = [str(w.prepared.manifest.id) for w, m in todo if m is None]
            if fresh:
                yield from ask(Remove(fresh))
        if step >= 1:
            yield from ask(RemoveLeaves([k for w, _ in todo for k in w.prepared.child_ids()]))
        yield from ask(Remove([key for w, _ in todo for key in w.prepared.nodes.ids()]))
    except Exception as undo_err:
        _warn_undo(err, undo_err)


def _warn_undo(err: BaseException, undo_err: Exception) -> None:
    warnings.warn(
        f"A write failed ({err!r}) and undoing it failed too ({undo_err!r}); the stores "
        "may disagree until verify(repair=True) runs.",
        UserWarning,
        stacklevel=3,
    )


def _cleanup(old: list[Document]) -> Op[None]:
    """Remove previous generations after the commit: leaves first (no longer found)."""
    if not old:
        return
    yield from _finish_removal(
        [key for m in old for key in child_keys(m)],
        [key for m in old for key in node_keys(m)],
        "The new versions are written, but removing the previous ones",
    )


def _finish_removal(leaves: list[str], nodes: list[str], what: str) -> Op[None]:
    """Remove what a committed change left behind; a failure is a warning, not an error.

    A cancellation or Ctrl-C does not undo the change, which stands: the
    removal is finished (it is idempotent), then the interruption goes on up.
    """
    try:
        yield from _remove_all(leaves, nodes)
    except Exception as err:
        _warn_leftovers(what, err)
    except GeneratorExit:
        raise
    except BaseException:
        try:
            yield from _remove_all(leaves, nodes)
        except Exception as err:
            _warn_leftovers(what, err)
        raise


def _remove_all(leaves: list[str], nodes: list[str]) -> Op[None]:
    if leaves:
        yield from ask(RemoveLeaves(leaves))
    if nodes:
        yield from ask(Remove(nodes))


def _warn_leftovers(what: str, err: Exception) -> None:
    warnings.warn(
        f"{what} failed ({err!r}); run verify(repair=True) to remove what is left.",
        UserWarning,
        stacklevel=4,
    )


# Deleting -------------------------------------------------------------------------


def delete(source_ids: Sequence[str]) -> Op[list[str]]:
    """Delete sources by id; unknown ids are reported by their absence."""
    if isinstance(source_ids, str):
        msg = f"delete() takes a list of source ids; got the string {source_ids!r}."
        raise TypeError(msg)
    keys = [manifest_key(encode_source_key(sid)) for sid in source_ids]
    manifests = yield from ask(Fetch(keys))
    found = [(sid, m) for sid, m in zip(source_ids, manifests, strict=True) if m is not None]
    yield from remove_sources([m for _, m in found])
    return [sid for sid, _ in found]


def remove_source(manifest: Document) -> Op[None]:
    """Remove every key a source's manifest lists, the manifest first."""
    yield from remove_sources([manifest])


def remove_sources(manifests: list[Document]) -> Op[None]:
    """Manifests first (the sources stop existing), then their leaves, then their nodes.

    If removing the manifests or the leaves fails, the manifests are put back
    and the error is raised: the sources stay served.
    """
    if not manifests:
        return
    pairs = [(manifest_key(m.metadata["source_key"]), m) for m in manifests]
    try:
        yield from ask(Remove([key for key, _ in pairs]))
        yield from ask(RemoveLeaves([key for m in manifests for key in child_keys(m)]))
    except GeneratorExit:
        raise
    except BaseException as err:  # cancellation and Ctrl-C put them back too
        try:
            yield from ask(Put(pairs))
        except Exception as undo_err:
            _warn_undo(err, undo_err)
        raise
    yield from _cleanup_nodes(manifests)


def _cleanup_nodes(manifests: list[Document]) -> Op[None]:
    yield from _finish_removal(
        [],
        [key for m in manifests for key in node_keys(m)],
        "The sources are deleted, but removing their nodes",
    )


def _warn_if_too_long(config: Config, texts: Sequence[str], prepared: Prepared) -> None:
    """Warn when what is embedded (with any header and context) exceeds the model's window."""
    if config.input_limit is None:
        return
    long = [i for i, text in enumerate(texts) if config.count_tokens(text) > config.input_limit]
    if long:
        first = prepared.child_ids()[long[0]]
        warnings.warn(
            f"{len(long)} of {len(texts)} children exceed the embedding model's input "
            f"window of {config.input_limit} tokens and will be embedded from their "
            f"beginning only (first: {first!r}); use a smaller child splitter.",
            UserWarning,
            stacklevel=4,
        )
