"""The hook that asks a chat model for proxies (issue 35): one request for a whole add.

:func:`written_proxies` makes the ``Config.write_proxies`` hook of
:mod:`~langchain_s2b.core.lifecycle`: given the documents of an add and their
trees, it finds every piece to ask about (:func:`~langchain_s2b.core.propose.pieces`),
asks for all of them in one :class:`~langchain_s2b.core.requests.WriteProxies`
(each cache key once), and parses each answer into :class:`Proxy` values. The
request fails as a whole when any model call fails, so the add fails before
anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.documents import Document

from langchain_s2b.core.propose import PROMPT_VERSIONS, ProxyPiece, check_kind, document_proxies
from langchain_s2b.core.propose import pieces as proxy_pieces
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.requests import Op, WriteProxies, ask
from langchain_s2b.core.tree import Tree


@dataclass(frozen=True)
class WrittenProxies:
    """The ``write_proxies`` hook for one kind and one model (its fields describe it)."""

    kind: str
    """``"propositions"``, ``"summaries"`` or ``"questions"``."""
    model: str
    """The model's name (part of every cache key)."""

    def setting(self) -> dict[str, str]:
        """What a save or a fingerprint records of it."""
        return {"kind": self.kind, "model": self.model, "prompt": PROMPT_VERSIONS[self.kind]}

    def __call__(
        self, documents: Sequence[Document], trees: Sequence[Tree]
    ) -> Op[list[list[Proxy]]]:
        """Each document's model-written proxies, in the order of ``documents``."""
        if len(documents) != len(trees):
            msg = f"write_proxies got {len(documents)} documents and {len(trees)} trees."
            raise ValueError(msg)
        found: list[list[ProxyPiece]] = []
        wanted: dict[str, ProxyPiece] = {}
        for i, (doc, tree) in enumerate(zip(documents, trees, strict=True)):
            source_id = doc.id if doc.id is not None else f"document {i}"
            mine = proxy_pieces(source_id, doc.page_content, tree, self.kind, self.model)
            found.append(mine)
            for piece in mine:
                wanted.setdefault(piece.key, piece)
        if not wanted:
            return [[] for _ in documents]
        answers = yield from ask(WriteProxies(list(wanted.values())))
        if len(answers) != len(wanted):
            msg = f"The proxy model gave {len(answers)} answers for {len(wanted)} pieces."
            raise ValueError(msg)
        by_key = dict(zip(wanted, answers, strict=True))
        return [document_proxies(mine, by_key) for mine in found]


def written_proxies(kind: str, model_name: str) -> WrittenProxies:
    """The ``write_proxies`` hook that has ``model_name`` write proxies of ``kind``."""
    return WrittenProxies(check_kind(kind), model_name)
