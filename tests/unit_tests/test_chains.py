"""The retriever in LCEL chains and as an agent tool, offline (fake chat models)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import ParrotFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.tools import BaseTool
from pydantic import Field

from langchain_s2b import SmallToBigRetriever
from langchain_s2b.tools import as_tool, format_doc, format_docs

from ._embeddings import BagOfWords

ARTICLES = {
    "normans": (
        "The Normans were the people who gave their name to Normandy. "
        "Their leader Rollo agreed to swear fealty to King Charles III.\n\n"
        "The Norman dynasty had a major political impact on medieval Europe. "
        "They adopted the Gallo-Romance language of the Frankish land.\n\n"
        "Norman mercenaries served in Italy and in Byzantium."
    ),
    "steam": (
        "A steam engine performs mechanical work using steam as its working fluid. "
        "James Watt improved the engine with a separate condenser.\n\n"
        "Steam locomotives pulled trains for more than a century."
    ),
}
PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Answer from the context only.\n\n{context}"), ("human", "{question}")]
)


def _retriever(mode: str = "window", **fields: Any) -> SmallToBigRetriever:
    docs = [
        Document(page_content=text, id=name, metadata={"title": name.title()})
        for name, text in ARTICLES.items()
    ]
    return SmallToBigRetriever.from_documents(docs, BagOfWords(), mode=mode, **fields)


class FixedRetriever(BaseRetriever):
    """Returns the same documents whatever the query: [] or the wrong article."""

    docs: list[Document] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: Any, **kwargs: Any
    ) -> list[Document]:
        return list(self.docs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: Any, **kwargs: Any
    ) -> list[Document]:
        return list(self.docs)


def _wrong_article(name: str) -> list[Document]:
    text = ARTICLES[name]
    meta = {"title": name.title(), "source_id": name, "score": 0.9, "start": 0}
    meta.update(end=len(text), matches=[{"score": 0.9, "start": 0, "end": 10}])
    return [Document(page_content=text, metadata=meta)]


STOP_WORDS = {"who", "the", "what", "of", "a", "with", "was"}


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower())) - STOP_WORDS


class ContextReader(BaseChatModel):
    """Answers with the context sentence sharing most words with the question.

    Without a context sentence that shares a word, it says "I don't know.", so a
    chain whose retriever returns nothing or the wrong thing gives a wrong answer.
    """

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        context = str(messages[0].content).partition("\n\n")[2]
        question = _words(str(messages[-1].content))
        lines = [line for line in context.splitlines() if line and not line.startswith("[")]
        sentences = [s for line in lines for s in re.split(r"(?<=\.)\s+", line) if s]
        scored = [(len(question & _words(s)), s) for s in sentences]
        best = max(scored, key=lambda pair: pair[0], default=(0, ""))
        answer = best[1] if best[0] else "I don't know."
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=answer))])

    @property
    def _llm_type(self) -> str:
        return "context-reader"


def check_context_reaches_the_model(retriever: BaseRetriever) -> None:
    chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | PROMPT
        | ParrotFakeChatModel()
    )
    question = "Who was the leader Rollo of the Normans?"
    echoed = chain.invoke(question)
    # The parrot returns the last message; the system message holds the context.
    prompt_value = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT
    ).invoke(question)
    system, human = prompt_value.to_messages()
    assert echoed.content == question == human.content
    assert system.content.startswith("Answer from the context only.\n\n[1] Normans (score ")
    assert "Rollo agreed to swear fealty" in system.content
    assert "steam" not in system.content.lower()


def check_the_answer_comes_from_the_context(retriever: BaseRetriever) -> None:
    chain = (
        {"context": retriever | format_docs, "question": RunnablePassthrough()}
        | PROMPT
        | ContextReader()
        | StrOutputParser()
    )
    answer = chain.invoke("Who improved the engine with a condenser?")
    assert answer == "James Watt improved the engine with a separate condenser."


class TestFormatDocs:
    def test_numbered_with_source_score_and_span(self) -> None:
        doc = Document(
            page_content="Rollo led them.",
            metadata={"title": "Normans", "score": 0.8766, "start": 10, "end": 25},
        )
        assert format_doc(doc, 2) == "[2] Normans (score 0.877, chars 10-25)\nRollo led them."

    def test_falls_back_to_source_then_source_id(self) -> None:
        docs = [
            Document(page_content="a", metadata={"source": "/tmp/a.md"}),
            Document(page_content="b", metadata={"source_id": "doc-b"}),
            Document(page_content="c"),
        ]
        text = format_docs(docs)
        assert text.split("\n\n") == [
            "[1] /tmp/a.md\na",
            "[2] doc-b\nb",
            "[3] unknown source\nc",
        ]

    def test_max_chars_cuts_the_text_only(self) -> None:
        doc = Document(page_content="x" * 50, metadata={"title": "T"})
        assert format_doc(doc, 1, max_chars=10) == "[1] T\n" + "x" * 10 + " …"

    def test_max_chars_shows_the_best_match(self) -> None:
        text = "a" * 100 + "THE MATCH" + "b" * 100
        matches = [
            {"start": 1000, "end": 1010, "score": 0.2},
            {"start": 1100, "end": 1109, "score": 0.9},
        ]
        meta = {"title": "T", "start": 1000, "end": 1209, "matches": matches}
        shown = format_doc(Document(page_content=text, metadata=meta), 1, max_chars=40)
        assert shown == "[1] T (chars 1000-1209)\n… " + "a" * 10 + "THE MATCH" + "b" * 21 + " …"


@pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
class TestLcelChain:
    def test_context_and_question_reach_the_model(self, mode: str) -> None:
        check_context_reaches_the_model(_retriever(mode, k=1))

    def test_the_model_answers_from_the_retrieved_context(self, mode: str) -> None:
        check_the_answer_comes_from_the_context(_retriever(mode, k=2))


class ToolCallingFake(BaseChatModel):
    """Calls the first bound tool with the user's question, then answers from its result."""

    tools: list[str] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFake:  # type: ignore[override]
        return self.model_copy(update={"tools": [t.name for t in tools]})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            call = {"name": self.tools[0], "args": {"query": last.content}, "id": "call-1"}
            message = AIMessage(content="", tool_calls=[call])
        elif isinstance(last, ToolMessage):
            first_line = str(last.content).splitlines()[0]
            message = AIMessage(content=f"According to {first_line}: see the cited passage.")
        else:
            message = AIMessage(content="I need a question.")
        return ChatResult(generations=[ChatGeneration(message=message)])

    @property
    def _llm_type(self) -> str:
        return "tool-calling-fake"


def _agent(model: BaseChatModel, tools: list[BaseTool], question: str) -> list[BaseMessage]:
    """The classic tool-calling loop: call the model, run its tool calls, repeat."""
    by_name = {tool.name: tool for tool in tools}
    bound = model.bind_tools(tools)
    messages: list[BaseMessage] = [HumanMessage(question)]
    for _ in range(5):
        reply = bound.invoke(messages)
        messages.append(reply)
        if not isinstance(reply, AIMessage) or not reply.tool_calls:
            return messages
        for call in reply.tool_calls:
            messages.append(by_name[call["name"]].invoke({**call, "type": "tool_call"}))
    pytest.fail("the agent did not finish in 5 turns")


def _check_artifact(docs: list[Document], source: str) -> None:
    assert docs, "the tool returned no documents"
    assert docs[0].metadata["source_id"] == source
    for doc in docs:
        meta = doc.metadata
        assert isinstance(meta["score"], float)
        assert ARTICLES[meta["source_id"]][meta["start"] : meta["end"]] == doc.page_content
        assert meta["matches"], "every result lists the children that matched"
        for match in meta["matches"]:
            assert meta["start"] <= match["start"] < match["end"] <= meta["end"]
            assert isinstance(match["score"], float)


def check_agent_loop(retriever: BaseRetriever) -> None:
    tool = as_tool(retriever, k=2)
    messages = _agent(ToolCallingFake(), [tool], "Who improved the steam engine?")
    human, call, result, answer = messages
    assert isinstance(call, AIMessage)
    assert call.tool_calls[0]["args"] == {"query": human.content}
    assert isinstance(result, ToolMessage)
    assert result.tool_call_id == "call-1"
    assert str(result.content).startswith("[1] Steam (score ")
    assert "James Watt improved the engine" in str(result.content)
    _check_artifact(result.artifact, "steam")
    assert answer.content.startswith("According to [1] Steam (score ")


async def check_async_tool_call(retriever: BaseRetriever) -> None:
    tool = as_tool(retriever, k=1)
    call = {"type": "tool_call", "id": "c", "name": tool.name, "args": {"query": "Rollo"}}
    message = await tool.ainvoke(call)
    assert isinstance(message, ToolMessage)
    assert "Rollo" in str(message.content)
    _check_artifact(message.artifact, "normans")


@pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
class TestAgentTool:
    def test_agent_loop_gets_text_and_artifact(self, mode: str) -> None:
        check_agent_loop(_retriever(mode))

    async def test_async_tool_call(self, mode: str) -> None:
        await check_async_tool_call(_retriever(mode))


CHECKS = {
    "context reaches the model": (check_context_reaches_the_model, "steam"),
    "answer comes from the context": (check_the_answer_comes_from_the_context, "normans"),
    "agent loop": (check_agent_loop, "normans"),
}


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("retrieved", ["nothing", "the wrong article"])
def test_every_chain_test_fails_when_the_retriever_is_wrong(check: str, retrieved: str) -> None:
    """The chain and agent tests above test the retriever: swap in a broken one and they fail."""
    run, wrong_article = CHECKS[check]
    docs = [] if retrieved == "nothing" else _wrong_article(wrong_article)
    with pytest.raises(AssertionError):
        run(FixedRetriever(docs=docs))


@pytest.mark.parametrize("retrieved", ["nothing", "the wrong article"])
async def test_the_async_tool_test_fails_when_the_retriever_is_wrong(retrieved: str) -> None:
    docs = [] if retrieved == "nothing" else _wrong_article("steam")
    with pytest.raises(AssertionError):
        await check_async_tool_call(FixedRetriever(docs=docs))


class TestAsTool:
    def test_schema_and_response_format(self) -> None:
        tool = as_tool(_retriever(), name="normans_search", description="Search about Normans.")
        assert tool.name == "normans_search"
        assert tool.description == "Search about Normans."
        assert tool.response_format == "content_and_artifact"
        assert set(tool.args) == {"query"}

    def test_retrieval_options_are_passed(self) -> None:
        tool = as_tool(_retriever(k=4), k=1, window_size=0, coalesce=False)
        call = {"type": "tool_call", "id": "c", "name": tool.name, "args": {"query": "Watt"}}
        message = tool.invoke(call)
        assert len(message.artifact) == 1
        assert message.artifact[0].metadata["split_ids"] == [
            message.artifact[0].metadata["matches"][0]["split_id"]
        ]

    def test_plain_invoke_returns_the_content(self) -> None:
        tool = as_tool(_retriever(), k=1)
        assert tool.invoke({"query": "Watt"}).startswith("[1] Steam (score ")

    def test_max_chars_cuts_content_not_artifact(self) -> None:
        tool = as_tool(_retriever("parent"), k=1, max_chars=20)
        call = {"type": "tool_call", "id": "c", "name": tool.name, "args": {"query": "Watt"}}
        message = tool.invoke(call)
        body = str(message.content).split("\n", 1)[1]
        # One child holds the whole article, so the excerpt starts at its start.
        assert body == ARTICLES["steam"][:20] + " …"
        assert len(message.artifact[0].page_content) > 20

    def test_no_results_says_so(self) -> None:
        empty = SmallToBigRetriever.from_documents([], BagOfWords())
        assert as_tool(empty).invoke({"query": "anything"}) == "No results."

    def test_retriever_method_when_the_retriever_has_one(self) -> None:
        retriever = _retriever(k=1)
        assert type(retriever).as_tool is not BaseRetriever.as_tool
        tool = retriever.as_tool(k=1)
        assert tool.response_format == "content_and_artifact"
        call = {"type": "tool_call", "id": "c", "name": tool.name, "args": {"query": "Watt"}}
        assert tool.invoke(call).artifact[0].metadata["source_id"] == "steam"

    def test_rejects_a_non_retriever(self) -> None:
        with pytest.raises(TypeError, match="needs a LangChain BaseRetriever; got str"):
            as_tool("not a retriever")  # type: ignore[arg-type]

    def test_rejects_an_empty_name(self) -> None:
        with pytest.raises(ValueError, match="name must not be empty"):
            as_tool(_retriever(), name=" ")
