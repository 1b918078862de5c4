"""The command line with model-written proxies: ``s2b index --proxies KIND --proxy-model P:M``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from langchain_s2b.cli import models
from langchain_s2b.cli.folder import PENDING, Embedded, read_embedded
from langchain_s2b.store.sqlite import Database

from .test_cli_headers import FAQ, GUIDE, _index, _run
from .test_propose import Proposing

SPEC = "anthropic:claude-3-5-haiku-latest"
PARAGRAPHS = 8 + 1
"""guide.md: 8 paragraphs (a heading line is one); faq.txt: 1."""
SECTIONS = 4 + 1
"""guide.md: 4 sections; faq.txt: 1."""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "guide.md").write_text(GUIDE)
    (root / "faq.txt").write_text(FAQ)
    return root


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S2B_EMBEDDING", "fake")


@pytest.fixture
def chat(monkeypatch: pytest.MonkeyPatch) -> list[Proposing]:
    made: list[Proposing] = []

    def make(spec: str, flag: str = "--context-model") -> Proposing:
        spec = models.parse_chat_spec(spec, flag)  # the shape checked as the real one does
        assert (spec, flag) == (SPEC, "--proxy-model")
        made.append(Proposing(fail_on=os.environ.get("S2B_TEST_FAIL_ON")))
        return made[-1]

    monkeypatch.setattr(models, "make_chat_model", make)
    return made


def _setting(store: Path) -> Embedded:
    db = Database(store / "s2b.sqlite")
    try:
        return read_embedded(db)
    finally:
        db.close()


def _pending(store: Path) -> str | None:
    db = Database(store / "s2b.sqlite")
    try:
        return db.get_meta(PENDING)
    finally:
        db.close()


def _proxy_rows(store: Path) -> tuple[int, int]:
    """``(rows of the proxies table, proxy keys of the children table)``."""
    db = Database(store / "s2b.sqlite")
    try:
        conn = db.conn
        table = int(conn.execute("SELECT count(*) FROM proxies").fetchone()[0])
        children = int(
            conn.execute("SELECT count(*) FROM children WHERE key LIKE '%/proxy/%'").fetchone()[0]
        )
        return table, children
    finally:
        db.close()


def _listing(store: Path) -> dict[str, str]:
    settings: dict[str, str] = json.loads((store / "s2b.json").read_text())["settings"]
    return settings


class TestIndex:
    def test_written_once_recorded_and_kept_across_runs(
        self,
        tmp_path: Path,
        corpus: Path,
        capsys: pytest.CaptureFixture[str],
        chat: list[Proposing],
    ) -> None:
        store = tmp_path / "store"
        _index(capsys, corpus, store, "--proxies", "questions", "--proxy-model", SPEC)
        assert sum(m.calls for m in chat) == PARAGRAPHS
        assert _setting(store) == Embedded(True, None, "questions", SPEC)
        assert _listing(store)["proxies"] == "questions"
        assert _listing(store)["proxy_model"] == SPEC
        _index(capsys, corpus, store)  # nothing changed: nothing asked
        assert sum(m.calls for m in chat) == PARAGRAPHS
        code, out, err = _run(capsys, "verify", "--store", str(store))  # makes no model
        assert (code, err) == (0, "")
        assert out.splitlines()[-1] == "ok"
        code, out, err = _run(capsys, "query", "libfoo", "--store", str(store), "--json")
        assert (code, err) == (0, "")
        assert json.loads(out)["results"][0]["source"] == "guide"

    def test_a_change_of_kind_indexes_every_file_again(
        self,
        tmp_path: Path,
        corpus: Path,
        capsys: pytest.CaptureFixture[str],
        chat: list[Proposing],
    ) -> None:
        store = tmp_path / "store"
        _index(capsys, corpus, store, "--proxies", "questions", "--proxy-model", SPEC)
        _index(capsys, corpus, store, "--proxies", "summaries")  # the store's model
        assert sum(m.calls for m in chat) == PARAGRAPHS + SECTIONS
        assert _setting(store) == Embedded(True, None, "summaries", SPEC)
        assert _pending(store) is None  # every file was indexed again
        assert _proxy_rows(store) == (SECTIONS, SECTIONS)  # one summary each; no question left
        _index(capsys, corpus, store, "--no-proxies")
        assert _proxy_rows(store) == (0, 0)
        assert _setting(store) == Embedded(True, None, None, None)
        assert "proxies" not in _listing(store)
        assert "proxy_model" not in _listing(store)
        assert sum(m.calls for m in chat) == PARAGRAPHS + SECTIONS

    def test_a_file_whose_proxies_fail_is_skipped_and_asked_again_later(
        self,
        tmp_path: Path,
        corpus: Path,
        capsys: pytest.CaptureFixture[str],
        chat: list[Proposing],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        store = tmp_path / "store"
        monkeypatch.setenv("S2B_TEST_FAIL_ON", "libfoo")
        code, out, err = _run(
            capsys, "index", str(corpus), "--store", str(store),
            "--proxies", "propositions", "--proxy-model", SPEC,
        )  # fmt: skip
        assert code == 3
        assert "guide.md: The proxy model failed for 1 of 8 pieces" in err
        assert "1 added" in out
        monkeypatch.delenv("S2B_TEST_FAIL_ON")
        _index(capsys, corpus, store)
        assert chat[-1].calls == 1  # only the piece that failed is asked again


class TestOneLineErrors:
    @pytest.mark.parametrize(
        ("extra", "said"),
        [
            (
                ["--proxies", "questions"],
                "s2b: error: --proxies questions needs --proxy-model provider:model (the chat "
                "model that writes them)",
            ),
            (
                ["--proxy-model", SPEC],
                f"s2b: error: --proxy-model {SPEC} needs --proxies "
                "propositions|summaries|questions (the store writes none)",
            ),
            (
                ["--proxies", "questions", "--proxy-model", "nope"],
                "s2b: error: --proxy-model 'nope' is not 'provider:model', e.g. "
                "anthropic:claude-3-5-haiku-latest or openai:gpt-4o-mini (init_chat_model names)",
            ),
        ],
    )
    def test_nothing_is_written(
        self,
        tmp_path: Path,
        corpus: Path,
        capsys: pytest.CaptureFixture[str],
        extra: list[str],
        said: str,
        chat: list[Proposing],
    ) -> None:
        store = tmp_path / "store"
        code, _, err = _run(capsys, "index", str(corpus), "--store", str(store), *extra)
        assert code == 1
        assert err.splitlines() == [said]
        assert not store.exists()

    def test_an_unknown_kind_is_refused_by_the_parser(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        store = tmp_path / "s"
        code, _, err = _run(capsys, "index", str(corpus), "--store", str(store), "--proxies", "x")
        assert code == 2
        assert err.splitlines() == [
            "s2b index: error: argument --proxies: invalid choice: 'x' (choose from "
            "'propositions', 'summaries', 'questions') (see s2b index --help)"
        ]
        assert not store.exists()
