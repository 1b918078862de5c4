"""s2b and the user's files: mirroring, moves, delete/list, paths as given, formats, Ctrl-C."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import indexer, models
from langchain_s2b.cli.commands import main
from langchain_s2b.embeddings import HashingEmbeddings

TIMING = re.compile(r"done in \d+\.\d s: \d+ chunk\(s\), [\d.]+ a second")

ZEBRA = "Zebras have black and white stripes. They live in Africa.\n"
LION = "Lions roar at night. A pride hunts together.\n"
OWL = "Owls fly silently. They hunt mice in the dark.\n"


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


class Counting(HashingEmbeddings):
    """The fake model, counting what it embeds; raises Ctrl-C on call ``interrupt_at``."""

    texts: list[str] = []  # noqa: RUF012 - shared on purpose: the CLI builds its own instance
    interrupt_at: int | None = None
    calls = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        Counting.calls += 1
        if Counting.interrupt_at is not None and Counting.calls >= Counting.interrupt_at:
            raise KeyboardInterrupt
        Counting.texts += texts
        return super().embed_documents(texts)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[Counting]:
    Counting.texts, Counting.interrupt_at, Counting.calls = [], None, 0
    monkeypatch.setattr(models, "HashingEmbeddings", Counting)
    return Counting


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _folder(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "zebra.txt").write_text(ZEBRA)
    (root / "lion.md").write_text(LION)
    (root / "sub" / "owl.txt").write_text(OWL)
    return root


def _sources(capsys: pytest.CaptureFixture[str], store: Path, question: str) -> list[str]:
    code, out, _ = _run(capsys, "query", question, "--store", str(store), "--json", "-k", "10")
    assert code == 0
    return [r["metadata"]["source"] for r in json.loads(out)["results"]]


class TestMirror:
    def test_a_deleted_file_leaves_when_its_folder_is_indexed(self, tmp_path: Path, capsys) -> None:
        docs, store = _folder(tmp_path / "docs"), tmp_path / "s"
        assert _run(capsys, "index", str(docs), "--store", str(store))[0] == 0
        (docs / "zebra.txt").unlink()
        code, out, _ = _run(capsys, "index", str(docs), "--store", str(store))
        assert code == 0
        assert out.startswith(
            f"indexed 2 file(s) into {store}: 0 added, 0 updated, 1 removed, 2 unchanged"
        )
        assert str(docs / "zebra.txt") not in _sources(capsys, store, "zebras stripes")
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert out.splitlines()[:-1] == [
            f"{docs / 'lion.md'}  1 document(s), 2 chunk(s)",
            f"{docs / 'sub' / 'owl.txt'}  1 document(s), 2 chunk(s)",
            f"2 file(s), 2 document(s), 4 chunk(s), 4 vector(s) in {store}",
        ]

    def test_delete_files_and_folders(self, tmp_path: Path, capsys) -> None:
        docs, store = _folder(tmp_path / "docs"), tmp_path / "s"
        assert _run(capsys, "index", str(docs), "--store", str(store))[0] == 0
        code, out, err = _run(capsys, "delete", str(docs / "sub"), "--store", str(store))
        assert (code, out, err) == (0, f"deleted 1 file(s) (1 document(s)) from {store}\n", "")
        code, out, err = _run(
            capsys, "delete", str(docs / "lion.md"), str(docs / "nope.txt"), "--store", str(store)
        )  # one outcome: a path the index does not hold deletes nothing, and says so
        assert (code, out, err) == (
            1,
            "",
            f"s2b: error: {docs / 'nope.txt'} is not in the index (see s2b list); "
            "nothing was deleted\n",
        )
        code, out, err = _run(
            capsys, "delete", str(docs / "a.txt"), str(docs / "b"), "--store", str(store)
        )
        assert (code, out, err) == (
            1,
            "",
            f"s2b: error: {docs / 'a.txt'}, {docs / 'b'} are not in the index (see s2b list); "
            "nothing was deleted\n",
        )
        assert sorted(_sources(capsys, store, "owls lions zebras")) == [
            str(docs / "lion.md"),
            str(docs / "zebra.txt"),
        ]
        code, out, err = _run(capsys, "delete", str(docs / "lion.md"), "--store", str(store))
        assert (code, out, err) == (0, f"deleted 1 file(s) (1 document(s)) from {store}\n", "")
        assert _sources(capsys, store, "owls lions zebras") == [str(docs / "zebra.txt")]
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert out.endswith("\nok\n")

    def test_a_moved_folder_is_not_duplicated_nor_embedded_again(
        self, tmp_path: Path, capsys, counting: type[Counting]
    ) -> None:
        docs, store = _folder(tmp_path / "docs"), tmp_path / "s"
        assert _run(capsys, "index", str(docs), "--store", str(store))[0] == 0
        assert len(counting.texts) == 6
        moved = tmp_path / "archive" / "docs"
        moved.parent.mkdir()
        shutil.move(docs, moved)
        code, out, _ = _run(capsys, "index", str(moved), "--store", str(store))
        assert code == 0
        assert out.splitlines()[0] == (
            f"indexed 3 file(s) into {store}: 3 added, 0 updated, 3 removed, 0 unchanged; "
            "3 document(s), 6 chunk(s), 6 vector(s) (0 embedded, 6 reused)"
        )
        assert TIMING.fullmatch(out.splitlines()[1])
        assert len(out.splitlines()) == 2
        assert len(counting.texts) == 6  # nothing embedded again
        found = _sources(capsys, store, "zebras lions owls stripes roar fly")
        assert sorted(found) == sorted(
            str(p) for p in (moved / "zebra.txt", moved / "lion.md", moved / "sub" / "owl.txt")
        )
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert out.endswith("\nok\n")


class TestPaths:
    def test_dot_dot_and_dot_folders_as_given(
        self, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        docs = _folder(tmp_path / ".local" / "share" / "docs")
        (docs / ".hidden.txt").write_text("secret\n")
        (docs / ".git").mkdir()
        (docs / ".git" / "notes.txt").write_text("git\n")
        work = tmp_path / "work"
        work.mkdir()
        monkeypatch.chdir(work)
        code, out, _ = _run(capsys, "index", "../.local/share/docs", "--store", "s")
        assert code == 0
        lines = out.splitlines()
        assert lines[:2] == [
            "indexed 3 file(s) into s: 3 added, 0 updated, 0 removed, 0 unchanged; "
            "3 document(s), 6 chunk(s), 6 vector(s) (6 embedded, 0 reused)",
            "skipped 2 file(s): 2 hidden (names starting with '.')",
        ]
        assert TIMING.fullmatch(lines[2])
        assert _sources(capsys, work / "s", "zebras stripes")[0] == str(docs / "zebra.txt")


def _pdf(pages: list[str]) -> bytes:
    """A minimal PDF with one line of Helvetica text per page."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", ""]
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        page_no, content_no = len(objects) + 1, len(objects) + 2
        kids.append(f"{page_no} 0 R")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content_no} 0 R "
            "/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 "
            "/BaseFont /Helvetica >> >> >> >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(pages)} >>"
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out


class TestFormats:
    def test_rst_html_pdf_and_a_bom(self, tmp_path: Path, capsys) -> None:
        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        (docs / "guide.rst").write_text("Title\n=====\n\nReStructuredText about walruses.\n")
        (docs / "page.html").write_bytes(
            b"<html><head><title>Penguins &amp; friends</title><style>p{}</style></head>"
            b"<body><h1>Penguins</h1><script>alert(1)</script><p>Penguins swim &lt;fast&gt;.</p>"
            b"</body></html>"
        )
        pages = ["Koalas sleep all day.", "Kangaroos jump far.", ""]  # the last has no text
        (docs / "paper.pdf").write_bytes(_pdf(pages))
        (docs / "bom.txt").write_bytes("\ufeffBadgers dig setts.\n".encode())
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert (code, err) == (0, "")
        assert out.startswith(f"indexed 4 file(s) into {store}: 4 added, 0 updated, 0 removed")
        code, out, _ = _run(capsys, "query", "walruses", "--store", str(store), "--json", "-k", "1")
        top = json.loads(out)["results"][0]
        assert top["metadata"]["title"] == "guide"
        code, out, _ = _run(
            capsys, "query", "penguins swim", "--store", str(store), "--json", "-k", "1"
        )
        top = json.loads(out)["results"][0]
        assert top["metadata"]["title"] == "Penguins & friends"
        assert top["text"] == "# Penguins\n\nPenguins swim <fast>."
        code, out, _ = _run(
            capsys, "query", "kangaroos jump", "--store", str(store), "--json", "-k", "1"
        )
        top = json.loads(out)["results"][0]
        assert (top["text"], top["metadata"]["page"], top["metadata"]["pages"]) == (
            "Kangaroos jump far.",
            2,
            3,
        )
        assert top["metadata"]["source_id"] == f"{docs / 'paper.pdf'}#page=2"
        code, out, _ = _run(
            capsys, "query", "badgers dig", "--store", str(store), "--json", "-k", "1"
        )
        top = json.loads(out)["results"][0]
        assert (top["text"], top["metadata"]["start"]) == ("Badgers dig setts.\n", 0)
        code, out, _ = _run(capsys, "query", "kangaroos jump", "--store", str(store), "-k", "1")
        assert out.splitlines()[0].split("  ")[3:5] == ["paper", "page 2"]
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert f"{docs / 'paper.pdf'}  2 document(s), 2 chunk(s)" in out.splitlines()
        code, out, _ = _run(capsys, "verify", "--store", str(store))
        assert (code, out.splitlines()[-1]) == (0, "ok")


class TestInterrupt:
    def test_ctrl_c_keeps_what_was_embedded(
        self, tmp_path: Path, capsys, counting: type[Counting], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(indexer, "EMBED_BATCH", 10)
        monkeypatch.setattr(indexer, "GROUP_CHARS", 1)  # one file per transaction
        docs, store = tmp_path / "docs", tmp_path / "s"
        docs.mkdir()
        (docs / "a.txt").write_text(" ".join(f"Alpha sentence {i}." for i in range(25)))
        (docs / "b.txt").write_text(" ".join(f"Beta sentence {i}." for i in range(25)))
        counting.interrupt_at = 5  # a.txt takes 3 batches (10, 10, 5); b.txt is cut in its 2nd
        code, out, err = _run(capsys, "index", str(docs), "--store", str(store))
        assert (code, out) == (130, "")
        assert err == (
            "s2b: interrupted; what was embedded and committed is kept "
            "(run the same command again to finish)\n"
        )
        assert len(counting.texts) == 35
        code, out, _ = _run(capsys, "list", "--store", str(store))
        assert out.splitlines()[0] == f"{docs / 'a.txt'}  1 document(s), 25 chunk(s)"
        counting.interrupt_at = None
        code, out, _ = _run(capsys, "index", str(docs), "--store", str(store))
        assert out.splitlines()[0] == (
            f"indexed 2 file(s) into {store}: 1 added, 0 updated, 0 removed, 1 unchanged; "
            "1 document(s), 25 chunk(s), 25 vector(s) (15 embedded, 10 reused)"
        )
        assert len(counting.texts) == 50  # every sentence embedded exactly once
        assert len(set(counting.texts)) == 50
