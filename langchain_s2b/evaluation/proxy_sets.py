"""User-given proxies made without a model, to measure the proxy machinery (issue 35).

Two sets, each a list parallel to the documents of lists of
:class:`~langchain_s2b.core.proxies.Proxy` (what ``add_documents(docs,
proxies=...)`` takes):

- :func:`first_sentences`: each paragraph's first sentence as a ``"summary"``
  proxy standing for the whole paragraph (a paragraph of one sentence gets
  none: its proxy would be its own leaf).
- :func:`other_questions`: the questions of the *giving* half of each
  article's questions (:func:`split_questions`), each pointing at the
  sentences that hold its gold evidence; the other half is evaluated, so no
  evaluated question ever has its own text in the index.

Sentences and paragraphs are those of the multilevel tree (the retriever's
default splitters), so a span is exactly a run of the index's leaves.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from langchain_core.documents import Document

from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.splitters import default_levels
from langchain_s2b.core.tree import Node, Tree, build_tree
from langchain_s2b.evaluation.data import Question

PROXY_SETS = ("none", "first-sentence", "other-questions")
"""The sets ``benchmarks/quality.py --proxies`` takes."""


def _tree(document: Document) -> Tree:
    return build_tree(document.page_content, "d", default_levels("multilevel", None, None))


def first_sentences(documents: Sequence[Document]) -> list[list[Proxy]]:
    """Each paragraph's first sentence, a ``"summary"`` proxy for the paragraph."""
    out: list[list[Proxy]] = []
    for document in documents:
        text = document.page_content
        tree = _tree(document)
        leaves = tree.leaves
        mine = []
        for paragraph in tree.nodes["paragraph"]:
            first, last = paragraph.children or (0, 0)
            if last - first < 2:
                continue
            sentence = " ".join(text[leaves[first].start : leaves[first].end].split())
            if sentence:
                mine.append(Proxy(sentence, paragraph.start, paragraph.end, "summary"))
        out.append(mine)
    return out


def split_questions(questions: Sequence[Question]) -> tuple[list[Question], list[Question]]:
    """``(evaluated, giving)``: each article's questions alternately, the first evaluated."""
    seen: dict[str, int] = {}
    evaluated: list[Question] = []
    giving: list[Question] = []
    for question in questions:
        n = seen.get(question.doc_id, 0)
        seen[question.doc_id] = n + 1
        (giving if n % 2 else evaluated).append(question)
    return evaluated, giving


def other_questions(
    documents: Sequence[Document], giving: Sequence[Question], evaluated: Sequence[Question] = ()
) -> list[list[Proxy]]:
    """The ``giving`` questions as ``"question"`` proxies on the sentences holding their evidence.

    One proxy per evidence span, over the sentences from the one where it
    starts to the one where it ends (spans in the same sentences, as several
    annotators' answers often are, give one). A question of ``evaluated`` is
    refused (``ValueError``): it would find its own text.
    """
    refused = {q.id for q in evaluated} & {q.id for q in giving}
    if refused:
        msg = f"{len(refused)} evaluated question(s) given as proxies (first: {min(refused)!r})."
        raise ValueError(msg)
    by_doc: dict[str, list[Question]] = {}
    for question in giving:
        by_doc.setdefault(question.doc_id, []).append(question)
    out: list[list[Proxy]] = []
    for document in documents:
        mine: dict[Proxy, None] = {}
        leaves = _tree(document).leaves
        for question in by_doc.get(str(document.id), []):
            for start, end in question.evidence:
                first = _leaf_at(leaves, start)
                last = _leaf_at(leaves, max(start, end - 1))
                mine[Proxy(question.question, first.start, last.end, "question")] = None
        out.append(list(mine))
    return out


def _leaf_at(leaves: Sequence[Node], offset: int) -> Node:
    """The leaf whose span holds ``offset`` (leaves tile the text)."""
    i = bisect.bisect_right(leaves, offset, key=_start) - 1
    return leaves[max(0, min(i, len(leaves) - 1))]


def _start(node: Node) -> int:
    return node.start
