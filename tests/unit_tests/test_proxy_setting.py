"""The retriever's model-written proxies: its fields, its hook, and the setting a save records."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryByteStore

from langchain_s2b import FaissIndex, SmallToBigRetriever
from langchain_s2b.core.model_proxies import WrittenProxies
from langchain_s2b.core.proxies import Proxy
from langchain_s2b.store.runner import drive

from .test_headers import Recording
from .test_propose import TEXT, Proposing, _tree


def _retriever(**fields: Any) -> SmallToBigRetriever:
    fields.setdefault("mode", "multilevel")
    return SmallToBigRetriever(vectorstore=FaissIndex(Recording()), **fields)


def _embedded(path: Path) -> dict[str, Any]:
    snapshot = next(path.glob("snapshot-*"))
    config: dict[str, Any] = json.loads((snapshot / "s2b.json").read_text())
    return config["embedded"]  # type: ignore[no-any-return]


class TestFields:
    def test_one_without_the_other_is_one_line(self) -> None:
        with pytest.raises(ValueError) as err:
            _retriever(proxies="questions")
        assert str(err.value) == (
            "SmallToBigRetriever: proxies= was set without proxy_model=; model-written proxies "
            "need both (proxies='propositions'|'summaries'|'questions' and a chat model as "
            "proxy_model)."
        )
        with pytest.raises(
            ValueError, match=r"^SmallToBigRetriever: proxy_model= was set without proxies=;"
        ):
            _retriever(proxy_model=Proposing())
        retriever = _retriever()
        with pytest.raises(ValueError, match=r"^proxies= was set without proxy_model=;"):
            retriever.model_copy(update={"proxies": "summaries"})

    def test_an_unknown_kind_is_refused_in_one_line(self) -> None:
        with pytest.raises(ValueError) as err:
            _retriever(proxies="summary", proxy_model=Proposing())
        assert "\n" not in str(err.value)
        assert "'propositions', 'summaries' or 'questions'" in str(err.value)

    def test_the_hook_and_the_writer(self) -> None:
        model = Proposing()
        cache = InMemoryByteStore()
        retriever = _retriever(proxies="summaries", proxy_model=model, context_cache=cache)
        hook = retriever._lifecycle_config().write_proxies
        assert hook == WrittenProxies("summaries", "Proposing")
        assert _retriever()._lifecycle_config().write_proxies is None
        writer = retriever._io.proxies
        assert writer is not None
        assert writer.model is model
        assert writer.cache is cache
        assert retriever._io.contexts is None
        doc = Document(page_content=TEXT)
        out = retriever._io.drive(hook([doc], [_tree()]), locked=False)
        assert out == [
            [
                Proxy("S: # Normans The", 0, 67, "summary"),
                Proxy("S: ## Norman conquest", 67, 121, "summary"),
                Proxy("S: ### Aftermath It", 121, 187, "summary"),
            ]
        ]
        assert model.calls == 3
        assert len(list(cache.yield_keys())) == 3

    def test_the_async_runner_answers_the_request(self) -> None:
        model = Proposing()
        retriever = _retriever(proxies="questions", proxy_model=model)
        hook = retriever._lifecycle_config().write_proxies
        assert hook is not None
        doc = Document(page_content=TEXT)
        out = asyncio.run(retriever._io.adrive(hook([doc], [_tree()]), locked=False))
        assert out[0][:2] == [
            Proxy("What about #?", 0, 11, "question"),
            Proxy("Why #?", 0, 11, "question"),
        ]
        assert len(out[0]) == 12
        assert model.calls == 6

    def test_a_copy_with_another_model_writes_with_it(self) -> None:
        retriever = _retriever(proxies="questions", proxy_model=Proposing())
        other = Proposing()
        copied = retriever.model_copy(update={"proxy_model": other})
        assert copied._io.proxies is not None
        assert copied._io.proxies.model is other

    def test_a_retriever_without_a_model_refuses_the_request(self) -> None:
        hook = WrittenProxies("questions", "M")
        doc = Document(page_content=TEXT)
        with pytest.raises(ValueError, match=r"^Proxies were asked for, but this retriever has no"):
            drive(hook([doc], [_tree()]), _retriever()._io.run)


class TestSaves:
    def test_the_setting_is_recorded_and_restored(self, tmp_path: Path) -> None:
        _retriever(proxies="questions", proxy_model=Proposing()).save(tmp_path / "idx")
        assert _embedded(tmp_path / "idx") == {
            "contextual_headers": "sections",
            "context_model": None,
            "proxies": {"kind": "questions", "model": "Proposing"},
        }
        model = Proposing()
        loaded = SmallToBigRetriever.load(tmp_path / "idx", Recording(), proxy_model=model)
        assert loaded.proxies == "questions"
        assert loaded.proxy_model is model
        assert loaded._lifecycle_config().write_proxies == WrittenProxies("questions", "Proposing")

    def test_a_save_without_proxies_records_none(self, tmp_path: Path) -> None:
        _retriever().save(tmp_path / "idx")
        assert _embedded(tmp_path / "idx") == {
            "contextual_headers": "sections",
            "context_model": None,
        }
        with pytest.raises(ValueError) as err:
            SmallToBigRetriever.load(
                tmp_path / "idx", Recording(), proxies="summaries", proxy_model=Proposing()
            )
        assert str(err.value) == (
            f"{tmp_path / 'idx'} was built without model-written proxies; load it without "
            "proxies= and proxy_model=, or build the index again."
        )

    def test_the_model_is_passed_again(self, tmp_path: Path) -> None:
        _retriever(proxies="propositions", proxy_model=Proposing()).save(tmp_path / "idx")
        with pytest.raises(ValueError) as err:
            SmallToBigRetriever.load(tmp_path / "idx", Recording())
        assert str(err.value) == (
            f"{tmp_path / 'idx'} was built with proxies='propositions' written by 'Proposing'; "
            "pass the model again: load(path, embedding, proxy_model=...)."
        )

    def test_another_kind_is_refused_and_another_model_warned(self, tmp_path: Path) -> None:
        _retriever(proxies="propositions", proxy_model=Proposing()).save(tmp_path / "idx")
        with pytest.raises(ValueError) as err:
            SmallToBigRetriever.load(
                tmp_path / "idx", Recording(), proxies="questions", proxy_model=Proposing()
            )
        assert str(err.value) == (
            f"{tmp_path / 'idx'} was built with proxies='propositions', not 'questions'; pass "
            "proxies='propositions' to load(), or build the index again."
        )

        class Other(Proposing):
            pass

        with pytest.warns(
            UserWarning, match=r"built with the proxy model 'Proposing', and 'Other'"
        ):
            SmallToBigRetriever.load(tmp_path / "idx", Recording(), proxy_model=Other())

    def test_a_crafted_setting_is_one_line(self, tmp_path: Path) -> None:
        _retriever().save(tmp_path / "idx")
        snapshot = next((tmp_path / "idx").glob("snapshot-*"))
        config = json.loads((snapshot / "s2b.json").read_text())
        config["embedded"]["proxies"] = {"kind": "poems", "model": "M"}
        (snapshot / "s2b.json").write_text(json.dumps(config))
        with pytest.raises(ValueError, match=r"embedded proxies must be \{kind: a name, model: a"):
            SmallToBigRetriever.load(tmp_path / "idx", Recording())


class TestFingerprint:
    def test_the_setting_is_in_the_fingerprint(self) -> None:
        plain = _retriever()._lifecycle_config()
        assert plain.embedded_setting() == {"headers": "sections"}
        config = _retriever(proxies="questions", proxy_model=Proposing())._lifecycle_config()
        assert config.embedded_setting() == {
            "headers": "sections",
            "proxies": {"kind": "questions", "model": "Proposing", "prompt": "questions-1"},
        }
        other = _retriever(proxies="summaries", proxy_model=Proposing())._lifecycle_config()
        prints = {plain.fingerprint(), config.fingerprint(), other.fingerprint()}
        assert len(prints) == 3
