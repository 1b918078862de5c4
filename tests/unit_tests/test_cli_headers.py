"""The command line with contextual headers and a context model: index, query, serve, a change."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import models, serve
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.folder import PENDING, read_embedded
from langchain_s2b.cli.index_dir import open_store
from langchain_s2b.cli.live import LiveStore
from langchain_s2b.store.sqlite import Database

from ._chat import Situating

GUIDE = """# Installation Guide

Read this first.

## Linux

Run the package manager. Then reboot the machine.

### Troubleshooting

A missing library stops the start. Install libfoo to fix it.

## Windows

Download the installer and run it.
"""
FAQ = "Reboot often. Questions go to the forum.\n"
QUERY = "missing library libfoo"
HEADING = "guide > Installation Guide > Linux > Troubleshooting"
"""The file's title is its name (the loader's ``title``), then the section path."""


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text(GUIDE)
    (root / "faq.txt").write_text(FAQ)
    return root


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _index(capsys: pytest.CaptureFixture[str], corpus: Path, store: Path, *extra: str) -> str:
    code, out, err = _run(capsys, "index", str(corpus), "--store", str(store), *extra)
    assert (code, err) == (0, ""), err
    return out


def _embedded_count(out: str) -> tuple[int, int]:
    """``(embedded, reused)`` from ``s2b index``'s report."""
    found = re.search(r"\((\d+) embedded, (\d+) reused\)", out)
    assert found is not None, out
    return int(found.group(1)), int(found.group(2))


class TestHeadingShown:
    def test_query_shows_each_results_heading_path(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        _index(capsys, corpus, store, "--headers")
        code, out, err = _run(
            capsys, "query", QUERY, "--store", str(store), "-k", "1", "--mode", "parent"
        )
        assert (code, err) == (0, "")
        first = out.splitlines()[0]
        assert f"§ {HEADING}  [parent/section" in first
        code, out, _ = _run(capsys, "query", QUERY, "--store", str(store), "-k", "1", "--json")
        (result,) = json.loads(out)["results"]
        assert result["heading"] == result["metadata"]["heading"] == HEADING
        assert result["text"] == GUIDE[result["metadata"]["start"] : result["metadata"]["end"]]
        assert "guide >" not in result["text"]

    def test_serve_gives_the_heading_in_its_structured_content(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        _index(capsys, corpus, store, "--headers")
        live = LiveStore(store)
        try:
            options = {"mode": "window", "k": 1}
            docs = live.search(QUERY, options)
        finally:
            live.close()
        (context,) = serve.search_result(QUERY, options, docs).contexts
        assert context.heading == HEADING
        assert context.text == GUIDE[context.start : context.end]
        assert f"§ {HEADING}" in serve.search_text(docs).splitlines()[0]

    def test_without_headers_nothing_changes(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        _index(capsys, corpus, store, "--no-headers")
        code, out, _ = _run(capsys, "query", QUERY, "--store", str(store), "--json")
        assert code == 0
        assert all("heading" not in r for r in json.loads(out)["results"])
        assert "§" not in _run(capsys, "query", QUERY, "--store", str(store))[1]


class TestSettingChange:
    def test_a_change_reembeds_once_and_switching_back_embeds_nothing(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        assert _embedded_count(_index(capsys, corpus, store, "--no-headers")) == (12, 0)
        assert _embedded_count(_index(capsys, corpus, store, "--headers")) == (12, 0)
        assert _index(capsys, corpus, store).startswith("nothing to do")  # the store's setting
        assert _embedded_count(_index(capsys, corpus, store, "--no-headers")) == (0, 12)
        assert _embedded_count(_index(capsys, corpus, store, "--headers")) == (0, 12)
        listing = json.loads((store / "s2b.json").read_text())
        assert (listing["settings"]["headers"], listing["settings"]["context_model"]) == ("on", "")

    def test_every_indexed_file_is_indexed_again_not_only_those_named(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        other = tmp_path / "other.md"
        other.write_text("# Lone\n\nA lone file about libfoo.\n")
        _index(capsys, corpus, store, "--no-headers")
        _run(capsys, "index", str(other), "--store", str(store))  # the store's setting: off
        out = _index(capsys, corpus, store, "--headers")
        assert "3 file(s)" in out
        assert "3 updated" in out
        code, out, _ = _run(capsys, "query", "lone file", "--store", str(store), "--json")
        assert code == 0
        assert json.loads(out)["results"][0]["heading"] == "other > Lone"

    def test_an_interrupted_change_goes_on_in_the_next_run(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        _index(capsys, corpus, store)
        db = Database(store / "s2b.sqlite")  # what a run killed after recording the change leaves
        with db.write():
            db.set_meta("headers", "on")
            db.set_meta(PENDING, "1")
        db.close()
        out = _index(capsys, corpus, store)  # no flag: the recorded setting, every file again
        assert "2 updated" in out
        found = open_store(store)
        try:
            assert found.reindex_pending() is False
            assert read_embedded(found.db).headers is True
        finally:
            found.close()
        _, out, _ = _run(capsys, "query", QUERY, "--store", str(store), "--json")
        assert json.loads(out)["results"][0]["heading"] == HEADING


class TestContextModel:
    @pytest.fixture
    def chat(self, monkeypatch: pytest.MonkeyPatch) -> list[Situating]:
        made: list[Situating] = []

        def make(spec: str) -> Situating:
            assert spec == "anthropic:claude-3-5-haiku-latest"
            made.append(Situating(fail_on=os.environ.get("S2B_TEST_FAIL_ON")))
            return made[-1]

        monkeypatch.setattr(models, "make_chat_model", make)
        return made

    def test_contexts_are_written_once_and_kept_across_runs(
        self,
        tmp_path: Path,
        corpus: Path,
        capsys: pytest.CaptureFixture[str],
        chat: list[Situating],
    ) -> None:
        store = tmp_path / "store"
        spec = "anthropic:claude-3-5-haiku-latest"
        _index(capsys, corpus, store, "--context-model", spec)
        paragraphs = 8 + 1  # guide.md: 8 paragraphs (a heading line is one); faq.txt: 1
        assert sum(m.calls for m in chat) == paragraphs
        (corpus / "guide.md").touch()  # same bytes: nothing to do, nothing asked
        os.utime(corpus / "guide.md", (1, 1))
        _index(capsys, corpus, store)
        _index(capsys, corpus, store, "--headers")  # every file again, in a new process's store
        assert sum(m.calls for m in chat) == paragraphs
        code, out, err = _run(capsys, "verify", "--store", str(store))  # makes no model
        assert (code, out.splitlines()[-1], err) == (0, "ok", "")
        _, out, _ = _run(capsys, "query", QUERY, "--store", str(store), "--json")
        meta = json.loads(out)["results"][0]["metadata"]
        assert "leaf_context" not in meta
        assert "Context of" not in json.dumps(meta)

    def test_a_file_whose_contexts_fail_is_skipped_and_asked_again_later(
        self,
        tmp_path: Path,
        corpus: Path,
        capsys: pytest.CaptureFixture[str],
        chat: list[Situating],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        store = tmp_path / "store"
        monkeypatch.setenv("S2B_TEST_FAIL_ON", "libfoo")
        code, out, err = _run(
            capsys, "index", str(corpus), "--store", str(store),
            "--context-model", "anthropic:claude-3-5-haiku-latest",
        )  # fmt: skip
        assert code == 3
        assert "s2b: skipped" in err
        assert "guide.md: The context model failed for 1 of 8" in err
        assert "1 added" in out
        monkeypatch.delenv("S2B_TEST_FAIL_ON")
        _index(capsys, corpus, store)
        assert [c.split()[:2] for c in chat[-1].chunks] == [["A", "missing"]]
        code, out, _ = _run(capsys, "query", QUERY, "--store", str(store), "--json")
        assert json.loads(out)["results"][0]["source"] == "guide"

    def test_a_model_that_can_not_start_is_one_line(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        code, _, err = _run(
            capsys, "index", str(corpus), "--store", str(store), "--context-model", "nope"
        )
        assert code == 1
        assert err.startswith("s2b: error: --context-model 'nope' is not 'provider:model'")
        assert not store.exists()

    def test_a_provider_without_its_package_is_one_line(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "store"
        code, _, err = _run(
            capsys, "index", str(corpus), "--store", str(store),
            "--context-model", "nosuchprovider:model-1",
        )  # fmt: skip
        assert code == 1
        assert err.startswith("s2b: error: --context-model nosuchprovider:model-1 could not st")
        assert len(err.splitlines()) == 1
        assert not store.exists()
