"""A text of short distinct sentences (~88 characters a chunk), for ``index_memory.py --text``.

.. code-block:: bash

    python benchmarks/short_text.py /tmp/short-12mb.txt --mb 12
    python benchmarks/index_memory.py --sizes 12 --cases file --text /tmp/short-12mb.txt

The synthetic articles of ``index_memory.py`` have ~172 characters a chunk; a file of short
lines (a log, option lists, the 52 MB file of issue 33: 617,166 chunks, 84 characters a chunk)
has twice the chunks per byte, and every chunk is one row of the FAISS index (4 bytes a
dimension). Sentences of 7-12 made-up words (a fixed seed: the same text every run), "Item N"
first so that no two are equal, 2-5 to a paragraph.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

SYLLABLES = (
    *("ka", "lo", "mi", "re", "tan", "usk", "be", "do"),
    *("fu", "gri", "pel", "sor", "vin", "ze", "qua", "ho"),
)
SEED = 7


def short_text(size: int, seed: int = SEED) -> str:
    """``size`` characters or a little more of paragraphs of short distinct sentences."""
    rng = np.random.default_rng(seed)
    made = {"".join(rng.choice(SYLLABLES, int(rng.integers(2, 4)))) for _ in range(5000)}
    words = np.array(sorted(made))
    paragraphs: list[str] = []
    total = n = 0
    while total < size:
        sentences = []
        for _ in range(int(rng.integers(2, 6))):
            n += 1
            picked = rng.choice(words, int(rng.integers(7, 13))).tolist()
            sentences.append(f"Item {n} " + " ".join(picked) + ".")
        paragraph = " ".join(sentences)
        paragraphs.append(paragraph)
        total += len(paragraph) + 2
    return "\n\n".join(paragraphs)


def main(argv: list[str] | None = None) -> int:
    """Write the text."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--mb", type=int, default=12, help="size in MB (10**6 characters)")
    args = parser.parse_args(argv)
    args.path.write_text(short_text(args.mb * 10**6), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
