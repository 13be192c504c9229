#!/usr/bin/env python3
"""Throughput of the skillret Python package beside `pipeline embed` and sentence-transformers, in one run.

    python3 scripts/bench_python.py [--model models/all-MiniLM-L6-v2] [--texts 500] [--repeats 3]

Needs the package installed (`pip install ./crates/python`, a release build), the release binary
(`cargo build --release -p pipeline`, or --pipeline) and sentence-transformers. The texts are the first N
skills of ../shared/skillret-sample as every stage embeds them (`name | description | skill_md`). Each
side embeds the same texts as documents, `--repeats` times after a warm-up; the figure is the median
embedding time, model loading excluded on every side (`pipeline embed` reports its own embedding time).
sentence-transformers runs float32 on the CPU with torch's threads set to the machine's cores, batch 32.
Prints the CPU, each side's texts/s and the ratios the issue sets: Embedder.encode / pipeline embed
(target ≥ 0.95) and Embedder.encode / sentence-transformers f32 (target ≥ 1.2).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def texts_of(data, n):
    import skillret

    _, documents, _ = skillret.load_dataset(str(data), "test")
    return [text for _, text in documents[:n]]


def median_seconds(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "all-MiniLM-L6-v2"))
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "skillret-sample"))
    ap.add_argument("--texts", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pipeline", default=str(ROOT / "target" / "release" / "pipeline"))
    args = ap.parse_args()

    import skillret

    texts = texts_of(args.data, args.texts)
    rows = []

    ours = skillret.Embedder(args.model)
    t_ours = median_seconds(lambda: ours.encode_document(texts), args.repeats)
    rows.append(("skillret Embedder.encode_document (f32)", t_ours))

    with tempfile.TemporaryDirectory() as tmp:
        inp = Path(tmp) / "texts.jsonl"
        inp.write_text("".join(json.dumps(t) + "\n" for t in texts))

        def cli():
            out = subprocess.run(
                [args.pipeline, "embed", "--model", args.model, "--kind", "document", "--input", str(inp),
                 "--output", str(Path(tmp) / "v.jsonl")],
                check=True, capture_output=True, text=True,
            )
            m = re.search(r"embedded \d+ texts \(\d+ tokens\) in ([0-9.]+) s", out.stderr)
            if not m:
                raise SystemExit(f"pipeline embed printed no timing:\n{out.stderr}")
            return float(m.group(1))

        cli()
        t_cli = statistics.median(cli() for _ in range(args.repeats))
    rows.append(("pipeline embed (its own embedding time)", t_cli))

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(os.cpu_count())
    st = SentenceTransformer(args.model, device="cpu")
    t_st = median_seconds(lambda: st.encode(texts, batch_size=32, convert_to_numpy=True), args.repeats)
    rows.append(("sentence-transformers f32 (batch 32)", t_st))

    print(f"CPU: {cpu_name()} ({os.cpu_count()} cores); {len(texts)} texts; model {args.model}; "
          f"median of {args.repeats} after a warm-up")
    for name, t in rows:
        print(f"  {name:45s} {t:8.2f} s  {len(texts) / t:8.1f} texts/s")
    print(f"  Embedder / pipeline embed: {t_cli / t_ours:.2f}x (target >= 0.95)")
    print(f"  Embedder / sentence-transformers f32: {t_st / t_ours:.2f}x (target >= 1.2)")


if __name__ == "__main__":
    main()
