"""Token counting: the ``token_counter`` callable every budget is measured with.

LangChain's convention is a callable from text to a token count (a chat
model's ``get_num_tokens`` is one). The default, :func:`approximate_tokens`,
is LangChain's own offline estimate,
``langchain_core.messages.utils.count_tokens_approximately``, applied to one
text. That function takes *messages*: given a bare string it would iterate
its characters and count each one as a message of its own, so the text is
passed as a one-message list. It then charges each message its role (``user``,
one token) and three extra tokens on top of its content; those belong to the
message a caller builds around the documents (retrieved documents are handed
to a model inside one message, not one message each), so they are taken off:
the count of a text is the count of its content alone, ``ceil(chars / 4)``,
and the count of several texts never exceeds the sum of their counts.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from langchain_core.messages.utils import count_tokens_approximately

TokenCounter = Callable[[str], int]
"""Text -> number of tokens (e.g. ``chat_model.get_num_tokens``)."""


@cache
def _message_overhead() -> int:
    return count_tokens_approximately([""], extra_tokens_per_message=0)


def approximate_tokens(text: str) -> int:
    """LangChain's approximate count of ``text`` as message content (no per-message overhead).

    Examples: ``""`` -> 0, ``"abcd"`` -> 1, ``"abcde"`` -> 2.
    """
    if not text:
        return 0
    return count_tokens_approximately([text], extra_tokens_per_message=0) - _message_overhead()


def check_token_counter(counter: Any) -> TokenCounter:
    """Return ``counter`` if it maps a short text to a non-negative int; raise otherwise."""
    if not callable(counter):
        msg = (
            f"token_counter must be a callable from text to a token count (for example "
            f"chat_model.get_num_tokens); got {type(counter).__name__}."
        )
        raise TypeError(msg)
    probe = counter("token counter probe")
    if isinstance(probe, bool) or not isinstance(probe, int) or probe < 0:
        msg = f"token_counter must return a non-negative int; it returned {probe!r}."
        raise ValueError(msg)
    checked: TokenCounter = counter
    return checked
