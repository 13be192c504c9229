#!/usr/bin/env python3
"""Benchmark `pipeline rerank` against sentence-transformers' CrossEncoder, in one run.

Both score the same 2,000 (query, skill) pairs of the shared SkillRet sample (the
24 queries, 83-84 skills each drawn with a fixed seed, official document text
recipe) with the same checkpoint, max length and thread count. Runs alternate;
the best of --repeat is reported as tokens/s and pairs/s with the ratio, and the
worst |score difference| between the two sides. Model loading is not timed on
either side; tokenisation is (both include it).

    scripts/fetch-models.sh && python3 scripts/make_cross_encoders.py
    cargo build --release -p pipeline
    pip install sentence-transformers==6.2.0 torch==2.15.0
    python3 scripts/bench_rerank.py [--extra "--precision bf16"] [--repeat 3]

The default checkpoint is the TEST cross-encoder (MiniLM-L6 encoder, random head):
its scores mean nothing, its cost is that of a real MiniLM-L6 cross-encoder.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def skill_text(skill):
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    return f"{(skill.get('name') or '').strip()} | {(skill.get('description') or '').strip()} | {(body or '').strip()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="test-bert-cross-encoder")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32, help="sentence-transformers batch size")
    ap.add_argument("--extra", default="", help="extra arguments for pipeline rerank")
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    import torch
    from sentence_transformers import CrossEncoder

    torch.set_num_threads(args.threads)
    binary = ROOT / "target/release/pipeline"
    model_dir = ROOT / "models" / args.model
    for path, hint in [
        (binary, "cargo build --release -p pipeline"),
        (model_dir, "scripts/fetch-models.sh && python3 scripts/make_cross_encoders.py"),
    ]:
        if not path.exists():
            sys.exit(f"{path} not found: run {hint}")
    sample = Path(args.sample)
    skills = [json.loads(l) for l in open(sample / "skills/test.jsonl") if l.strip()]
    queries = [json.loads(l) for l in open(sample / "queries/test.jsonl") if l.strip()]
    rng = random.Random(7)
    per_query = [args.pairs // len(queries) + (i < args.pairs % len(queries)) for i in range(len(queries))]
    top_n = max(per_query)
    run_lines, pairs = [], []
    for q, n in zip(queries, per_query):
        chosen = rng.sample(skills, n)
        for rank, s in enumerate(chosen):
            run_lines.append(f"{q['id']} Q0 {s['id']} {rank + 1} {1000 - rank} bench\n")
            pairs.append((q["query"], skill_text(s)))

    ce = CrossEncoder(str(model_dir), max_length=args.max_length, device="cpu")
    enc = ce.tokenizer([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first", max_length=args.max_length)
    tokens = sum(len(ids) for ids in enc["input_ids"])
    print(
        f"{len(pairs)} pairs ({len(queries)} queries), {tokens} tokens at max length {args.max_length}, {args.model}, "
        f"{args.threads} threads; sentence-transformers {metadata.version('sentence-transformers')}, "
        f"torch {torch.__version__}; best of {args.repeat}"
    )

    with tempfile.TemporaryDirectory() as tmp:
        run, out = Path(tmp) / "first.trec", Path(tmp) / "reranked.trec"
        run.write_text("".join(run_lines))
        ours, theirs = [], []
        for _ in range(args.repeat):
            cmd = [str(binary), "rerank", "--model", str(model_dir), "--data", str(sample), "--run", str(run),
                   "--top-n", str(top_n), "--output", str(out), "--max-length", str(args.max_length)] + args.extra.split()
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
            m = re.search(r"reranked (\d+) pairs in ([0-9.]+) s", proc.stderr)
            if not m or int(m.group(1)) != len(pairs):
                sys.exit(f"unexpected pipeline output: {proc.stderr}")
            ours.append(float(m.group(2)))
            t0 = time.perf_counter()
            reference = ce.predict(pairs, batch_size=args.batch_size, activation_fn=torch.nn.Identity(),
                                   show_progress_bar=False)
            theirs.append(time.perf_counter() - t0)
        scores = {}
        for line in out.read_text().splitlines():
            qid, _, sid, _, score, _ = line.split()
            scores[(qid, sid)] = float(score)
    keys = [(l.split()[0], l.split()[2]) for l in run_lines]
    worst = max(abs(scores[k] - float(r)) for k, r in zip(keys, reference))
    best_ours, best_theirs = min(ours), min(theirs)
    label = args.extra or "(f32)"
    print(f"pipeline rerank {label}: {tokens / best_ours:9.0f} tokens/s  {len(pairs) / best_ours:7.1f} pairs/s  ({best_ours:.2f} s)")
    print(f"sentence-transformers CrossEncoder: {tokens / best_theirs:9.0f} tokens/s  {len(pairs) / best_theirs:7.1f} pairs/s  ({best_theirs:.2f} s)")
    print(f"speed ratio (ours / PyTorch): {best_theirs / best_ours:.2f}x; worst |score difference| {worst:.2e}")


if __name__ == "__main__":
    main()
