"""A small deterministic chat model for the context model's tests (offline, counted)."""

from __future__ import annotations

import re
import threading
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

CHUNK = re.compile(r"<chunk>\n(.*?)\n</chunk>", re.DOTALL)


def chunk_of(prompt: str) -> str:
    """The piece a context prompt asks about."""
    found = CHUNK.search(prompt)
    assert found is not None, prompt
    return found.group(1)


class Situating(BaseChatModel):
    """Answers a context prompt with ``"Context of: <the chunk's first three words>"``.

    Counts every prompt it is asked (threads: ``batch`` runs them in a pool) and
    keeps each one; ``fail_on``: a chunk containing this text raises instead.
    """

    fail_on: str | None = None
    answer_prefix: str = "Context of:"
    _calls: list[str] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "situating-fake"

    @property
    def calls(self) -> int:
        return len(self._calls)

    @property
    def chunks(self) -> list[str]:
        return [chunk_of(p) for p in self._calls]

    def answer(self, chunk: str) -> str:
        return f"{self.answer_prefix} {' '.join(chunk.split()[:3])}"

    def answer_prompt(self, prompt: str) -> str:
        """The answer to a whole prompt (by default: :meth:`answer` to its chunk)."""
        return self.answer(chunk_of(prompt))

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        prompt = str(messages[-1].content)
        chunk = chunk_of(prompt)
        with self._lock:
            self._calls.append(prompt)
        if self.fail_on is not None and self.fail_on in chunk:
            msg = f"the provider refused the chunk {chunk[:20]!r}"
            raise RuntimeError(msg)
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(content=self.answer_prompt(prompt)))]
        )
