"""The second dev set: the same articles as long blocks of text without headings or titles.

The Wikipedia dev set (``examples/data/squad2-dev``) has short paragraphs and a
title per article. Held-out documents may look nothing like that: long papers,
reports and transcripts whose "paragraphs" run from one sentence to thousands
of words, with no heading to climb to. This script makes such a set from the
same articles, deterministically (seeded):

- the title is dropped (no ``title`` metadata, so contextual headers have
  nothing to say);
- consecutive paragraphs are merged at random into *blocks*: the number of
  paragraphs per block is drawn from 1, 1, 2, 3, 5, 8, 13 and 21, so some blocks
  are one paragraph and some thousands of words; inside a block paragraphs
  are joined by one space, blocks by a blank line; and one paragraph in ten is
  cut into one-sentence blocks instead;
- every gold span is moved to its place in the new text (the check below
  proves ``text[start:end]`` is still the answer);
- **multi-paragraph questions**: for each document, pairs of questions about two
  different paragraphs whose evidence is at most 3 paragraphs apart are joined
  into one question ("Q1 Q2"), with both questions' evidence: evidence recall
  on these is where structure must win (``"multi": true`` on the row).

    python benchmarks/longblocks.py [--source DIR] [--out DIR] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "examples" / "data" / "squad2-dev"
OUT = ROOT / "examples" / "data" / "longblocks-dev"
SIZES = (1, 1, 2, 3, 5, 8, 13, 21)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
MULTI_PER_DOC = 25


def sentences(paragraph: str) -> list[tuple[int, int]]:
    """Spans of a paragraph's sentences (a rough regex: the blocks need no more)."""
    spans, start = [], 0
    for m in SENTENCE_END.finditer(paragraph):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(paragraph)))
    return [(a, b) for a, b in spans if b > a]


def rebuild(text: str, rng: random.Random) -> tuple[str, list[tuple[int, int, int]]]:
    """The blocks' text and, per old paragraph, ``(old start, new start, paragraph index)``.

    A paragraph cut into sentence blocks gets one entry per sentence (each piece
    keeps its characters, only the separators between pieces change).
    """
    paragraphs, pos = [], 0
    for part in text.split("\n\n"):
        paragraphs.append((pos, part))
        pos += len(part) + 2
    out: list[str] = []
    moves: list[tuple[int, int, int]] = []
    length = 0
    i = 0
    while i < len(paragraphs):
        if rng.random() < 0.1:  # this paragraph as one-sentence blocks
            old, para = paragraphs[i]
            for a, b in sentences(para):
                if out:
                    out.append("\n\n")
                    length += 2
                moves.append((old + a, length, i))
                out.append(para[a:b])
                length += b - a
            i += 1
            continue
        n = min(rng.choice(SIZES), len(paragraphs) - i)
        if out:
            out.append("\n\n")
            length += 2
        for j in range(i, i + n):
            old, para = paragraphs[j]
            if j > i:
                out.append(" ")
                length += 1
            moves.append((old, length, j))
            out.append(para)
            length += len(para)
        i += n
    return "".join(out), moves


def moved(offset: int, moves: list[tuple[int, int, int]]) -> int:
    """Where an old offset lies in the new text."""
    best = max((m for m in moves if m[0] <= offset), key=lambda m: m[0])
    return best[1] + offset - best[0]


def paragraph_of(offset: int, moves: list[tuple[int, int, int]]) -> int:
    return max((m for m in moves if m[0] <= offset), key=lambda m: m[0])[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", type=Path, default=SOURCE)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=32)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    docs = [json.loads(line) for line in (args.source / "documents.jsonl").open()]
    questions = [json.loads(line) for line in (args.source / "questions.jsonl").open()]
    new_docs: list[dict[str, Any]] = []
    new_questions: list[dict[str, Any]] = []
    for doc in docs:
        text, moves = rebuild(doc["text"], rng)
        new_docs.append({"id": doc["id"], "text": text})
        mine = [q for q in questions if q["doc_id"] == doc["id"]]
        placed = []
        for q in mine:
            evidence = [
                {
                    "start": moved(e["start"], moves),
                    "end": moved(e["start"], moves) + e["end"] - e["start"],
                }
                for e in q["evidence"]
            ]
            for e, old in zip(evidence, q["evidence"], strict=True):
                assert text[e["start"] : e["end"]] == doc["text"][old["start"] : old["end"]]
            para = paragraph_of(q["evidence"][0]["start"], moves)
            row = {k: v for k, v in q.items() if k != "paragraph"}
            row["evidence"] = evidence
            placed.append((para, row))
            new_questions.append(row)
        pairs = [
            (a, b)
            for a in placed
            for b in placed
            if a[1]["id"] < b[1]["id"] and 0 < abs(a[0] - b[0]) <= 3
        ]
        for (_, a), (_, b) in rng.sample(pairs, min(MULTI_PER_DOC, len(pairs))):
            new_questions.append(
                {
                    "id": f"{a['id']}+{b['id'][4:]}",
                    "question": f"{a['question']} {b['question']}",
                    "answers": a["answers"] + b["answers"],
                    "doc_id": doc["id"],
                    "evidence": a["evidence"] + b["evidence"],
                    "multi": True,
                }
            )
    rng.shuffle(new_questions)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "documents.jsonl").open("w") as f:
        f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in new_docs)
    with (args.out / "questions.jsonl").open("w") as f:
        f.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in new_questions)
    blocks = [len(b.split()) for d in new_docs for b in d["text"].split("\n\n")]
    blocks.sort()
    multi = sum(1 for q in new_questions if q.get("multi"))
    print(
        f"{len(new_docs)} documents, {len(blocks)} blocks (words: min {blocks[0]}, "
        f"median {blocks[len(blocks) // 2]}, max {blocks[-1]}), "
        f"{len(new_questions)} questions ({multi} multi-paragraph)"
    )


if __name__ == "__main__":
    main()
