"""``s2b query --min-score`` and MCP ``search(min_score=...)``: the retriever's ``score_threshold``.

The store's ``fake`` model; the floors are placed between the scores the same
query gets without one, so the expected answer is the unfloored answer cut there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from langchain_s2b.cli import commands as cli
from langchain_s2b.cli import serve
from langchain_s2b.cli.commands import main
from langchain_s2b.cli.live import LiveStore

NORMANS = (
    "# Normans\n\nThe Normans gave their name to Normandy. Their leader Rollo swore fealty "
    "to King Charles.\n\nNorman mercenaries served in Italy.\n"
)
STEAM = "A steam engine uses steam as its working fluid. James Watt added a separate condenser.\n"
QUERY = "Rollo swore fealty"
NOTHING = "no results: nothing scored at or above {option} 1 (the cosine of a context's best match)"


@pytest.fixture(autouse=True)
def fake_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cli.EMBEDDING_ENV, "fake")


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "normans.md").write_text(NORMANS)
    (root / "steam.txt").write_text(STEAM)
    target = tmp_path / "store"
    assert main(["index", str(root), "--store", str(target)]) == 0
    capsys.readouterr()
    return target


def _query(store: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    argv = ["query", QUERY, "--store", str(store), "--mode", "window", "-k", "4", "--json"]
    assert main([*argv, *extra]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def _scores(result: dict[str, Any]) -> list[float]:
    return [r["score"] for r in result["results"]]


class TestCommandLine:
    def test_the_floor_cuts_the_answer_where_it_lies(
        self, store: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        every = _scores(_query(store, capsys))
        assert len(every) == 3  # every sentence that shares a hashed word with the query
        assert every == sorted(every, reverse=True)
        assert every[0] > every[1]
        floor = (every[0] + every[1]) / 2
        floored = _query(store, capsys, "--min-score", str(floor))
        assert _scores(floored) == every[:1]
        assert floored["score_threshold"] == floor
        assert _scores(_query(store, capsys, "--min-score", "-1")) == every

    def test_an_empty_answer_says_nothing_reached_the_floor(
        self, store: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["query", QUERY, "--store", str(store), "--min-score", "1"]) == 0
        assert capsys.readouterr().out == NOTHING.format(option="--min-score") + "\n"
        assert _query(store, capsys, "--min-score", "1")["results"] == []

    @pytest.mark.parametrize("bad", ["2", "-1.5", "x", "nan", "inf"])
    def test_a_bad_floor_is_a_usage_error(
        self, store: Path, capsys: pytest.CaptureFixture[str], bad: str
    ) -> None:
        assert main(["query", QUERY, "--store", str(store), "--min-score", bad]) == 2
        assert capsys.readouterr().err == (
            f"s2b query: error: argument --min-score: must be a number from -1 to 1 (a cosine), "
            f"got {bad!r} (see s2b query --help)\n"
        )


async def _call(store: Path, **arguments: Any) -> Any:
    server = serve.build_server(LiveStore(store))
    return await server.call_tool("search", {"query": QUERY, "mode": "window", **arguments})


class TestServe:
    def test_the_floor_and_an_empty_answer_that_is_no_error(self, store: Path) -> None:
        every = anyio.run(lambda: _call(store, k=4))
        scores = [c["score"] for c in every.structuredContent["contexts"]]
        assert len(scores) == 3
        floor = (scores[0] + scores[1]) / 2
        floored = anyio.run(lambda: _call(store, k=4, min_score=floor))
        assert [c["score"] for c in floored.structuredContent["contexts"]] == scores[:1]
        assert floored.structuredContent["min_score"] == floor
        empty = anyio.run(lambda: _call(store, k=4, min_score=1))
        assert not empty.isError
        assert [c.text for c in empty.content] == [NOTHING.format(option="min_score")]
        assert empty.structuredContent["contexts"] == []

    @pytest.mark.parametrize(
        ("bad", "message"),
        [
            (2, "search: min_score must be a cosine from -1 to 1; got 2.0"),
            (-1.5, "search: min_score must be a cosine from -1 to 1; got -1.5"),
            (True, "search: min_score: Input should be a valid number; got True"),
            ("0.5", "search: min_score: Input should be a valid number; got '0.5'"),
        ],
    )
    def test_a_bad_floor_is_one_line(self, store: Path, bad: Any, message: str) -> None:
        with pytest.raises(serve_errors(), match=f"^{re.escape(message)}$"):
            anyio.run(lambda: _call(store, min_score=bad))

    def test_the_schema_says_the_bounds(self, store: Path) -> None:
        server = serve.build_server(LiveStore(store))
        (search,) = [t for t in anyio.run(server.list_tools) if t.name == "search"]
        floor = search.inputSchema["properties"]["min_score"]
        assert (floor["minimum"], floor["maximum"]) == (-1, 1)
        assert "min_score: leave out contexts whose best match's cosine" in str(search.description)


def serve_errors() -> type[Exception]:
    from mcp.server.fastmcp.exceptions import ToolError

    return ToolError
