"""Proxies: extra vectors that stand for a span of the source (issue 35).

A proxy is embedded and lexically indexed beside the leaves, never returned
as text; a hit on it is a hit on every leaf its span meets, at its score, and
every mode goes on from there as from a leaf hit.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core import lifecycle, ranking
from langchain_s2b.core import verify as checks
from langchain_s2b.core.hits import Hit, Scored
from langchain_s2b.core.params import QueryParams
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.requests import Found, LeafHits, Op, Search, SearchText, TextHits
from langchain_s2b.core.tree import Level, Node, Tree

from ._embeddings import ExactWords

# Six sentences; the leaves are the sentences (the default levels).
TEXT = (
    "Alpha beta gamma. Delta epsilon zeta. Eta theta iota. "
    "Kappa lambda mu. Nu xi omicron. Pi rho sigma."
)
S = [0, 18, 38, 54, 71, 86, len(TEXT)]  # sentence starts (a gap joins the span before)
WINDOW_LIKE = ("window", "parent", "multilevel", "pack")


def _retriever(mode: str = "window", hybrid: bool = False, **fields: Any) -> SmallToBigRetriever:
    return SmallToBigRetriever(
        vectorstore=FaissIndex(ExactWords()), mode=mode, hybrid=hybrid, **fields
    )


def _without_proxy(meta: dict[str, Any]) -> dict[str, Any]:
    out = dict(meta)
    out["matches"] = [{k: v for k, v in m.items() if k != "proxy"} for m in meta["matches"]]
    return out


def test_the_sentences_are_the_leaves_assumed_here() -> None:
    retriever = _retriever()
    retriever.add_documents([Document(TEXT, id="a")])
    faiss = retriever._io.index.faiss
    assert faiss is not None
    starts = sorted(int(r[2]["start"]) for r in faiss.records(list(range(6))) if r is not None)
    assert starts == S[:-1]


@pytest.mark.parametrize("mode", WINDOW_LIKE)
@pytest.mark.parametrize("hybrid", [False, True])
def test_a_proxy_never_comes_back_as_text(mode: str, hybrid: bool) -> None:
    retriever = _retriever(mode, hybrid)
    retriever.add_documents(
        [Document(TEXT, id="a")], proxies=[[Proxy("zebra giraffe", S[1], S[3])]]
    )
    docs = retriever.invoke("zebra giraffe", k=2)
    assert docs
    for doc in docs:
        assert "zebra" not in doc.page_content
        assert "zebra" not in json.dumps(_without_proxy(doc.metadata))
        assert doc.page_content == TEXT[doc.metadata["start"] : doc.metadata["end"]]
        for match in doc.metadata["matches"]:  # offsets stay the source's: a leaf's span
            if "proxy" in match:  # a leaf that meets its span (parent mode: one chunk)
                assert match["start"] < S[3]
                assert match["end"] > S[1]
                proxy = {"key": "a/proxy/0", "kind": "user", "text": "zebra giraffe"}
                assert match["proxy"] == proxy
    proxied = [m for d in docs for m in d.metadata["matches"] if "proxy" in m]
    assert proxied


def test_matches_say_exactly_which_proxy_matched() -> None:
    retriever = _retriever("window")
    retriever.add_documents(
        [Document(TEXT, id="a")],
        proxies=[[Proxy("lion", S[0], S[1], "question"), Proxy("zebra giraffe", S[1], S[3])]],
    )
    (doc,) = retriever.invoke("zebra giraffe", k=1, window_size=1)
    assert doc.page_content == TEXT[S[0] : S[3]]  # the window of the first; the next inside
    proxy = {"key": "a/proxy/1", "kind": "user", "text": "zebra giraffe"}
    assert [(m["key"], m.get("proxy")) for m in doc.metadata["matches"]] == [
        ("a/sentence/1", proxy),
        ("a/sentence/2", proxy),
    ]
    (doc,) = retriever.invoke("lion", k=1, window_size=0)
    assert doc.page_content == TEXT[S[0] : S[1]]
    (match,) = doc.metadata["matches"]
    assert match["proxy"] == {"key": "a/proxy/0", "kind": "question", "text": "lion"}


def _pair() -> tuple[SmallToBigRetriever, SmallToBigRetriever, str]:
    """The same span hit through a proxy, and through its leaf's own text.

    Both indexes hold six leaves and one proxy, with the same scores for the
    query: the hit (1) on sentence 2 and 0 on every other child.
    """
    own = TEXT[: S[2]] + "Zebra gnu yaks. " + TEXT[S[3] :]
    assert len(own) == len(TEXT)
    by_proxy, by_leaf = _retriever(), _retriever()
    by_proxy.add_documents(
        [Document(TEXT, id="a")], proxies=[[Proxy("zebra gnu yaks", S[2], S[3])]]
    )
    by_leaf.add_documents([Document(own, id="a")], proxies=[[Proxy("omega", S[5], S[6])]])
    return by_proxy, by_leaf, "zebra gnu yaks"


def _shape(doc: Document) -> tuple[Any, ...]:
    meta = doc.metadata
    matches = [(m["key"], m["score"], m["start"], m["end"]) for m in meta["matches"]]
    rest = {k: v for k, v in meta.items() if k != "matches"}
    return (rest, matches)


@pytest.mark.parametrize("mode", WINDOW_LIKE)
@pytest.mark.parametrize("params", [{"k": 1}, {"k": 3}, {"k": None, "max_tokens": 40}])
def test_a_proxy_hit_widens_exactly_as_a_hit_on_its_leaf(mode: str, params: dict[str, Any]) -> None:
    by_proxy, by_leaf, query = _pair()
    got = by_proxy.invoke(query, mode=mode, **params)
    want = by_leaf.invoke(query, mode=mode, **params)
    assert [_shape(d) for d in got] == [_shape(d) for d in want]
    for doc in got:
        assert doc.page_content == TEXT[doc.metadata["start"] : doc.metadata["end"]]


def test_a_hit_on_a_proxy_of_several_leaves_is_a_hit_on_each() -> None:
    retriever = _retriever("window")
    retriever.add_documents(
        [Document(TEXT, id="a")], proxies=[[Proxy("zebra giraffe", S[1] + 3, S[4] - 1)]]
    )
    docs = retriever.invoke("zebra giraffe", k=3, window_size=0)
    assert [[m["key"] for m in d.metadata["matches"]] for d in docs] == [
        ["a/sentence/1"],
        ["a/sentence/2"],
        ["a/sentence/3"],
    ]
    assert [d.page_content for d in docs] == [TEXT[S[i] : S[i + 1]] for i in (1, 2, 3)]
    assert all(d.metadata["matches"][0]["proxy"]["key"] == "a/proxy/0" for d in docs)


def test_a_leaf_hit_directly_and_through_a_proxy_keeps_its_best_score_its_own_on_a_tie() -> None:
    retriever = _retriever("window")
    retriever.add_documents(
        [Document(TEXT, id="a")],
        proxies=[[Proxy("delta epsilon zeta", S[1], S[3]), Proxy("delta", S[0], S[2])]],
    )
    docs = retriever.invoke("delta epsilon zeta", k=2, window_size=0)
    first = docs[0].metadata["matches"]
    assert [(m["key"], "proxy" in m) for m in first] == [("a/sentence/1", False)]  # a tie: own
    second = docs[1].metadata["matches"]
    assert [(m["key"], m["proxy"]["key"]) for m in second] == [("a/sentence/2", "a/proxy/0")]


def _children(retriever: SmallToBigRetriever) -> set[str]:
    faiss = retriever._io.index.faiss
    assert faiss is not None
    return set(faiss.keys())


def _lexical(retriever: SmallToBigRetriever) -> set[str]:
    faiss = retriever._io.index.faiss
    assert faiss is not None
    return faiss.lexical().keys()


def test_a_deleted_source_leaves_no_proxy_behind() -> None:
    retriever = _retriever(hybrid=True)
    docs = [Document(TEXT, id="a"), Document("Other text here. And more.", id="b")]
    retriever.add_documents(docs, proxies=[[Proxy("zebra", 0, 10)], [Proxy("lion", 0, 5)]])
    assert "a/proxy/0" in _lexical(retriever)
    assert retriever.delete(["a"]) == ["a"]
    left = {"b/sentence/0", "b/sentence/1", "b/proxy/0"}
    assert _children(retriever) == left
    assert _lexical(retriever) == left
    assert retriever.invoke("zebra", k=3) == [] or all(
        d.metadata["source_id"] == "b" for d in retriever.invoke("zebra", k=3)
    )
    assert retriever.verify().ok


def test_an_update_replaces_the_proxies_and_the_same_ones_are_unchanged() -> None:
    retriever = _retriever(hybrid=True)
    doc = Document(TEXT, id="a")
    retriever.add_documents([doc], proxies=[[Proxy("zebra", 0, 10)]])
    again = retriever.add_documents([doc], proxies=[[Proxy("zebra", 0, 10)]])
    assert again.unchanged == ["a"]
    changed = retriever.add_documents([doc], proxies=[[Proxy("lion", S[4], S[5])]])
    assert changed.updated == ["a"]
    assert changed.num_proxies == 1
    proxies = {k for k in _children(retriever) if "/proxy/" in k}
    assert proxies == {"a.g1/proxy/0"}
    assert {k for k in _lexical(retriever) if "/proxy/" in k} == {"a.g1/proxy/0"}
    (hit,) = retriever.invoke("lion", k=1, window_size=0)
    assert hit.page_content == TEXT[S[4] : S[5]]
    assert hit.metadata["matches"][0]["proxy"]["key"] == "a.g1/proxy/0"
    dropped = retriever.add_documents([doc])
    assert dropped.updated == ["a"]
    assert not {k for k in _children(retriever) if "/proxy/" in k}
    assert retriever.verify().ok


@pytest.mark.parametrize(
    ("proxies", "message"),
    [
        (
            [Proxy("x", -1, 3)],
            "Proxy #0 of document 'a' has the span [-1, 3); it must satisfy 0 <= start < end "
            f"<= {len(TEXT)} (the length of the document's text).",
        ),
        (
            [Proxy("x", 0, 3), Proxy("x", 5, 5)],
            "Proxy #1 of document 'a' has the span [5, 5); it must satisfy 0 <= start < end "
            f"<= {len(TEXT)} (the length of the document's text).",
        ),
        (
            [Proxy("x", 0, len(TEXT) + 1)],
            f"Proxy #0 of document 'a' has the span [0, {len(TEXT) + 1}); it must satisfy "
            f"0 <= start < end <= {len(TEXT)} (the length of the document's text).",
        ),
        (
            [Proxy(" ", 0, 3)],
            "Proxy #0 of document 'a' has text ' '; it must be a non-empty string.",
        ),
        (
            [Proxy("x", 0, 3, "guess")],
            "Proxy #0 of document 'a' has kind 'guess'; allowed: proposition, summary, "
            "question, user.",
        ),
        (
            ["x"],
            "Proxy #0 of document 'a' is a str; it must be a Proxy(text, start, end, kind).",
        ),
        (
            Proxy("x", 0, 3),
            "proxies for document 'a' must be a list of Proxy; got Proxy.",
        ),
    ],
)
def test_bad_proxies_are_refused_in_one_line(proxies: Any, message: str) -> None:
    retriever = _retriever()
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        retriever.add_documents([Document(TEXT, id="a")], proxies=[proxies])
    assert _children(retriever) == set()


def test_proxies_must_be_given_per_document() -> None:
    retriever = _retriever()
    message = (
        "Got 1 documents but proxies for 2; pass one list of Proxy per document "
        "(an empty one for none)."
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        retriever.add_documents([Document(TEXT, id="a")], proxies=[[], []])


def test_a_level_may_not_be_named_proxy() -> None:
    with pytest.raises(ValueError, match=r"^'proxy' is reserved for proxies' keys"):
        Level("proxy", lambda text: [text])


def test_node_proxies_are_asked_for_every_node_of_every_level() -> None:
    seen: list[tuple[str, int]] = []

    def per_node(document: Document, node: Node) -> list[str]:
        seen.append((node.level, node.split_id))
        return ["zebra"] if (node.level, node.split_id) == ("sentence", 4) else []

    retriever = _retriever("window", node_proxies=per_node)
    retriever.add_documents([Document(TEXT, id="a")])
    assert seen == [
        ("doc", 0),
        ("section", 0),
        ("paragraph", 0),
        *[("sentence", i) for i in range(6)],
    ]
    (doc,) = retriever.invoke("zebra", k=1, window_size=0)
    assert doc.page_content == TEXT[S[4] : S[5]]
    assert doc.metadata["matches"][0]["proxy"] == {
        "key": "a/proxy/0",
        "kind": "user",
        "text": "zebra",
    }
    assert retriever.add_documents([Document(TEXT, id="a")]).unchanged == ["a"]


def test_a_generic_vector_store_reads_the_leaves_a_proxy_stands_for() -> None:
    retriever = SmallToBigRetriever(vectorstore=InMemoryVectorStore(ExactWords()), mode="window")
    retriever.add_documents([Document(TEXT, id="a")], proxies=[[Proxy("zebra", S[2], S[3])]])
    (doc,) = retriever.invoke("zebra", k=1, window_size=0)
    assert doc.page_content == TEXT[S[2] : S[3]]
    assert doc.metadata["matches"][0]["proxy"]["key"] == "a/proxy/0"


def test_proxies_are_saved_and_loaded(tmp_path: Path) -> None:
    emb = ExactWords()
    retriever = SmallToBigRetriever(vectorstore=FaissIndex(emb), mode="window", hybrid=True)
    retriever.add_documents([Document(TEXT, id="a")], proxies=[[Proxy("zebra", S[3], S[4])]])
    retriever.save(tmp_path / "index")
    loaded = SmallToBigRetriever.load(tmp_path / "index", emb)
    assert _children(loaded) == _children(retriever)
    assert _lexical(loaded) == _lexical(retriever)
    for hybrid in (False, True):
        (doc,) = loaded.invoke("zebra", k=1, window_size=0, hybrid=hybrid)
        assert doc.page_content == TEXT[S[3] : S[4]]
        assert doc.metadata["matches"][0]["proxy"]["text"] == "zebra"
    assert loaded.verify(digests=True).ok


def test_verify_finds_and_repairs_a_proxy_with_no_source_or_no_leaves() -> None:
    retriever = _retriever()
    retriever.add_documents(
        [Document(TEXT, id="a")], proxies=[[Proxy("zebra", 0, 10), Proxy("lion", S[2], S[3])]]
    )
    faiss = retriever._io.index.faiss
    assert faiss is not None
    base = {"source_id": "gone", "source_key": "gone", "level": "proxy", "split_id": 0}
    orphan = {**base, "start": 0, "end": 5, "proxy_kind": "user", "covers": ["sentence", 0, 0]}
    faiss.add_texts(["stray"], [orphan], ids=["gone/proxy/0"])
    (row,) = faiss.rows_of(["a/proxy/0"])
    (_, _, meta) = faiss.records([row])[0] or ("", "", {})
    faiss.delete(["a/proxy/0"])
    faiss.add_texts(["zebra"], [{**meta, "covers": ["sentence", 4, 9]}], ids=["a/proxy/0"])
    report = retriever.verify()
    assert report.orphan_children == ["gone/proxy/0"]
    assert report.bad_proxies == {"a": ["a/proxy/0"]}
    assert not report.ok
    repaired = retriever.verify(repair=True)
    assert repaired.rebuilt == ["a"]
    assert retriever.verify(digests=True).ok
    assert {k for k in _children(retriever) if "/proxy/" in k} == {"a.g1/proxy/0"}
    (doc,) = retriever.invoke("lion", k=1, window_size=0)
    assert doc.page_content == TEXT[S[2] : S[3]]
    assert (
        retriever.invoke("zebra", k=1, window_size=0)[0].metadata["matches"][0].get("proxy") is None
    )


def test_model_written_proxies_join_the_users_and_stay_out_of_the_digest() -> None:
    retriever = _retriever("window")
    asked: list[list[str | None]] = []

    class Written:
        """A hook shaped like the model's (``core.model_proxies``): its setting names it."""

        def setting(self) -> dict[str, str]:
            return {"kind": "summaries", "model": "test"}

        def __call__(self, documents: list[Document], trees: list[Tree]) -> Op[list[list[Proxy]]]:
            asked.append([d.id for d in documents])
            assert [len(t.leaves) for t in trees] == [6] * len(documents)
            return [[Proxy("okapi", S[5], S[6], "summary")] for _ in documents]
            yield  # an operation: it may ask for I/O (a chat model's answers)

    config = replace(retriever._lifecycle_config(), write_proxies=Written())
    docs, own = [Document(TEXT, id="a")], [[Proxy("zebra", 0, 10)]]
    result = retriever._io.drive(lifecycle.add(config, docs, None, proxies=own), write=True)
    assert (result.added, result.num_proxies) == (["a"], 2)
    (doc,) = retriever.invoke("okapi", k=1, window_size=0)
    assert doc.page_content == TEXT[S[5] : S[6]]
    assert doc.metadata["matches"][0]["proxy"] == {
        "key": "a/proxy/1",
        "kind": "summary",
        "text": "okapi",
    }
    again = retriever._io.drive(lifecycle.add(config, docs, None, proxies=own), write=True)
    assert again.unchanged == ["a"]
    assert asked == [["a"]]  # asked only for the sources written
    assert retriever._io.drive(checks.check(config, repair=False, digests=True)).ok  # its setting


def test_a_manifest_with_a_bad_proxy_count_is_a_bad_manifest() -> None:
    retriever = _retriever()
    retriever.add_documents([Document(TEXT, id="a")], proxies=[[Proxy("zebra", 0, 10)]])
    (manifest,) = retriever.docstore.mget(["a/manifest"])
    assert manifest is not None
    assert manifest.metadata["proxies"] == 1
    crafted = Document("", metadata={**manifest.metadata, "proxies": "1"}, id=manifest.id)
    retriever.docstore.mset([("a/manifest", crafted)])
    assert retriever.verify().bad_manifests == ["a/manifest"]


def test_a_proxy_only_bm25_found_counts_for_its_leaves_under_hybrid_search() -> None:
    """Driven by hand: the dense search misses the proxy, BM25 ranks it first.

    Its covers and dense score come through ``LeafHits``; its leaves join BM25's
    list at its BM25 score, and the dense scale stays the one searched.
    """
    proxy = Hit(
        "a/proxy/0", "a", "a", "proxy", 0, S[1], S[3], 0.05, "zebra",
        proxy=("a/proxy/0", "user", "zebra"), covers=("sentence", 1, 2),
    )  # fmt: skip
    dense = [Scored.of("a/sentence/0", 0.5), Scored.of("a/sentence/1", 0.1)]
    op = ranking._searched("zebra", [1.0], QueryParams(mode="window"), 2)
    asked: list[Any] = []
    answers: dict[type, Any] = {
        Search: Found(dense, True),
        SearchText: TextHits([("a/proxy/0", 3.0), ("a/sentence/0", 1.0)], {}),
        LeafHits: {"a/proxy/0": proxy},
    }
    request = next(op)
    try:
        while True:
            asked.append(request)
            request = op.send(answers[type(request)])
    except StopIteration as done:
        got: ranking.Ranked = done.value
    assert [type(r) for r in asked] == [Search, SearchText, LeafHits]
    assert asked[2].keys == ["a/proxy/0"]
    assert [(h.key, h.score, h.proxy) for h in got.hits] == [
        ("a/sentence/0", 0.5, None),
        ("a/sentence/1", 0.1, None),  # its own 0.1 beats the proxy's 0.05
        ("a/sentence/2", 0.05, ("a/proxy/0", "user", "zebra")),
    ]
    z_dense = {"a/sentence/0": 1.0, "a/sentence/1": -1.0, "a/sentence/2": -1.25}  # 0.3 +- 0.2
    std = (8 / 9) ** 0.5  # BM25's list [3, 3, 1] (the proxy's 3 for each of its leaves)
    z_lexical = {"a/sentence/0": -4 / 3 / std, "a/sentence/1": 2 / 3 / std}
    z_lexical["a/sentence/2"] = 2 / 3 / std
    assert got.fused is not None
    for key, z in z_dense.items():
        assert got.fused[key] == pytest.approx(z + 0.3 * z_lexical[key], abs=1e-12)
