"""Markdown tables from ``quality.py --json`` files: one table per model, rule and metric.

python benchmarks/tables.py results/quality-e5.json [--rule told] [--metric hit,tokens]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

METRICS = ("hit", "recall", "precision", "tokens")


def table(data: dict, rule: str, metric: str) -> str:
    """One metric of every row under one rule: a row per retriever, a column per budget."""
    rows = {name: per for name, per in data.items() if isinstance(per, dict) and rule in per}
    budgets = sorted({int(b) for per in rows.values() for b in per[rule]})
    lines = [
        "| retriever | " + " | ".join(str(b) for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for name, per in rows.items():
        cells = []
        for b in budgets:
            value = per[rule].get(str(b), {}).get(metric)
            if value is None:
                cells.append("n/a")
            elif metric == "tokens":
                cells.append(f"{value:,.0f}")
            else:
                cells.append(f"{value:.3f}".lstrip("0") if value < 1 else f"{value:.3f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("json", type=Path)
    parser.add_argument("--rule", default="told")
    parser.add_argument("--metric", default=",".join(METRICS))
    args = parser.parse_args()
    data = json.loads(args.json.read_text())
    for metric in args.metric.split(","):
        print(f"\n**{args.rule}: {metric}**\n")
        print(table(data, args.rule, metric))
    ladder = data.get("ladder")
    if isinstance(ladder, dict):
        calls = ladder if all(isinstance(v, dict) for v in ladder.values()) else {"plain": ladder}
        for call, shares in calls.items():
            print(f"\n**multilevel, {call}: share of results per level / escalation**\n")
            print("| level / escalation | share |\n|---|---:|")
            for name, share in shares.items():
                print(f"| {name} | {share:.3f} |")


if __name__ == "__main__":
    main()
