"""Inputs that stalled or misled ``s2b index`` (issue 28), each with the answer it must give.

A FIFO (or socket, or a link to a device) inside a folder is never opened; a
file that becomes one between listing and reading is skipped and named; a
JSONL row holding a raw U+2028 or U+0085 is one row; a link inside a folder is
mirrored like a file; a name with escape sequences is shown in a form that
``s2b delete`` takes back; the demo's table gives the tokens of every row at
each budget under that row's own rule.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from langchain_s2b.cli import actions
from langchain_s2b.cli import commands as cli
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.index_dir import open_store
from langchain_s2b.evaluation import evaluate, load_questions

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, cli.EMBEDDING_ENV: "fake", "PYTHONPATH": str(ROOT)}
SPECIAL = "not regular files (FIFOs, sockets, devices, links to none)"


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def first_line(out: str) -> str:
    return out.splitlines()[0]


def listed(store: Path) -> list[str]:
    code, out, err = run("list", "--store", str(store), "--json")
    assert (code, err) == (0, "")
    return [f["path"] for f in json.loads(out)["files_indexed"]]


def texts(store: Path, question: str) -> list[str]:
    code, out, err = run("query", question, "--store", str(store), "--json", "-k", "1")
    assert (code, err) == (0, ""), err
    return [r["text"] for r in json.loads(out)["results"]]


class TestOnlyRegularFiles:
    def test_a_fifo_socket_and_device_link_in_a_folder_are_passed_over(
        self, tmp_path: Path
    ) -> None:
        folder = tmp_path / "folder"
        folder.mkdir()
        (folder / "a.md").write_text("Wombats dig burrows markalpha.")
        os.mkfifo(folder / "notes.md")  # opened, it would wait for a writer forever
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(folder / "chat.md"))
        (folder / "zero.md").symlink_to("/dev/zero")  # read, it would never end
        try:
            argv = ["index", str(folder), "--store", str(tmp_path / "s")]
            done = subprocess.run(  # a subprocess: on failure it hangs, and the timeout says so
                [sys.executable, "-m", "langchain_s2b", *argv],
                env=ENV,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        finally:
            server.close()
        assert (done.returncode, done.stderr) == (0, "")
        assert done.stdout.splitlines()[1] == f"skipped 3 file(s): 3 {SPECIAL}"
        assert listed(tmp_path / "s") == [str(folder / "a.md")]

    def test_a_fifo_given_by_name_is_refused_in_one_line(self, tmp_path: Path) -> None:
        os.mkfifo(tmp_path / "notes.md")
        code, out, err = run("index", str(tmp_path / "notes.md"), "--store", str(tmp_path / "s"))
        assert (code, out) == (1, "")
        assert err == (
            f"s2b: error: cannot index {tmp_path / 'notes.md'}: it is not a regular file but "
            "a FIFO (a named pipe)\n"
        )

    def test_a_file_that_becomes_a_fifo_after_listing_is_skipped_and_named(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        folder = tmp_path / "folder"
        folder.mkdir()
        (folder / "a.md").write_text("Wombats dig burrows markalpha.")
        (folder / "b.md").write_text("Otters float markbeta.")
        listing = actions.find_files

        def then_a_fifo(*args: Any, **kwargs: Any) -> Any:
            found = listing(*args, **kwargs)
            (folder / "b.md").unlink()
            os.mkfifo(folder / "b.md")
            return found

        monkeypatch.setattr(actions, "find_files", then_a_fifo)
        unblock = threading.Timer(60, _write_to, args=(folder / "b.md",))  # if it hangs: EOF
        unblock.start()
        try:
            code, _, err = run("index", str(folder), "--store", str(tmp_path / "s"))
        finally:
            unblock.cancel()
        assert err == (
            f"s2b: skipped {folder / 'b.md'}: it is no longer a regular file but a FIFO (a "
            "named pipe)\ns2b: 1 file(s) could not be read and were skipped\n"
        )
        assert code == 3
        assert listed(tmp_path / "s") == [str(folder / "a.md")]


def _write_to(fifo: Path) -> None:
    with contextlib.suppress(OSError), fifo.open("wb"):
        pass


class TestJsonlRows:
    @pytest.mark.parametrize("separator", ["\u2028", "\u0085", "\u2029"])
    def test_a_raw_line_separator_inside_a_string_is_one_row(
        self, tmp_path: Path, separator: str
    ) -> None:
        rows = [
            {"id": "r1", "text": f"Wombats dig{separator}burrows markalpha."},
            {"id": "r2", "text": "Otters float markbeta."},
        ]
        data = "\r\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"
        (tmp_path / "rows.jsonl").write_text(data, encoding="utf-8", newline="")
        assert separator in (tmp_path / "rows.jsonl").read_text(encoding="utf-8")  # raw
        code, out, err = run("index", str(tmp_path / "rows.jsonl"), "--store", str(tmp_path / "s"))
        assert (code, err) == (0, "")
        assert first_line(out).endswith(
            "2 document(s), 2 chunk(s), 2 vector(s) (2 embedded, 0 reused)"
        )
        assert texts(tmp_path / "s", "markalpha") == [rows[0]["text"]]
        assert texts(tmp_path / "s", "markbeta") == [rows[1]["text"]]


class TestLinksAreMirroredLikeFiles:
    @pytest.fixture
    def folders(self, tmp_path: Path) -> tuple[Path, Path, Path]:
        """A folder holding a file, a link to a file outside it, and a link to its own file."""
        folder, outside = tmp_path / "folder", tmp_path / "outside"
        folder.mkdir()
        outside.mkdir()
        (folder / "a.md").write_text("Wombats dig burrows markalpha.")
        (outside / "o.md").write_text("Otters float markbeta.")
        (folder / "link.md").symlink_to(outside / "o.md")
        (folder / "again.md").symlink_to(folder / "a.md")
        store = tmp_path / "s"
        assert run("index", str(folder), "--store", str(store))[0] == 0
        return folder, outside, store

    def test_a_link_is_known_by_its_own_name_and_read_once(
        self, folders: tuple[Path, Path, Path]
    ) -> None:
        folder, _, store = folders
        shutil.rmtree(store)
        code, out, err = run("index", str(folder), "--store", str(store))
        assert (code, err) == (0, "")
        read_once = "read once: 1 link(s) to a file this run reads by its real path"
        assert out.splitlines()[1] == read_once
        assert listed(store) == [str(folder / "a.md"), str(folder / "link.md")]

    def test_a_removed_link_leaves_the_index(self, folders: tuple[Path, Path, Path]) -> None:
        folder, outside, store = folders
        (folder / "link.md").unlink()
        code, out, err = run("index", str(folder), "--store", str(store))
        assert (code, err) == (0, "")
        assert first_line(out).startswith(
            f"indexed 1 file(s) into {store}: 0 added, 0 updated, 1 removed"
        )
        assert listed(store) == [str(folder / "a.md")]
        assert texts(store, "markbeta") == ["Wombats dig burrows markalpha."]  # o.md is gone
        assert (outside / "o.md").exists()

    def test_a_link_that_points_elsewhere_is_read_again(
        self, folders: tuple[Path, Path, Path]
    ) -> None:
        folder, outside, store = folders
        (outside / "p.md").write_text("Herons wade markgamma, a longer text.")
        (folder / "link.md").unlink()
        (folder / "link.md").symlink_to(outside / "p.md")
        code, out, err = run("index", str(folder), "--store", str(store))
        assert (code, err) == (0, "")
        assert first_line(out).startswith(
            f"indexed 2 file(s) into {store}: 0 added, 1 updated, 0 removed"
        )
        assert texts(store, "markgamma") == ["Herons wade markgamma, a longer text."]

    def test_delete_of_the_folder_removes_what_came_through_links(
        self, folders: tuple[Path, Path, Path]
    ) -> None:
        folder, _, store = folders
        code, out, err = run("delete", str(folder), "--store", str(store))
        assert (code, out, err) == (0, f"deleted 2 file(s) (2 document(s)) from {store}\n", "")
        assert listed(store) == []

    def test_delete_of_the_link_by_its_name(self, folders: tuple[Path, Path, Path]) -> None:
        folder, _, store = folders
        code, out, err = run("delete", str(folder / "link.md"), "--store", str(store))
        assert (code, out, err) == (0, f"deleted 1 file(s) (1 document(s)) from {store}\n", "")
        assert listed(store) == [str(folder / "a.md")]


class TestNamesShownAreNamesTaken:
    NAME = "\x1b[31mred\x07 \\ back.md"
    SHOWN = "\\x1b[31mred\\x07 \\\\ back.md"

    def test_list_shows_escapes_and_delete_takes_them(self, tmp_path: Path) -> None:
        (tmp_path / "d").mkdir()
        (tmp_path / "d" / self.NAME).write_text("Wombats dig burrows markalpha.")
        (tmp_path / "d" / "plain.md").write_text("Otters float markbeta.")
        store = tmp_path / "s"
        assert run("index", str(tmp_path / "d"), "--store", str(store))[0] == 0
        code, out, err = run("list", "--store", str(store))
        assert (code, err) == (0, "")
        shown = out.splitlines()[0].split("  ")[0]
        assert shown == f"{tmp_path / 'd'}/{self.SHOWN}"
        code, out, err = run("delete", shown, "--store", str(store))
        assert (code, out, err) == (0, f"deleted 1 file(s) (1 document(s)) from {store}\n", "")
        assert listed(store) == [str(tmp_path / "d" / "plain.md")]

    def test_a_name_not_indexed_is_named_as_shown(self, tmp_path: Path) -> None:
        (tmp_path / "plain.md").write_text("Otters float markbeta.")
        store = tmp_path / "s"
        assert run("index", str(tmp_path / "plain.md"), "--store", str(store))[0] == 0
        code, _, err = run("delete", str(tmp_path / self.NAME), "--store", str(store))
        assert code == 1
        assert err == (
            f"s2b: error: {tmp_path}/{self.SHOWN} is not in the index (see s2b list); "
            "nothing was deleted\n"
        )

    def test_query_headers_show_the_escaped_title(self, tmp_path: Path) -> None:
        (tmp_path / self.NAME).write_text("Wombats dig burrows markalpha.")
        store = tmp_path / "s"
        assert (
            run("index", str(tmp_path / self.NAME), "--store", str(store), "--no-headers")[0] == 0
        )
        argv = ["query", "markalpha", "--store", str(store), "-k", "1", "--mode", "parent"]
        code, out, err = run(*argv)
        assert (code, err) == (0, "")
        title = self.SHOWN.removesuffix(".md")  # a text file's title is its name's stem
        assert out.splitlines()[0].endswith(f"  {title}  [parent/section, chars 0-30]")


def _demo() -> Any:
    spec = importlib.util.spec_from_file_location("s2b_demo", ROOT / "examples" / "demo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_table_gives_each_rows_tokens_at_each_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``examples/demo.py``'s table: a ``+ max_tokens`` row's tokens are those it returned."""
    store = tmp_path / "s"
    articles = ROOT / "examples" / "data" / "articles.jsonl"
    assert run("index", str(articles), "--store", str(store))[0] == 0
    demo = _demo()
    argv = ["demo.py", "--store", str(store), "--ask", "0", "--eval", "3"]
    monkeypatch.setattr(sys, "argv", argv)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        demo.main()
    table = [line for line in out.getvalue().splitlines() if line.startswith("| ")]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    rows = {
        cells[0]: dict(zip(head, cells, strict=True))
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table[1:])
    }
    # The reference: the same evaluation, run here.
    opened = open_store(store)
    opened.restore()
    retriever = opened.retriever
    questions = load_questions(ROOT / "examples" / "data" / "questions.jsonl")
    sample = questions[:: max(1, len(questions) // 3)][:3]
    for mode in ("parent", "window", "multilevel"):
        told = evaluate(
            retriever.model_copy(update={"mode": mode}),
            sample,
            k=3,
            budgets=(256, 1024),
            budget_option="max_tokens",
        )
        row = rows[f"{mode} + max_tokens"]
        assert [row["tokens@256"], row["tokens@1024"]] == [
            f"{told.tokens_at[256]:.0f}",
            f"{told.tokens_at[1024]:.0f}",
        ]
        assert row["tokens@k"] == "-"
        assert rows[mode]["tokens@k"] == f"{told.mean_tokens:.0f}"
    opened.close()
