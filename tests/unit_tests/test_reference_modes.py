"""Differential tests: every mode, through every child index, equals tests/reference.py.

Random corpora (repeated sentences and paragraphs, one-sentence and blank
sources, Unicode ids and words), random settings and filters, three kinds of
leaf splitter, and every child index the README names. The embedding is exact
and tiny (topic-word counts), so scores tie and are zero often.

With contextual headers on (the ``..._with_headers_...`` tests), sources
carry Markdown headings and sometimes a title, and the reference computes
each leaf's header from the source text and its own tree, and each child's
expected score from the embedding of its header and text (``InMemoryVectorStore``
embeds ``page_content`` itself, so it is refused there and left out).

Exact indexes (``FaissIndex("Flat")``, ``InMemoryVectorStore``,
``langchain_community`` ``FAISS``): the reference ranks every child by the score
the index gives it. Approximate ones (IVF, HNSW, PQ): the reference works from
the children the index actually returned for each search (recorded by wrapping
``search_rows``).
"""

from __future__ import annotations

import asyncio
import re
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import faiss
import numpy as np
import pytest
from hypothesis import assume, event, given
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_text_splitters import CharacterTextSplitter, RecursiveCharacterTextSplitter

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.keys import node_key
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.core.tree import Level

from .. import reference as ref
from ._rerankers import WordOverlap

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS

TOPICS = ["apple", "river", "stone", "délta", "東京", "🙂", "zeta"]
FILLER = ["the", "of", "and", "ω"]
SENTENCE_SEP = r"(?<=\.)\s+"
PARAGRAPH_SEP = r"\n\n+"
SECTION_SEP = r"\n\n\n\n+"


class TopicEmbedding(Embeddings):
    """Counts of the topic words, plus a constant dimension for documents (never zero).

    ``query_bias`` 0: a child sharing no topic with the query scores exactly 0,
    and cosines spread over [0, 1]. ``query_bias`` 3 (with ``doc_bias`` 3):
    every child scores well above 0 and the cosines crowd into a narrow band,
    as multilingual-e5-small's do: the same ranking on another scale.
    """

    def __init__(self, doc_bias: float = 1.0, query_bias: float = 0.0) -> None:
        self.doc_bias, self.query_bias = doc_bias, query_bias

    def _vector(self, text: str, bias: float) -> list[float]:
        words = re.findall(r"[^\s.]+", text)
        return [float(words.count(t)) for t in TOPICS] + [bias]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t, self.doc_bias) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text, self.query_bias)


EMBEDDINGS = {"spread": TopicEmbedding(), "crowded": TopicEmbedding(3.0, 3.0)}
"""Two embeddings whose scores spread differently."""


@pytest.fixture(autouse=True, scope="module")
def _one_faiss_thread() -> Iterator[None]:
    """Training a tiny IVF/PQ index on many OpenMP threads costs more than the whole test."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


# Corpora ----------------------------------------------------------------------------

WORDS = TOPICS + FILLER


@st.composite
def source_text(draw: st.DrawFn) -> str:
    """Sections of paragraphs of sentences, drawn from small pools so that text repeats."""
    shape = draw(st.lists(st.integers(0, 2**16 - 1), min_size=4, max_size=4))
    if shape[0] % 10 == 0:
        return ["", "   ", "\n\n"][shape[1] % 3]
    seed = iter(draw(st.lists(st.integers(0, len(WORDS) - 1), min_size=12, max_size=12)))
    pool = [
        " ".join(WORDS[next(seed)] for _ in range(1 + i % 3)) + "." for i in range(1 + shape[1] % 4)
    ]
    if shape[0] % 10 == 1:  # a one-sentence document
        return pool[0]
    paras = [
        " ".join(pool[(shape[2] >> j) % len(pool)] for j in range(1 + (shape[2] + i) % 4))
        for i in range(1 + shape[3] % 3)
    ]
    sections = [
        "\n\n".join(paras[(shape[3] >> j) % len(paras)] for j in range(1 + (shape[1] + i) % 3))
        for i in range(1 + shape[0] % 3)
    ]
    return "\n\n\n\n".join(sections)


@st.composite
def headed_text(draw: st.DrawFn) -> str:
    """:func:`source_text` with Markdown headings (topic words, levels 1-3) before paragraphs."""
    text = draw(source_text())
    if not text.strip():
        return text
    sections = []
    for section in text.split("\n\n\n\n"):
        paragraphs = []
        for paragraph in section.split("\n\n"):
            if draw(st.booleans()):
                level = draw(st.integers(1, 3))
                name = " ".join(draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=2)))
                paragraphs.append(f"{'#' * level} {name}")
            paragraphs.append(paragraph)
        sections.append("\n\n".join(paragraphs))
    return "\n\n\n\n".join(sections)


SOURCE_IDS = ["s0", "s/1", "é 2", "東京-3"]


@st.composite
def corpus(draw: st.DrawFn, headers: bool = False) -> list[tuple[str, str, dict[str, Any]]]:
    n = draw(st.integers(1, 4))
    out = []
    for i in range(n):
        meta: dict[str, Any] = {"topic": draw(st.sampled_from("ab")), "n": draw(st.integers(0, 3))}
        if headers and draw(st.booleans()):
            meta["title"] = draw(st.sampled_from(TOPICS))
        out.append((SOURCE_IDS[i], draw(headed_text() if headers else source_text()), meta))
    return out


# Leaf splitters: the library's splitter and the reference's exact spans --------------


@dataclass
class LeafSplitter:
    name: str
    splitter: Any
    spans: ref.Spans


def sentence_callable() -> LeafSplitter:
    spans = ref.separated_spans(SENTENCE_SEP)
    return LeafSplitter(
        "sentences (callable)", lambda text: [text[a:b] for a, b in spans(text)], spans
    )


@st.composite
def leaf_splitter(draw: st.DrawFn) -> LeafSplitter:
    kind = draw(st.sampled_from(["callable", "recursive", "character"]))
    if kind == "callable":
        return sentence_callable()
    size = draw(st.integers(6, 40))
    overlap = draw(st.sampled_from([0, 0, size // 4, size // 2]))
    if kind == "recursive":
        sp: Any = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap)
    else:
        sp = CharacterTextSplitter(separator=" ", chunk_size=size, chunk_overlap=overlap)
    return LeafSplitter(f"{kind}({size}, {overlap})", sp, ref.marked_spans(sp.split_text, ""))


def callable_of(separator: str) -> Callable[[str], list[str]]:
    spans = ref.separated_spans(separator)
    return lambda text: [text[a:b] for a, b in spans(text)]


def levels_for(mode: str, leaf: LeafSplitter) -> tuple[list[Level], list[tuple[str, ref.Spans]]]:
    """The library's levels and the reference's, finest first."""
    if mode == "window":
        names = [("sentence", None)]
    elif mode == "parent":
        names = [("child", None), ("parent", PARAGRAPH_SEP)]
    else:
        names = [("sentence", None), ("paragraph", PARAGRAPH_SEP), ("section", SECTION_SEP)]
    lib = [Level(n, leaf.splitter if sep is None else callable_of(sep)) for n, sep in names]
    mine = [(n, leaf.spans if sep is None else ref.separated_spans(sep)) for n, sep in names]
    return lib, mine


# Child indexes ----------------------------------------------------------------------

INDEXES = ["flat", "inmemory", "community", "ivf", "hnsw", "pq"]
EXACT = {"flat", "inmemory", "community"}


def make_index(kind: str, train_size: int, emb: TopicEmbedding) -> VectorStore:
    if kind == "flat":
        return FaissIndex(emb, "Flat")
    if kind == "ivf":
        return FaissIndex(emb, "IVF4,Flat", train_size=train_size)
    if kind == "hnsw":
        return FaissIndex(emb, "HNSW32")
    if kind == "pq":
        return FaissIndex(emb, "PQ4x4np", train_size=max(train_size, 16))
    if kind == "inmemory":
        return InMemoryVectorStore(emb)
    dim = len(TOPICS) + 1
    return FAISS(emb, faiss.IndexFlatL2(dim), InMemoryDocstore(), {}, normalize_L2=True)


def all_scores(store: VectorStore, vector: list[float]) -> list[tuple[dict[str, Any], float]]:
    """Every child's metadata and score, straight from the index (exact indexes)."""
    if isinstance(store, FaissIndex):
        scores, rows = store.search_rows(np.asarray([vector]), len(store))
        found = store.records(rows[0].tolist())
        return [
            (f[2], float(s))
            for f, s in zip(found, scores[0].tolist(), strict=False)
            if f is not None
        ]
    n = len(store.store) if isinstance(store, InMemoryVectorStore) else store.index.ntotal  # type: ignore[attr-defined]
    pairs = store.similarity_search_with_score_by_vector(vector, k=max(n, 1))  # type: ignore[attr-defined]
    fn = store._select_relevance_score_fn() if isinstance(store, FAISS) else (lambda x: x)
    return [(doc.metadata, float(fn(score))) for doc, score in pairs]


def exact_score(index: str, emb: TopicEmbedding, query: list[float], node: ref.Node) -> float:
    """The child's cosine similarity, as the index reports it (L2 FAISS: ``1 - d / sqrt 2``).

    What is embedded is the leaf's header and text (:func:`ref.embedded`; the text alone
    without a header).
    """
    text = ref.embedded(node)
    q, d = np.asarray(query), np.asarray(emb.embed_documents([text])[0])
    cos = float(q @ d / (np.linalg.norm(q) * np.linalg.norm(d)))
    return 1.0 - (2.0 - 2.0 * cos) / np.sqrt(2.0) if index == "community" else cos


def key_of(meta: dict[str, Any]) -> str:
    return node_key(meta["source_key"], meta["level"], int(meta["split_id"]))


# Filters: the dict the retriever gets, and the reference's own predicate ---------------

FILTERS: list[tuple[dict[str, Any] | None, Callable[[dict[str, Any]], bool]]] = [
    (None, lambda m: True),
    ({"topic": "a"}, lambda m: m["topic"] == "a"),
    ({"topic": {"$in": ["b"]}}, lambda m: m["topic"] == "b"),
    ({"n": {"$gte": 2}}, lambda m: m["n"] >= 2),
    ({"$or": [{"topic": "a"}, {"n": 0}]}, lambda m: m["topic"] == "a" or m["n"] == 0),
    ({"n": {"$ne": 1}, "topic": "b"}, lambda m: m["n"] != 1 and m["topic"] == "b"),
]


def words(text: str) -> int:
    """Whitespace-separated words: a counter that is not characters / 4."""
    return len(text.split())


def squared(text: str) -> int:
    """Not linear in characters at all: a merged run costs more than its parts."""
    return (len(text) // 4) ** 2 // 8 + 1


COUNTERS: dict[str, Any] = {"chars / 4": None, "words": words, "squared": squared}
RERANKERS = [None, None, WordOverlap(), WordOverlap(top_n=2), WordOverlap(scores=False)]
"""No reranker (most cases), or one that reorders by word overlap (with scores, keeping two,
by its order alone)."""


@st.composite
def options(draw: st.DrawFn) -> dict[str, Any]:
    before, after = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    budgets = st.one_of(
        st.none(), st.integers(1, 3), st.integers(1, 40), st.integers(40, 300), st.just(100_000)
    )
    budget = draw(budgets)
    return {
        "k": draw(st.integers(1, 5)) if budget is None or draw(st.booleans()) else None,
        "fetch_k": draw(st.integers(1, 8)),
        "window_before": before,
        "window_after": after,
        "coalesce": draw(st.booleans()),
        "max_tokens": budget,
        "margin": draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5])),
        "hybrid": draw(st.booleans()),
        "token_counter": COUNTERS[draw(st.sampled_from(sorted(COUNTERS)))],
        "reranker": draw(st.sampled_from(RERANKERS)),
    }


queries = st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3).map(" ".join)


# The comparison ---------------------------------------------------------------------


def keep_any(case: Case) -> bool:
    """Whether the case's filter lets any non-blank source through."""
    keep = FILTERS[case.filter_no][1]
    return any(text.strip() and keep(meta) for _, text, meta in case.docs)


@dataclass
class Case:
    mode: str
    embedding: str
    docs: list[tuple[str, str, dict[str, Any]]]
    leaf: LeafSplitter
    index: str
    train_size: int
    query: str
    opts: dict[str, Any]
    filter_no: int
    headers: bool = False
    proxies: list[list[tuple[str, int, int]]] | None = None
    """Each source's proxies ``(text, start, end)`` (``None``: none given)."""


def run(case: Case) -> None:
    lib_levels, ref_levels = levels_for(case.mode, case.leaf)
    emb = EMBEDDINGS[case.embedding]
    store = make_index(case.index, case.train_size, emb)
    retriever = SmallToBigRetriever(
        vectorstore=store, levels=lib_levels, mode=case.mode, contextual_headers=case.headers
    )
    given = None
    if case.proxies is not None:
        given = [[Proxy(*p) for p in per_doc] for per_doc in case.proxies]
    retriever.add_documents(
        [Document(page_content=text, metadata=meta) for _, text, meta in case.docs],
        ids=[sid for sid, _, _ in case.docs],
        proxies=given,
    )
    sources = [ref.build(sid, text, meta, ref_levels) for sid, text, meta in case.docs]
    leaf_level = ref_levels[0][0]
    if case.headers:
        for source in sources:
            ref.add_headers(source, leaf_level)
    nodes = {n.key: n for s in sources for n in ref.leaves(s, leaf_level)}
    for source, per_doc in zip(sources, case.proxies or [[] for _ in sources], strict=True):
        for text, start, end in per_doc if source.text.strip() else []:
            proxy = ref.add_proxy(source, leaf_level, text, start, end)
            nodes[proxy.key] = proxy
            event("a proxy")
    flt, keep = FILTERS[case.filter_no]

    raw: dict[int, list[list[tuple[str, float]]]] = defaultdict(list)
    prefiltered = case.index not in EXACT and flt is not None
    if case.index not in EXACT:
        record_searches(retriever, store, raw)

    opts = {
        k: v
        for k, v in case.opts.items()
        if v is not None or k not in ("token_counter", "reranker")
    }
    got = retriever.invoke(case.query, filter=flt, **opts)

    def hits_of(pairs: list[tuple[str, float]]) -> list[ref.Hit]:
        return [ref.Hit(nodes[k], s) for k, s in pairs if keep(nodes[k].source.metadata)]

    if case.index in EXACT:
        vector = emb.embed_query(case.query)
        every = hits_of([(key_of(m), s) for m, s in all_scores(store, vector)])
        assert sorted(h.node.key for h in every) == sorted(
            k for k, n in nodes.items() if keep(n.source.metadata)
        )

        for hit in every:  # the index is exact: its scores are the cosines (or their transform)
            exact = exact_score(case.index, emb, vector, hit.node)
            assert hit.score == pytest.approx(exact, abs=1e-5)

        def oracle(fetch: int) -> list[ref.Hit]:
            return every
    elif prefiltered:  # FaissIndex filters before the search: the matching children scored
        vector = emb.embed_query(case.query)
        matching = hits_of(stored_scores(store, vector))

        def oracle(fetch: int) -> list[ref.Hit]:
            return matching
    else:

        def oracle(fetch: int) -> list[ref.Hit]:
            if not nodes:  # an empty index is not searched
                return []
            assert raw[fetch], f"the retriever never searched {fetch} deep; it searched {list(raw)}"
            return hits_of(raw[fetch][-1])

    lexical = None
    if case.opts["hybrid"]:
        vector = emb.embed_query(case.query)
        if case.index in EXACT:
            cosines = {key_of(m): s for m, s in all_scores(store, vector)}
        else:
            cosines = dict(stored_scores(store, vector))
        lexical = ref.Lexical(
            case.query,
            [n for n in nodes.values() if n.proxy is None],
            lambda node: keep(node.source.metadata),
            lambda node: cosines[node.key],
            ref.embedded,
        )
    o = case.opts
    settings = ref.Settings(
        k=o["k"],
        fetch_k=o["fetch_k"],
        before=o["window_before"],
        after=o["window_after"],
        coalesce=o["coalesce"],
        max_tokens=o["max_tokens"],
        margin=o["margin"],
        token_counter=o["token_counter"],
        lexical=lexical,
        reranker=o["reranker"],
        query=case.query,
    )
    want = ref.retrieve(case.mode, oracle, settings)
    fused = settings.trace.get("fused")
    if fused is not None:
        event("hybrid under a budget")
        values = sorted(fused.values())
        # float32 BM25 in the engine, float64 here: a near-tie may order either way
        assume(all(b - a == 0 or b - a > 1e-5 for a, b in pairwise(values)))
    event(f"index: {case.index}")
    event(f"results: {min(len(want), 3)}{'+' if len(want) >= 3 else ''}")
    event(f"embedding: {case.embedding}")
    event(f"reranker: {case.opts['reranker']!r:.40}")
    if case.headers and any("heading" in d.metadata for d in want):
        event("a result with a heading")
    event(f"k: {'None (as many as fit)' if case.opts['k'] is None else 'a number'}")
    if any(d.metadata.get("escalation") == "cut" for d in want):
        event("a result cut to the ceiling")
    if any(d.metadata.get("level") in ("section", "doc") for d in want):
        event("multilevel climbed to a section or the document")
    if case.mode == "multilevel" and len({d.metadata.get("context") for d in want}) < len(want):
        event("a context in several parts")
    if any("proxy" in m for d in want for m in d.metadata["matches"]):
        event("a match through a proxy")
    if not want:
        reason = "the filter matches nothing" if not any(map(keep_any, [case])) else "other"
        event(f"no results: {reason}")
    assert_same(got, want)
    # The async path and a batch (one matrix search for FaissIndex) give the same answer.
    options = {"filter": flt, **opts}
    assert_same(asyncio.run(retriever.ainvoke(case.query, **options)), want)
    for answer in retriever.batch([case.query, case.query], **options):
        assert_same(answer, want)


def assert_same(got: list[Document], want: list[Document]) -> None:
    """Equal documents; scores equal to float32 precision.

    An approximate index (IVF, HNSW, PQ) scores with its own kernel, the
    reference with a flat scan of the same vectors: the two sums may differ in
    the last float32 place. Fused scores are compared more loosely (BM25 is
    float32 in tantivy, float64 here).
    """

    def apart(docs: list[Document]) -> tuple[list[Document], list[Any]]:
        plain, scores = [], []
        for doc in docs:
            meta = dict(doc.metadata)
            matches = [dict(m) for m in meta.get("matches", [])]
            scores.append(
                (
                    meta.pop("score", None),
                    [m.pop("score", None) for m in matches],
                    meta.pop("fused_score", None),
                    [m.pop("fused_score", None) for m in matches],
                )
            )
            if matches:
                meta["matches"] = matches
            plain.append(Document(page_content=doc.page_content, metadata=meta, id=doc.id))
        return plain, scores

    got_plain, got_scores = apart(got)
    want_plain, want_scores = apart(want)
    assert got_plain == want_plain
    assert len(got_scores) == len(want_scores)
    for (g, gm, gf, gfm), (w, wm, wf, wfm) in zip(got_scores, want_scores, strict=True):
        assert (g is None, gf is None) == (w is None, wf is None)
        if w is not None:
            assert g == pytest.approx(w, rel=1e-6, abs=1e-7)
        assert gm == pytest.approx(wm, rel=1e-6, abs=1e-7)
        if wf is not None:
            assert gf == pytest.approx(wf, abs=1e-4)
            assert gfm == pytest.approx(wfm, abs=1e-4)


def stored_scores(store: VectorStore, vector: list[float]) -> list[tuple[str, float]]:
    """Every child scored by brute force against the vector the index holds for it.

    The scores of an approximate index's own vectors (decoded, for PQ), by
    FAISS's inner product over all of them: what a filter applied before the
    search ranks its matching children by (the corpora here are small, so
    every matching child is scored).
    """
    assert isinstance(store, FaissIndex)
    keys = store.keys()
    if not keys:
        return []
    index = store._active()
    rows = np.asarray([store._ids[key] for key in keys], dtype=np.int64)
    try:
        vectors = index.reconstruct_batch(rows)
    except RuntimeError:  # IVF: ids mapped to their lists first
        faiss.extract_index_ivf(index).make_direct_map()
        vectors = index.reconstruct_batch(rows)
    query = np.asarray([vector], dtype=np.float32)
    faiss.normalize_L2(query)
    scan = faiss.IndexFlatIP(query.shape[1])
    scan.add(np.ascontiguousarray(vectors, dtype=np.float32))
    scores, positions = scan.search(query, len(keys))
    return [(keys[p], float(x)) for x, p in zip(scores[0], positions[0], strict=True) if p >= 0]


def record_searches(
    retriever: SmallToBigRetriever, store: VectorStore, raw: dict[int, list[Any]]
) -> None:
    """Record what FAISS returned during each search the retriever made, by its depth."""
    assert isinstance(store, FaissIndex)
    index = retriever._io.index
    depth = {"fetch": -1}
    search, search_rows = index.search, store.search_rows

    def recording_search(vector: Any, query: str, fetch: int, flt: Any) -> Any:
        depth["fetch"] = fetch
        return search(vector, query, fetch, flt)

    def recording_rows(queries: Any, k: int) -> Any:
        scores, rows = search_rows(queries, k)
        found = store.records(rows[0].tolist())
        pairs = [
            (key_of(f[2]), float(s)) for f, s in zip(found, scores[0].tolist(), strict=False) if f
        ]
        raw[depth["fetch"]].append(pairs)
        return scores, rows

    index.search = recording_search  # type: ignore[method-assign]
    store.search_rows = recording_rows  # type: ignore[method-assign]


@st.composite
def proxies_of(draw: st.DrawFn, docs: list[tuple[str, str, dict[str, Any]]]) -> Any:
    """Up to three proxies per source with text: topic words standing for a span of it."""
    out = []
    for _, text, _ in docs:
        mine = []
        for _ in range(draw(st.integers(0, 3)) if text.strip() else 0):
            start = draw(st.integers(0, len(text) - 1))
            end = draw(st.integers(start + 1, len(text)))
            mine.append((draw(queries), start, end))
        out.append(mine)
    return out


@st.composite
def cases(draw: st.DrawFn, mode: str, headers: bool = False, proxies: bool = False) -> Case:
    indexes = [i for i in INDEXES if i != "inmemory"] if headers else INDEXES
    if proxies:  # hybrid search with proxies is not stated by the reference
        docs = draw(corpus(headers))
        return Case(
            mode,
            draw(st.sampled_from(sorted(EMBEDDINGS))),
            docs,
            draw(leaf_splitter()),
            draw(st.sampled_from(indexes)),
            draw(st.integers(8, 24)),
            draw(queries),
            {**draw(options()), "hybrid": False},
            draw(st.one_of(st.just(0), st.integers(0, len(FILTERS) - 1))),
            headers,
            draw(proxies_of(docs)),
        )
    return Case(
        mode,
        draw(st.sampled_from(sorted(EMBEDDINGS))),
        draw(corpus(headers)),
        draw(leaf_splitter()),
        draw(st.sampled_from(indexes)),
        draw(st.integers(8, 24)),
        draw(queries),
        draw(options()),
        draw(st.one_of(st.just(0), st.integers(0, len(FILTERS) - 1))),
        headers,
    )


@given(case=cases("parent"))
def test_parent_mode_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("window"))
def test_window_mode_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("multilevel"))
def test_multilevel_mode_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("pack"))
def test_pack_mode_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("parent", headers=True))
def test_parent_mode_with_headers_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("window", headers=True))
def test_window_mode_with_headers_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("multilevel", headers=True))
def test_multilevel_mode_with_headers_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("pack", headers=True))
def test_pack_mode_with_headers_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("parent", proxies=True))
def test_parent_mode_with_proxies_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("window", proxies=True))
def test_window_mode_with_proxies_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("multilevel", proxies=True))
def test_multilevel_mode_with_proxies_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("pack", proxies=True))
def test_pack_mode_with_proxies_equals_the_reference(case: Case) -> None:
    run(case)


@given(case=cases("window", headers=True, proxies=True))
def test_window_mode_with_headers_and_proxies_equals_the_reference(case: Case) -> None:
    run(case)
