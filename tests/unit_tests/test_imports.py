import langchain_s2b

EXPECTED_ALL = [
    "DocumentCodecStore",
    "FaissIndex",
    "IndexingResult",
    "Level",
    "Proxy",
    "SentenceSplitter",
    "SentenceWindowExpander",
    "SmallToBigRetriever",
    "WindowSplitter",
    "__version__",
    "estimate_tokens",
]


def test_all_imports() -> None:
    assert sorted(langchain_s2b.__all__) == sorted(EXPECTED_ALL)
    for name in langchain_s2b.__all__:
        assert hasattr(langchain_s2b, name)
