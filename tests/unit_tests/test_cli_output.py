"""s2b output: hostile text, broken pipes, one-line errors, --embedding, shared defaults."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import models
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.errors import safe
from langchain_s2b.core.params import DEFAULT_K
from langchain_s2b.embeddings import HashingEmbeddings
from langchain_s2b.retriever import SmallToBigRetriever

HOSTILE = (
    "Quokkas smile \x1b[2J\x1b[H at tourists\x07. "
    "The \x1b]0;pwned\x07 island \x9b31m is Rottnest\u202e. "
    "Carriage\r returns and \x1bPdevice\x1b\\ strings \x00 too.\n"
)
RAW = ("\x1b", "\x07", "\x9b", "\u202e", "\r", "\x00")
ENV = {**os.environ, cli.EMBEDDING_ENV: "fake", "PYTHONPATH": str(Path(__file__).parents[2])}


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def hostile_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "evil\x1b[31m\x07.txt").write_text(HOSTILE)
    store = tmp_path / "s"
    code, out, err = _run(capsys, "index", str(tmp_path / "docs"), "--store", str(store))
    assert (code, err) == (0, "")
    assert not any(c in out for c in RAW)
    return store


class TestHostileText:
    def test_safe_removes_sequences_and_controls(self) -> None:
        assert safe(HOSTILE) == (
            "Quokkas smile  at tourists. The  island  is Rottnest. "
            "Carriage returns and  strings  too.\n"
        )

    def test_plain_output(self, hostile_store: Path, capsys) -> None:
        code, out, _ = _run(capsys, "query", "quokkas", "--store", str(hostile_store), "-k", "1")
        assert code == 0
        assert not any(c in out for c in RAW)
        assert "**Quokkas smile  at tourists.**" in out
        assert out.splitlines()[0].split("  ")[3] == "evil\\x1b[31m\\x07"  # the title, escaped

    def test_rich_output(self, hostile_store: Path) -> None:
        class Tty(io.StringIO):
            def isatty(self) -> bool:
                return True

        out = Tty()
        args = cli.build_parser().parse_args(["query", "quokkas", "--store", str(hostile_store)])
        assert cli.cmd_query(args, out) == 0
        text = out.getvalue()
        for bad in ("\x1b[2J", "\x1b[H", "\x1b]0;", "\x07", "\x9b", "\u202e", "\x1bP", "\r"):
            assert bad not in text
        assert "Quokkas" in text

    def test_json_output_escapes_but_keeps_the_text(self, hostile_store: Path, capsys) -> None:
        argv = ["query", "quokkas", "--store", str(hostile_store), "--json", "--mode", "multilevel"]
        code, out, _ = _run(capsys, *argv)
        assert code == 0
        assert not any(c in out for c in RAW)
        assert json.loads(out)["results"][0]["text"] == HOSTILE

    def test_list_and_error_messages(self, hostile_store: Path, tmp_path: Path, capsys) -> None:
        code, out, _ = _run(capsys, "list", "--store", str(hostile_store))
        shown = f"{tmp_path / 'docs'}/evil\\x1b[31m\\x07.txt"  # as s2b delete takes it
        assert out.splitlines()[0] == f"{shown}  1 document(s), 3 chunk(s)"
        code, _, err = _run(capsys, "index", str(tmp_path / "no\x1b]0;x\x07pe"), "--store", "s")
        assert (code, err) == (
            1,
            f"s2b: error: cannot index {tmp_path / 'nope'}: no such file or directory\n",
        )


class TestErrors:
    def test_broken_pipe_exits_quietly(self, tmp_path: Path, capsys) -> None:
        big = tmp_path / "big.txt"
        big.write_text("".join(f"Sentence {i} is about wombats.\n" for i in range(8000)))
        store = tmp_path / "s"
        assert main(["index", str(big), "--store", str(store)]) == 0
        capsys.readouterr()
        argv = [
            "query",
            "wombats",
            "--store",
            str(store),
            "--mode",
            "multilevel",
            "--max-chars",
            "0",
        ]
        run = subprocess.Popen(
            [sys.executable, "-m", "langchain_s2b", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        assert run.stdout is not None
        assert run.stderr is not None
        assert run.stdout.read(10) == b"#1  fused "
        run.stdout.close()  # like `| head`
        err = run.stderr.read()
        assert (run.wait(timeout=120), err) == (0, b"")

    def test_a_missing_node_names_the_repair_command(self, tmp_path: Path, capsys) -> None:
        (tmp_path / "a.txt").write_text("Wombats dig burrows.\n\nEchidnas lay eggs.\n")
        store = tmp_path / "s"
        assert main(["index", str(tmp_path / "a.txt"), "--store", str(store)]) == 0
        with sqlite3.connect(store / "s2b.sqlite") as db:
            gone = db.execute("SELECT key FROM nodes WHERE key LIKE '%/section/0'").fetchone()[0]
            db.execute("DELETE FROM nodes WHERE key = ?", (gone,))
        capsys.readouterr()
        argv = ["query", "wombats", "--store", str(store), "-k", "1", "--mode", "parent"]
        code, out, err = _run(capsys, *argv)  # parent mode reads the section
        assert (code, out) == (1, "")
        assert err == (
            f"s2b: error: the index in {store} is damaged (node {gone!r} is missing); "
            f"run: s2b verify --repair --store {store}\n"
        )
        code, out, err = _run(capsys, "verify", "--store", str(store))
        assert code == 1
        assert out == (
            "1 file(s), 1 document(s), 2 chunk(s), 2 vector(s), 5 node(s)\n"
            "damaged: 1 document(s) with missing pieces\n"
        )
        assert err == f"s2b: error: {store} is damaged; run: s2b verify --repair --store {store}\n"
        code, out, _ = _run(capsys, "verify", "--store", str(store), "--repair")
        assert code == 0
        assert out.splitlines()[1:] == [
            "damaged: 1 document(s) with missing pieces",
            "repaired: 1 document(s) rebuilt from their stored text, 0 removed, "
            "0 damaged row(s) and 0 orphan(s) deleted; 0 file(s) read again from disk",
        ]
        code, out, _ = _run(capsys, "query", "wombats", "--store", str(store), "-k", "1")
        assert (code, out.splitlines()[1]) == (0, "**Wombats dig burrows.**")

    def test_a_bad_configuration_is_named_in_one_line(self, tmp_path: Path, capsys) -> None:
        (tmp_path / "a.txt").write_text("Wombats dig burrows.\n")
        store = tmp_path / "s"
        assert main(["index", str(tmp_path / "a.txt"), "--store", str(store)]) == 0
        with sqlite3.connect(store / "s2b.sqlite") as db:
            db.execute("UPDATE meta SET value = 'bert' WHERE name = 'embedding'")
        capsys.readouterr()
        code, _, err = _run(capsys, "query", "q", "--store", str(store))
        assert (code, err) == (
            1,
            f"s2b: error: bad configuration in {store / 's2b.sqlite'}: embedding 'bert'; run: s2b "
            f"verify --repair --store {store} (it indexes the files again into a new database "
            "file)\n",
        )
        (store / "s2b.sqlite").write_bytes(b"this is not a database, just some bytes" * 100)
        for name in ("s2b.sqlite-wal", "s2b.sqlite-shm"):
            (store / name).unlink(missing_ok=True)
        code, _, err = _run(capsys, "list", "--store", str(store))
        assert (code, err) == (  # s2b.json says an s2b database was there: it is damaged
            1,
            f"s2b: error: the database file {store / 's2b.sqlite'} is damaged (file is not a "
            f"database); run: s2b verify --repair --store {store} (it indexes the files again "
            "into a new database file)\n",
        )
        (store / "s2b.json").unlink()  # nothing says what it was
        code, _, err = _run(capsys, "list", "--store", str(store))
        assert (code, err) == (
            1,
            f"s2b: error: {store / 's2b.sqlite'} is not an s2b index database "
            "(file is not a database)\n",
        )


class Named(HashingEmbeddings):
    """Stands in for a provider's class: takes its model name like OpenAIEmbeddings(model=)."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model


class TestEmbedding:
    def test_provider_model_is_recorded_and_another_is_refused(
        self, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setitem(models.PROVIDERS, "ollama", (__name__, "Named", "model"))
        monkeypatch.delenv(cli.EMBEDDING_ENV)
        (tmp_path / "a.txt").write_text("Wombats dig burrows.\n")
        store = tmp_path / "s"
        argv = ["index", str(tmp_path / "a.txt"), "--store", str(store)]
        assert _run(capsys, *argv, "--embedding", "Ollama:nomic-embed-text")[0] == 0
        with sqlite3.connect(store / "s2b.sqlite") as db:
            row = db.execute("SELECT value FROM meta WHERE name = 'embedding'").fetchone()
        assert row == ("ollama:nomic-embed-text",)
        code, out, _ = _run(capsys, "query", "wombats", "--store", str(store), "-k", "1")
        assert (code, out.splitlines()[1]) == (0, "**Wombats dig burrows.**")
        code, _, err = _run(capsys, "query", "q", "--store", str(store), "--embedding", "fake")
        assert (code, err) == (
            1,
            f"s2b: error: {store} was indexed with embedding 'ollama:nomic-embed-text', not "
            "'fake'; query it with --embedding ollama:nomic-embed-text (or none)\n",
        )

    def test_a_missing_provider_package_is_one_line(self, tmp_path: Path, capsys) -> None:
        assert importlib.util.find_spec("langchain_ollama") is None
        (tmp_path / "a.txt").write_text("x\n")
        argv = ["index", str(tmp_path / "a.txt"), "--store", str(tmp_path / "s")]
        code, _, err = _run(capsys, *argv, "--embedding", "ollama:nomic-embed-text")
        assert (code, err) == (
            1,
            "s2b: error: --embedding ollama:nomic-embed-text needs the package "
            "langchain-ollama: pip install langchain-ollama\n",
        )
        assert not (tmp_path / "s" / "s2b.sqlite").exists()

    @pytest.mark.parametrize(
        ("given", "spec"),
        [
            ("e5", "local:e5"),
            ("local:e5", "local:e5"),
            ("fake", "fake"),
            ("OpenAI:text-embedding-3-small", "openai:text-embedding-3-small"),
        ],
    )
    def test_specs_are_normalised(self, given: str, spec: str) -> None:
        assert models.parse_spec(given) == spec


class TestDefaults:
    def test_the_command_uses_the_python_defaults(self, tmp_path: Path, capsys) -> None:
        fields = SmallToBigRetriever.model_fields
        args = cli.build_parser().parse_args(["query", "q", "--store", "x"])
        assert (args.k, args.mode, args.window_size, args.max_tokens) == (
            fields["k"].default,
            "pack",  # the command's own mode: the best told a budget (README, Evaluation)
            None,  # not passed: the retriever's own window_size applies
            None,
        )
        ev = cli.build_parser().parse_args(["eval", "--store", "x", "--questions", "q"])
        assert ev.k == DEFAULT_K == 4  # k=None is 4 results without a budget
        text = "\n\n".join(f"Paragraph {i} mentions wombats {i} times." for i in range(8))
        (tmp_path / "a.txt").write_text(text)
        store = tmp_path / "s"
        assert main(["index", str(tmp_path / "a.txt"), "--store", str(store)]) == 0
        capsys.readouterr()
        argv = ["query", "wombats", "--store", str(store), "--json", "--mode", "parent"]
        argv += ["--parent-level", "paragraph"]
        code, out, _ = _run(capsys, *argv)  # 8 paragraph parents: k (default 4) of them
        assert (code, len(json.loads(out)["results"])) == (0, 4)


def test_the_header_names_the_score_that_ranks_and_the_cosine() -> None:
    """Under hybrid search the fused score ranks: shown first and named, the cosine after it."""
    from langchain_core.documents import Document

    from langchain_s2b.cli import display

    def doc(**scores: float) -> Document:
        meta = {"source_id": "a", "start": 0, "end": 6, "mode": "parent", "level": "section"}
        return Document(page_content="Rollo.", metadata={**meta, **scores})

    ranked = [doc(score=0.48, fused_score=1.893), doc(score=0.52, fused_score=1.611)]
    headers = [display.plain(d, i, 0).splitlines()[0] for i, d in enumerate(ranked, 1)]
    assert headers == [
        "#1  fused 1.893  cosine 0.480  a  [parent/section, chars 0-6]",
        "#2  fused 1.611  cosine 0.520  a  [parent/section, chars 0-6]",
    ]
    reranked = doc(score=0.5, fused_score=2.0, rerank_score=0.25)
    assert display.plain(reranked, 1, 0).splitlines()[0] == (
        "#1  rerank 0.250  cosine 0.500  a  [parent/section, chars 0-6]"
    )
    assert display.plain(doc(score=0.5), 1, 0).splitlines()[0] == (
        "#1  cosine 0.500  a  [parent/section, chars 0-6]"
    )
    assert [display.result_json(d, 1)["fused_score"] for d in ranked] == [1.893, 1.611]
