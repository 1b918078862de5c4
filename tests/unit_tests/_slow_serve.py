"""``s2b`` whose ``fake`` model stops inside a query holding the word ``slow`` until let go.

``python _slow_serve.py ENTERED RELEASE serve --store DIR ...``: ENTERED and
RELEASE are FIFOs. On a slow query the model writes a line to ENTERED (the
test learns that the search is inside the model), then reads RELEASE to its
end (the test lets it go by writing and closing it). Everything else is
``s2b`` as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

from langchain_s2b.cli.commands import main
from langchain_s2b.embeddings import HashingEmbeddings


def _slow(entered: Path, release: Path) -> None:
    plain = HashingEmbeddings.embed_query

    def embed_query(self: HashingEmbeddings, text: str) -> list[float]:
        if "slow" in text.split():
            with entered.open("w") as signal:
                signal.write("in the model\n")
            with release.open() as wait:
                wait.read()
        return plain(self, text)

    HashingEmbeddings.embed_query = embed_query  # type: ignore[method-assign]


if __name__ == "__main__":
    _slow(Path(sys.argv[1]), Path(sys.argv[2]))
    sys.exit(main(sys.argv[3:]))
