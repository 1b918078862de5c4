"""Token counting: the ``token_counter`` every budget is measured with, and the default budgets.

LangChain's convention is a callable from text to a token count (a chat
model's ``get_num_tokens`` is one). The default, :func:`approximate_tokens`,
is LangChain's own offline estimate,
``langchain_core.messages.utils.count_tokens_approximately``, applied to one
text, and computed directly (a test checks they agree). That function takes
*messages*: given a bare string it would iterate its characters and count
each one as a message of its own, so the text counts as a one-message list.
It then charges each message its role (``user``, one token) and three extra
tokens on top of its content; those belong to the message a caller builds
around the documents (retrieved documents are handed to a model inside one
message, not one message each), so they are taken off: the count of a text
is the count of its content alone, ``ceil(chars / 4)``, and the count of
several texts never exceeds the sum of their counts.

:func:`estimate_tokens` is the same number computed directly; splitters use
it as their length function, so that a saved index can name it.

How a budget is spent lives in :mod:`~langchain_s2b.core.allocate`.
"""

from __future__ import annotations

from collections.abc import Callable

CHARS_PER_TOKEN = 4
TokenCounter = Callable[[str], int]
"""Text -> number of tokens (e.g. ``chat_model.get_num_tokens``)."""

MULTILEVEL_BUDGET = 1024
"""Multilevel mode's budget when the call names none and its contexts would exceed it.

On the dev set one more doubling past 1,024 tokens gains less than a point
(README, token budgets); whole documents (median 4,700 tokens on a real
folder) are never handed over unasked.
"""


def estimate_tokens(text: str) -> int:
    """Offline token estimate: one token per four characters, rounded up.

    The usual rule of thumb for English with BPE tokenizers (GPT, BERT word
    pieces land within ~20%); equal to :func:`approximate_tokens`.
    """
    return -(-len(text) // CHARS_PER_TOKEN)


def approximate_tokens(text: str) -> int:
    """LangChain's approximate count of ``text`` as message content (no per-message overhead).

    ``count_tokens_approximately([text], extra_tokens_per_message=0)`` less what
    it charges for the message's role is ``ceil(len(text) / 4)``, which is
    :func:`estimate_tokens`; it is computed that way, as calling LangChain's
    function costs ~15 µs (it builds a message per call) and a budget counts
    ~100 texts per query. ``tests/unit_tests/test_budget.py`` checks the two
    agree on random texts.

    Examples: ``""`` -> 0, ``"abcd"`` -> 1, ``"abcde"`` -> 2.
    """
    return estimate_tokens(text)


def fitting_prefix(text: str, max_tokens: int, counter: TokenCounter = approximate_tokens) -> int:
    """The length of the longest prefix of ``text`` that ``counter`` counts at most ``max_tokens``.

    A binary search over the prefix length (a count never falls as text grows),
    so any counter is called about ``log2(len(text))`` times.

    Examples: ``("abcdefghij", 2)`` -> 8, ``("abc", 5)`` -> 3, ``("abc", 0)`` -> 0.
    """
    if counter(text) <= max_tokens:
        return len(text)
    lo, hi = 0, len(text)  # counter(text[:lo]) fits, counter(text[:hi]) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if counter(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid
    return lo
