"""The context model at the I/O edge: batched calls, and a cache of what it wrote.

:class:`ContextWriter` carries out :class:`~langchain_s2b.core.requests.WriteContexts`:
it reads every piece's cache key (:func:`~langchain_s2b.core.situate.cache_key`)
from its cache, asks the chat model for the rest in batches
(``model.batch``/``abatch``, so a provider's own concurrency and rate limits
apply), stores each answer as soon as its batch returns, and raises when any
call failed: the add that asked fails as a whole and writes nothing, and a
second try asks only for what is still missing.

The cache is any LangChain ``BaseStore[str, bytes]`` (``InMemoryByteStore``
by default; ``LocalFileStore`` keeps it across processes; the command line's
store keeps it in its database).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.stores import BaseStore

from langchain_s2b.core import propose
from langchain_s2b.core.situate import MAX_CONTEXT_CHARS

BATCH = 16
"""Prompts per ``batch`` call (each answered before the next batch starts)."""


def model_name(model: BaseChatModel) -> str:
    """A stable name of a chat model: its class and the model it names (part of cache keys)."""
    kind = type(model).__name__
    for attr in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(model, attr, None)
        if isinstance(value, str) and value:
            return f"{kind}:{value}"
    return kind


class Piece(Protocol):
    """What the writer asks about: a cache key, the source it is from and its prompt.

    :class:`~langchain_s2b.core.situate.Piece` (a context) and
    :class:`~langchain_s2b.core.propose.ProxyPiece` (model-written proxies).
    """

    @property
    def key(self) -> str:
        """Its cache key."""

    @property
    def source_id(self) -> str:
        """The source it is from (for errors)."""

    def prompt(self) -> str:
        """What the model is asked."""


def one_line(text: str) -> str:
    """A context as kept: one line of at most :data:`MAX_CONTEXT_CHARS` characters."""
    return " ".join(text.split())[:MAX_CONTEXT_CHARS]


def answer_text(answer: Any, tidy: Callable[[str], str] = one_line) -> str:
    """A chat model's answer as text, as ``tidy`` keeps it (by default :func:`one_line`)."""
    text = getattr(answer, "text", answer)  # a message's text: its content's text blocks
    if not isinstance(text, str):
        text = str(getattr(answer, "content", text))
    return tidy(str(text))


class ContextFailedError(RuntimeError):
    """The context (or proxy) model failed for some pieces (those it answered are cached)."""


class ContextWriter:
    """Writes the answers to pieces' prompts with one chat model, through one cache.

    Args:
        model: any LangChain chat model.
        cache: where answers are kept by cache key.
        tidy: how an answer is kept (default: one line, the contexts').
        what: the model's name in an error ("context model", "proxy model").
        written: what it writes, in an error ("contexts", "proxies").
    """

    def __init__(
        self,
        model: BaseChatModel,
        cache: BaseStore[str, bytes],
        *,
        tidy: Callable[[str], str] = one_line,
        what: str = "context model",
        written: str = "contexts",
    ) -> None:
        self.model = model
        self.cache = cache
        self.tidy = tidy
        self.what = what
        self.written = written
        self.calls = 0
        """Prompts sent to the model by this writer (for tests and progress)."""

    def write(self, pieces: Sequence[Piece]) -> list[str]:
        """Each piece's context, in order: cached, else written by the model."""
        keys = [piece.key for piece in pieces]
        known = _decoded(keys, self.cache.mget(keys))
        todo = _todo(pieces, known)
        failed: list[tuple[Piece, BaseException]] = []
        for start in range(0, len(todo), BATCH):
            part = todo[start : start + BATCH]
            self.calls += len(part)
            answers = self.model.batch([piece.prompt() for piece in part], return_exceptions=True)
            failed += self._keep(part, answers, known)
        _raise_if_failed(failed, len(todo), self.what, self.written)
        return [known[key] for key in keys]

    async def awrite(self, pieces: Sequence[Piece]) -> list[str]:
        """Async :meth:`write`."""
        keys = [piece.key for piece in pieces]
        known = _decoded(keys, await self.cache.amget(keys))
        todo = _todo(pieces, known)
        failed: list[tuple[Piece, BaseException]] = []
        for start in range(0, len(todo), BATCH):
            part = todo[start : start + BATCH]
            self.calls += len(part)
            answers = await self.model.abatch(
                [piece.prompt() for piece in part], return_exceptions=True
            )
            pairs = self._answered(part, answers, known)
            if pairs:
                await self.cache.amset(pairs)
            failed += _failures(part, answers)
        _raise_if_failed(failed, len(todo), self.what, self.written)
        return [known[key] for key in keys]

    def _keep(
        self, part: list[Piece], answers: list[Any], known: dict[str, str]
    ) -> list[tuple[Piece, BaseException]]:
        pairs = self._answered(part, answers, known)
        if pairs:
            self.cache.mset(pairs)
        return _failures(part, answers)

    def _answered(
        self, part: list[Piece], answers: list[Any], known: dict[str, str]
    ) -> list[tuple[str, bytes]]:
        """Record the answers that came; their cache entries."""
        if len(answers) != len(part):
            msg = f"The {self.what} answered {len(answers)} of {len(part)} prompts."
            raise ContextFailedError(msg)
        pairs = []
        for piece, answer in zip(part, answers, strict=True):
            if not _failed(answer):
                known[piece.key] = answer_text(answer, self.tidy)
                pairs.append((piece.key, known[piece.key].encode("utf-8", "surrogatepass")))
        return pairs


def proxy_writer(model: BaseChatModel, cache: BaseStore[str, bytes]) -> ContextWriter:
    """The writer of model-written proxies: answers kept line by line (:func:`propose.tidy`)."""
    return ContextWriter(model, cache, tidy=propose.tidy, what="proxy model", written="proxies")


def _failed(answer: Any) -> bool:
    return isinstance(answer, BaseException)


def _failures(part: list[Piece], answers: Sequence[Any]) -> list[tuple[Piece, BaseException]]:
    """The pieces whose call failed, with the error."""
    return [(p, a) for p, a in zip(part, answers, strict=True) if isinstance(a, BaseException)]


def _decoded(keys: list[str], values: Sequence[bytes | None]) -> dict[str, str]:
    """The cached contexts by key (an entry that does not decode is asked for again)."""
    known = {}
    for key, value in zip(keys, values, strict=True):
        if isinstance(value, bytes | bytearray):
            try:
                known[key] = bytes(value).decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                continue
    return known


def _todo(pieces: Sequence[Piece], known: dict[str, str]) -> list[Piece]:
    """The pieces to ask for: not cached, each key once."""
    out: dict[str, Piece] = {}
    for piece in pieces:
        if piece.key not in known:
            out.setdefault(piece.key, piece)
    return list(out.values())


def _raise_if_failed(
    failed: list[tuple[Piece, BaseException]], asked: int, what: str, written: str
) -> None:
    if not failed:
        return
    piece, err = failed[0]
    for _, other in failed:  # an interruption is not the model's failure: it goes on up
        if not isinstance(other, Exception):
            raise other
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    msg = (
        f"The {what} failed for {len(failed)} of {asked} pieces (first: source "
        f"{piece.source_id!r}, {type(err).__name__}: {first[:200]}); nothing was added, and "
        f"the {written} it wrote are cached for the next try."
    )
    raise ContextFailedError(msg) from err
