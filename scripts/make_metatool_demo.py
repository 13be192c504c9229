#!/usr/bin/env python3
"""Convert the MetaTool benchmark's tool-selection data into the SkillRet layout: the
project's small real demo set, tests/fixtures/metatool (MetaTool, NOT SkillRet).

Source: ../shared/metatool (MetaTool, Huang et al., ICLR 2024; github.com/HowieHwong/MetaTool
at commit 35e81bb; MIT licence, copied beside the output). Its files are checked against
their SHA256SUMS first.

- skills/test.jsonl: its 199 described tools as the library. id = the tool's name, name =
  the name, description = its line in plugin_des.json, skill_md = its longer description
  in big_tool_des.json where it has one (47 tools), else empty (the SkillRet text recipe
  then repeats the description, as the official loader does for an empty skill_md).
- queries/test.jsonl: a fixed sample of single-tool requests (all_clean_data.csv; per
  tool, the first 3 of its requests in a seeded shuffle: 597) and all 497 two-tool
  requests (multi_tool_query_golden.json). Ids mt-single-NNNN / mt-multi-NNNN, the
  request as `query`, its tools as `skill_ids`, k = 1 or 2.
- qrels/test.jsonl: one judgement (relevance 1) per (request, tool).
- dataset.json: {"name": "MetaTool", ...}: `pipeline run` labels every output with it.

Deterministic (seed below; the same input gives the same bytes), standard library only.

    python3 scripts/make_metatool_demo.py [--source ../shared/metatool] [--out tests/fixtures/metatool]
"""

import argparse
import csv
import hashlib
import json
import random
import shutil
import sys
from pathlib import Path

SEED = 20261202
PER_TOOL = 3


def check(source: Path) -> None:
    for line in (source / "SHA256SUMS").read_text().splitlines():
        if not line.strip():
            continue
        digest, name = line.split(maxsplit=1)
        name = name.lstrip("*")
        got = hashlib.sha256((source / name).read_bytes()).hexdigest()
        if got != digest:
            sys.exit(f"{source / name}: sha256 {got}, expected {digest}")


def write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=root.parent / "shared" / "metatool")
    parser.add_argument("--out", type=Path, default=root / "tests" / "fixtures" / "metatool")
    args = parser.parse_args()
    check(args.source)

    short = json.loads((args.source / "plugin_des.json").read_text(encoding="utf-8"))
    long = json.loads((args.source / "big_tool_des.json").read_text(encoding="utf-8"))
    skills = [
        {
            "id": name,
            "name": name,
            "description": short[name].strip(),
            "skill_md": long.get(name, "").strip(),
            "source": "MetaTool (HowieHwong/MetaTool@35e81bb, MIT)",
        }
        for name in sorted(short)
    ]
    known = set(short)

    with (args.source / "all_clean_data.csv").open(encoding="utf-8", newline="") as f:
        rows = [(r["Query"].strip(), r["Tool"].strip()) for r in csv.DictReader(f)]
    by_tool = {}
    for query, tool in rows:
        if tool not in known:
            sys.exit(f"all_clean_data.csv: tool {tool!r} has no description")
        by_tool.setdefault(tool, []).append(query)
    rng = random.Random(SEED)
    single = []
    for tool in sorted(by_tool):
        queries = sorted(set(by_tool[tool]))
        rng.shuffle(queries)
        single.extend((q, [tool]) for q in queries[:PER_TOOL])

    multi_raw = json.loads((args.source / "multi_tool_query_golden.json").read_text(encoding="utf-8"))
    multi = []
    for item in multi_raw:
        tools = item["tool"]
        if not set(tools) <= known:
            sys.exit(f"multi_tool_query_golden.json: unknown tools in {tools}")
        multi.append((item["query"].strip(), sorted(set(tools))))

    queries, qrels = [], []
    for prefix, items in (("mt-single", single), ("mt-multi", multi)):
        for i, (text, tools) in enumerate(items, 1):
            qid = f"{prefix}-{i:04d}"
            queries.append({"id": qid, "query": text, "skill_ids": tools, "k": len(tools)})
            qrels.extend({"query_id": qid, "skill_id": t, "relevance": 1} for t in tools)

    out = args.out
    write_jsonl(out / "skills" / "test.jsonl", skills)
    write_jsonl(out / "queries" / "test.jsonl", queries)
    write_jsonl(out / "qrels" / "test.jsonl", qrels)
    (out / "dataset.json").write_text(
        json.dumps(
            {
                "name": "MetaTool",
                "note": "MetaTool's tool-selection requests in the SkillRet layout: a small real demo set, not SkillRet",
                "source": "https://github.com/HowieHwong/MetaTool (commit 35e81bb), MIT licence (LICENSE)",
                "converted_by": "scripts/make_metatool_demo.py",
                "skills": len(skills),
                "queries": {"single-tool": len(single), "two-tool": len(multi)},
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    shutil.copyfile(args.source / "LICENSE", out / "LICENSE")
    (out / "README.md").write_text(
        f"""# metatool: MetaTool's tool-selection requests in the SkillRet layout (NOT SkillRet)

The project's small real demo set (`configs/metatool.toml`, the main job). Source: the MetaTool
benchmark (Huang et al., ICLR 2024; github.com/HowieHwong/MetaTool at commit 35e81bb), MIT
licence (`LICENSE`, copied from the source). Converted by `scripts/make_metatool_demo.py`
(deterministic; rerun it on `../shared/metatool` to check these bytes).

- `skills/test.jsonl`: its {len(skills)} described tools (name, the one-line description of
  `plugin_des.json`, the longer one of `big_tool_des.json` as `skill_md` where there is one).
- `queries/test.jsonl`: {len(single)} single-tool requests (the first {PER_TOOL} per tool in a
  shuffle seeded {SEED}) and its {len(multi)} two-tool requests; `qrels/test.jsonl` their
  {len(qrels)} judgements.
- `dataset.json`: the name every output of `pipeline run` labels the data with.

Requests are short and tools are one line, unlike SkillRet's long scenarios and SKILL.md
documents: figures on this set do not compare with the SkillRet paper's.
""",
        encoding="utf-8",
    )
    print(f"{out}: {len(skills)} tools, {len(single)} single-tool + {len(multi)} two-tool requests, {len(qrels)} judgements")


if __name__ == "__main__":
    main()
