"""The default token counter is LangChain's own approximate count, computed directly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages.utils import count_tokens_approximately

from langchain_s2b.core.budget import approximate_tokens, estimate_tokens


def langchain_count(text: str) -> int:
    """LangChain's count of ``text`` as one message's content, its role's share taken off."""
    if not text:
        return 0
    role_only = count_tokens_approximately([""], extra_tokens_per_message=0)
    return count_tokens_approximately([text], extra_tokens_per_message=0) - role_only


@given(st.text(max_size=300))
def test_approximate_tokens_is_langchains_count(text: str) -> None:
    assert approximate_tokens(text) == langchain_count(text) == estimate_tokens(text)


def test_worked_examples() -> None:
    assert [approximate_tokens(t) for t in ("", "abcd", "abcde", "x" * 400)] == [0, 1, 2, 100]
