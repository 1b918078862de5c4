"""The s2b command line: index, query, eval, errors; fake embedding via S2B_EMBEDDING."""

from __future__ import annotations

import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.index_dir import open_store
from langchain_s2b.core.budget import estimate_tokens
from langchain_s2b.evaluation import evaluate, load_questions
from langchain_s2b.evaluation.scoring import whitespace_tokens

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
NORMANS = """# Normans

The Normans gave their name to Normandy. Their leader Rollo swore fealty to King Charles.

Norman mercenaries served in Italy. They founded states in southern Italy.

# Language

The Normans adopted the Gallo-Romance language. Their dialect became Norman French.
"""
STEAM = "A steam engine uses steam as its working fluid. James Watt added a separate condenser.\n"
QUERY = "leader Rollo fealty"
ROWS = [
    {"id": "eiffel", "text": "The Eiffel Tower stands in Paris. It was finished in 1889."},
    {"page_content": "Mount Fuji is the highest mountain in Japan.", "metadata": {"t": 1}},
]


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "normans.md").write_text(NORMANS)
    (root / "sub" / "steam.txt").write_text(STEAM)
    (root / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    (root / "ignored.bin").write_bytes(b"\x00")
    return root


@pytest.fixture
def store(tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    target = tmp_path / "store"
    assert main(["index", str(corpus), "--store", str(target)]) == 0
    capsys.readouterr()
    return target


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _query_json(capsys: pytest.CaptureFixture[str], store: Path, *extra: str) -> dict:
    code, out, err = _run(capsys, "query", QUERY, "--store", str(store), "--json", *extra)
    assert (code, err) == (0, "")
    return json.loads(out)


class TestIndex:
    def test_indexes_markdown_text_and_both_jsonl_shapes(
        self, tmp_path: Path, corpus: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        code, out, err = _run(capsys, "index", str(corpus), "--store", str(tmp_path / "s"))
        assert (code, err) == (0, "")
        assert out.startswith(
            f"indexed 3 file(s) into {tmp_path / 's'}: 3 added, 0 updated, 0 removed, "
            "0 unchanged; 4 document(s), "
        )
        names = sorted(p.name for p in (tmp_path / "s").iterdir())
        assert names[1:] == ["s2b.json", "s2b.lock", "s2b.sqlite"]
        assert re.fullmatch(r"s2b\.[0-9a-f]{16}\.[0-9]+\.faiss", names[0])  # the last commit's

    def test_rerun_is_a_no_op(self, store: Path, corpus: Path, capsys) -> None:
        before = (store / "s2b.sqlite").read_bytes()
        code, out, _ = _run(capsys, "index", str(corpus), "--store", str(store))
        assert code == 0
        assert out == (
            f"nothing to do: all 3 file(s) unchanged in {store}\n"
            "skipped 1 file(s): 1 of an unsupported type\n"  # ignored.bin
        )
        assert (store / "s2b.sqlite").read_bytes() == before

    def test_changed_file_is_updated(self, store: Path, corpus: Path, capsys) -> None:
        (corpus / "sub" / "steam.txt").write_text(STEAM + "Locomotives ran on steam.\n")
        code, out, _ = _run(capsys, "index", str(corpus), "--store", str(store))
        assert code == 0
        assert "0 added, 1 updated, 0 removed, 2 unchanged" in out
        # only the new sentence is embedded
        assert out.splitlines()[0].endswith("3 chunk(s), 3 vector(s) (1 embedded, 2 reused)")
        assert re.fullmatch(
            r"done in \d+\.\d s: 3 chunk\(s\), [\d.]+ a second", out.splitlines()[-1]
        )
        result = _query_json(capsys, store, "-k", "1", "--mode", "window")
        assert result["results"]  # still loads and answers after the update

    def test_store_inside_the_indexed_folder_is_skipped(self, corpus: Path, capsys) -> None:
        inner = corpus / ".s2b"
        assert main(["index", str(corpus), "--store", str(inner)]) == 0
        capsys.readouterr()
        code, out, _ = _run(capsys, "index", str(corpus), "--store", str(inner))
        assert code == 0
        assert out == (  # the store is neither indexed nor counted as hidden
            f"nothing to do: all 3 file(s) unchanged in {inner}\n"
            "skipped 1 file(s): 1 of an unsupported type\n"
        )

    def test_progress_bar_only_on_a_terminal(
        self, tmp_path: Path, corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys
    ) -> None:
        class Tty(io.StringIO):
            def isatty(self) -> bool:
                return True

        terminal = Tty()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert main(["index", str(corpus), "--store", str(tmp_path / "tty")]) == 0
        drawn = terminal.getvalue()
        assert "embedding:   0%|" in drawn  # tqdm drew its bar in vectors, with an ETA
        assert "| 0/13 [00:00<?, ?vector/s]" in drawn
        assert "| 13/13 [00:00<00:00, " in drawn  # done: elapsed<remaining
        assert "| 3/3 [00:00<00:00, " in drawn  # the files read
        monkeypatch.undo()
        code, _, err = _run(capsys, "index", str(corpus), "--store", str(tmp_path / "pipe"))
        assert (code, err) == (0, "")


class TestQuery:
    def test_token_counter_words_counts_the_budget_in_words(self, store: Path, capsys) -> None:
        argv = ("--mode", "window", "--max-tokens", "12", "--token-counter", "words")
        got = _query_json(capsys, store, *argv)["results"]
        opened = open_store(store)
        opened.restore()
        want = opened.retriever.invoke(
            QUERY, mode="window", max_tokens=12, token_counter=whitespace_tokens
        )
        assert [r["text"] for r in got] == [d.page_content for d in want]
        assert sum(whitespace_tokens(r["text"]) for r in got) <= 12
        by_chars = _query_json(capsys, store, "--mode", "window", "--max-tokens", "12")["results"]
        assert [r["text"] for r in by_chars] != [r["text"] for r in got]

    def test_parent_mode_returns_sections_unless_told_another_level(
        self, store: Path, capsys
    ) -> None:
        sections = _query_json(capsys, store, "--mode", "parent", "-k", "2")
        assert [r["metadata"]["level"] for r in sections["results"]] == ["section", "section"]
        paragraphs = _query_json(
            capsys, store, "--mode", "parent", "-k", "2", "--parent-level", "paragraph"
        )
        assert [r["metadata"]["level"] for r in paragraphs["results"]] == ["paragraph"] * 2
        assert [r["metadata"]["start"] for r in paragraphs["results"]] == [11, 190]

    @pytest.mark.parametrize("mode", ["parent", "window", "multilevel"])
    def test_json_results_carry_scores_spans_and_matches(
        self, store: Path, corpus: Path, capsys, mode: str
    ) -> None:
        result = _query_json(capsys, store, "--mode", mode, "-k", "2")
        assert result["mode"] == mode
        # window: one sentence each side (the default window_size=1)
        # parent: sections (the command's default parent level)
        # multilevel: the confident evidence shares one Normans paragraph, so that paragraph
        # (issue 32: a weaker hit never escalates); then the paragraph of the other evidence
        # hit of that document: k=2 results
        starts = {"parent": [0, 178], "window": [11, 178], "multilevel": [11, 190]}[mode]
        assert [r["metadata"]["start"] for r in result["results"]] == starts
        top = result["results"][0]
        assert top["source"] == "normans"
        meta = top["metadata"]
        assert meta["mode"] == mode
        assert NORMANS[meta["start"] : meta["end"]] == top["text"]
        assert "Rollo" in top["text"]
        scores = [r["score"] for r in result["results"]]
        assert scores == sorted(scores, reverse=True)
        for match in meta["matches"]:
            assert meta["start"] <= match["start"] < match["end"] <= meta["end"]

    def test_window_size_and_max_tokens(self, store: Path, capsys) -> None:
        narrow = _query_json(capsys, store, "--mode", "window", "--window-size", "0", "-k", "1")
        wide = _query_json(capsys, store, "--mode", "window", "--window-size", "2", "-k", "1")
        assert narrow["window_size"] == 0
        meta = narrow["results"][0]["metadata"]
        # A window of size 0 holds only matched sentences (touching ones coalesce).
        assert meta["split_ids"] == sorted(m["split_id"] for m in meta["matches"])
        assert set(meta["split_ids"]) <= set(wide["results"][0]["metadata"]["split_ids"])
        budget = _query_json(capsys, store, "--mode", "parent", "-k", "3", "--max-tokens", "12")
        assert sum(estimate_tokens(r["text"]) for r in budget["results"]) <= 12

    def test_plain_output_marks_the_matches(self, store: Path, capsys) -> None:
        argv = ["query", QUERY, "--store", str(store), "-k", "1", "--mode", "parent"]
        code, out, _ = _run(capsys, *argv)
        assert code == 0
        header, body = out.splitlines()[:2]
        assert re.match(r"#1  fused \d\.\d\d\d  cosine 0\.\d\d\d  normans  ", header)
        start, end = 0, NORMANS.index("# Language")  # the first section: heading and two paragraphs
        assert header.endswith(f"normans  [parent/section, chars {start}-{end}]")
        assert body == "**# Normans**"  # the section's heading, a matched sentence too
        assert "**Their leader Rollo swore fealty to King Charles.**" in out.splitlines()[3]
        assert "\x1b[" not in out

    def test_terminal_output_uses_rich(self, store: Path) -> None:
        class Tty(io.StringIO):
            def isatty(self) -> bool:
                return True

        out = Tty()
        args = cli.build_parser().parse_args(["query", "Rollo", "--store", str(store), "-k", "1"])
        assert cli.cmd_query(args, out) == 0
        text = out.getvalue()
        assert "\x1b[" in text  # styled
        assert "Rollo" in text
        assert "#1" in text

    def test_long_contexts_are_shown_around_the_best_match(self, store: Path, capsys) -> None:
        argv = ["query", "Gallo-Romance dialect", "--store", str(store), "--mode", "window"]
        code, out, _ = _run(capsys, *argv, "-k", "1", "--window-size", "0", "--max-chars", "40")
        assert code == 0
        body = out.splitlines()[1]
        assert "Gallo-Romance" in body
        assert len(body) < 60


class TestEval:
    def test_table_has_plain_chunks_and_every_mode(self, tmp_path: Path, capsys) -> None:
        store = tmp_path / "s"
        questions = tmp_path / "q.jsonl"
        with (DATA / "questions.jsonl").open() as fh:
            rows = [json.loads(line) for line in fh]
        normans = [r for r in rows if r["doc_id"] == "sq2-Normans"][:8]
        questions.write_text("\n".join(json.dumps(r) for r in normans) + "\n")
        articles = tmp_path / "a.jsonl"
        with (DATA / "articles.jsonl").open() as fh:
            articles.write_text(fh.readline())
        assert main(["index", str(articles), "--store", str(store)]) == 0
        capsys.readouterr()
        argv = ["eval", "--store", str(store), "--questions", str(questions), "--budgets", "256"]
        code, out, err = _run(capsys, *argv)
        assert (code, err) == (0, "")
        lines = out.splitlines()
        assert lines[0] == "8 questions, k=4; rates in %"
        assert lines[2].startswith("| retriever | k | tokens | hit % |")
        names = [line.split(" | ")[0] for line in lines[4:]]
        assert names == [
            "| sentences (plain chunks)",
            "| parent",
            "| window",
            "| multilevel",
            "| pack",
        ]
        code, out, _ = _run(capsys, *argv, "--json", "--modes", "window")
        data = json.loads(out)
        assert [r["name"] for r in data] == ["sentences (plain chunks)", "window"]
        opened = open_store(store)
        opened.restore()
        window = opened.retriever.model_copy(update={"mode": "window"})
        want = evaluate(window, load_questions(questions), k=4, budgets=(256,))
        assert data[1]["hit_rate"] == want.hit_rate == 0.375  # 3 of the 8 (fake embedding, BM25)


class TestUserErrors:
    @pytest.mark.parametrize(
        ("argv", "code", "message"),
        [
            (["query", "q", "--store", "{tmp}/nope"], 1, "s2b: error: no index at --store"),
            (["query", "q", "--store", "{tmp}"], 1, "is not an s2b index"),
            (["index", "{tmp}/missing.txt", "--store", "{tmp}/s"], 1, "no such file"),
            (["index", "{tmp}/x.bin", "--store", "{tmp}/s"], 1, "unsupported file type"),
            (["index", "{tmp}/latin1.txt", "--store", "{tmp}/s", "--strict"], 1, "not UTF-8"),
            (["index", "{tmp}/empty", "--store", "{tmp}/s"], 1, "nothing to index"),
            (["index", "{tmp}/ok.txt", "--store", "{tmp}/x.pdf"], 1, "is not a directory"),
            (["query", "q", "--store", "{tmp}", "--mode", "best"], 2, "invalid choice: 'best'"),
            (["query", "q", "--store", "{tmp}", "-k", "0"], 2, "-k: must be an integer from 1 to"),
            (["eval", "--store", "{tmp}", "--questions", "q", "--modes", "x"], 2, "mode(s)"),
            (["frobnicate"], 2, "invalid choice: 'frobnicate'"),
        ],
    )
    def test_one_line_and_non_zero(
        self, tmp_path: Path, capsys, argv: list[str], code: int, message: str
    ) -> None:
        (tmp_path / "x.pdf").write_bytes(b"%PDF")
        (tmp_path / "x.bin").write_bytes(b"\x00")
        (tmp_path / "bad.jsonl").write_text('{"id": "a", "text": "x"}\n{oops\n')
        (tmp_path / "shape.jsonl").write_text('{"body": "x"}\n')
        (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
        (tmp_path / "dup.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
        (tmp_path / "ok.txt").write_text("fine\n")
        (tmp_path / "empty").mkdir()
        got, out, err = _run(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
        assert got == code
        assert out == ""
        assert err.count("\n") == 1, err
        assert message in err
        assert "Traceback" not in err

    def test_k_past_its_bound_is_a_usage_error_before_any_store_is_opened(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """``-k 101`` is exit 2 from the parser, as ``-k 0`` is; no store is opened or made."""
        store = tmp_path / "nope"
        errors = []
        for k in ("101", "0", "x"):
            code, out, err = _run(capsys, "query", "q", "--store", str(store), "-k", k)
            errors.append((code, out, err))
        assert errors == [
            (2, "", f"s2b query: error: argument -k: must be an integer from 1 to 100, got "
             f"{k!r} (see s2b query --help)\n")
            for k in ("101", "0", "x")
        ]  # fmt: skip
        assert not store.exists()
        assert cli.build_parser().parse_args(["query", "q", "--store", "s", "-k", "100"]).k == 100

    def test_unreadable_files_are_skipped_and_named(self, tmp_path: Path, capsys) -> None:
        (tmp_path / "bad.jsonl").write_text('{"id": "a", "text": "x"}\n{oops\n')
        (tmp_path / "shape.jsonl").write_text('{"body": "x"}\n')
        (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
        (tmp_path / "dup.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
        (tmp_path / "ok.txt").write_text("fine words\n")
        code, out, err = _run(capsys, "index", str(tmp_path), "--store", str(tmp_path / ".s"))
        assert code == 3
        assert err.splitlines() == [
            f"s2b: skipped {tmp_path / 'bad.jsonl'}: line 2 is not valid JSON "
            "(Expecting property name enclosed in double quotes)",
            f"s2b: skipped {tmp_path / 'dup.jsonl'}: lines 1 and 2 have the id 'a' but differ; "
            "give each its own id",
            f"s2b: skipped {tmp_path / 'latin1.txt'}: not UTF-8 text (byte 3)",
            f"s2b: skipped {tmp_path / 'shape.jsonl'}: line 1: expected "
            '{"id", "text", ...} or {"page_content", "metadata"}',
            "s2b: 4 file(s) could not be read and were skipped",
        ]
        assert out.startswith(f"indexed 1 file(s) into {tmp_path / '.s'}: 1 added")
        code, out, _ = _run(capsys, "list", "--store", str(tmp_path / ".s"))
        assert out.splitlines()[0] == f"{tmp_path / 'ok.txt'}  1 document(s), 1 chunk(s)"

    def test_embedding_mismatch(self, store: Path, capsys) -> None:
        code, _, err = _run(capsys, "query", "q", "--store", str(store), "--embedding", "e5")
        assert code == 1
        assert err == (
            f"s2b: error: {store} was indexed with embedding 'fake', not 'local:e5'; "
            "query it with --embedding fake (or none)\n"
        )

    def test_empty_environment_variable_means_unset(
        self, store: Path, capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(cli.EMBEDDING_ENV, "")
        code, out, err = _run(capsys, "query", QUERY, "--store", str(store), "-k", "1")
        assert (code, err) == (0, "")  # the store's own embedding ("fake") is used
        assert out.startswith("#1  fused ")

    def test_unknown_embedding_in_the_environment(
        self, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(cli.EMBEDDING_ENV, "bert")
        (tmp_path / "a.txt").write_text("text\n")
        code, _, err = _run(
            capsys, "index", str(tmp_path / "a.txt"), "--store", str(tmp_path / "s")
        )
        assert code == 1
        assert err == (
            "s2b: error: --embedding 'bert' is not 'provider:model' with a known provider; "
            "use local:e5 (the default), fake, or one of local:MODEL, azure_openai:MODEL, "
            "bedrock:MODEL, cohere:MODEL, google_vertexai:MODEL, huggingface:MODEL, "
            "mistralai:MODEL, ollama:MODEL, openai:MODEL\n"
        )

    def test_unreadable_questions_file(self, store: Path, capsys) -> None:
        argv = ["eval", "--store", str(store), "--questions", str(store / "none.jsonl")]
        code, _, err = _run(capsys, *argv)
        assert code == 1
        assert err.startswith("s2b: error: cannot read ")


class TestProcesses:
    def test_python_dash_m_and_a_pipe(self, store: Path) -> None:
        env = {**os.environ, cli.EMBEDDING_ENV: "fake"}
        argv = [sys.executable, "-m", "langchain_s2b", "query", "Rollo", "--store", str(store)]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("#1  fused ")
        assert "\x1b[" not in done.stdout
        bad = subprocess.run(
            [sys.executable, "-m", "langchain_s2b", "query", "q", "--store", "/nonexistent/s"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert bad.returncode == 1
        assert bad.stderr == (
            "s2b: error: no index at --store /nonexistent/s "
            "(run: s2b index PATH... --store /nonexistent/s)\n"
        )


@pytest.mark.model
def test_real_model_smoke(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cli.EMBEDDING_ENV)
    (tmp_path / "notes.md").write_text(NORMANS)
    (tmp_path / "steam.txt").write_text(STEAM)
    store = tmp_path / "s"
    assert (
        main(
            [
                "index",
                str(tmp_path / "notes.md"),
                str(tmp_path / "steam.txt"),
                "--store",
                str(store),
            ]
        )
        == 0
    )
    with sqlite3.connect(store / "s2b.sqlite") as db:
        recorded = db.execute("SELECT value FROM meta WHERE name = 'embedding'").fetchone()
    assert recorded == ("local:e5",)
    capsys.readouterr()
    argv = ["query", "Who added the condenser?", "--store", str(store), "--json", "-k", "1"]
    code, out, _ = _run(capsys, *argv, "--mode", "window", "--window-size", "0")
    assert code == 0
    top = json.loads(out)["results"][0]["metadata"]
    best = max(top["matches"], key=lambda m: m["score"])
    assert STEAM[best["start"] : best["end"]].strip() == "James Watt added a separate condenser."
