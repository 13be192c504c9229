#!/usr/bin/env python3
"""Benchmark `pipeline embed` against sentence-transformers (PyTorch), in one run.

Both embed the same 512 skills of the shared SkillRet sample (official text recipe)
with the same model, max length and thread count. Runs alternate (PyTorch's speed
varies ±15% run to run); the best of --repeat is reported as tokens/s, with the
ratio and the worst cosine between the two sides' vectors. Model loading is not
timed on either side.

    scripts/fetch-models.sh && cargo build --release -p pipeline
    pip install sentence-transformers==6.2.0 torch==2.15.0
    python3 scripts/bench_embed.py [--model all-MiniLM-L6-v2] [--max-length 256] [--repeat 3]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def skill_text(skill):
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    return f"{(skill.get('name') or '').strip()} | {(skill.get('description') or '').strip()} | {(body or '').strip()}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all-MiniLM-L6-v2")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--texts", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32, help="sentence-transformers batch size")
    ap.add_argument("--prefix", default="", help="document prefix (e.g. 'passage: ')")
    ap.add_argument("--extra", default="", help="extra arguments for pipeline embed")
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    binary = ROOT / "target/release/pipeline"
    model_dir = ROOT / "models" / args.model
    for path, hint in [(binary, "cargo build --release -p pipeline"), (model_dir, "scripts/fetch-models.sh")]:
        if not path.exists():
            sys.exit(f"{path} not found: run {hint}")
    skills = [json.loads(l) for l in open(Path(args.sample) / "skills/test.jsonl") if l.strip()][: args.texts]
    texts = [args.prefix + skill_text(s) for s in skills]

    st = SentenceTransformer(str(model_dir), device="cpu")
    st.max_seq_length = args.max_length
    tokens = sum(min(len(ids), args.max_length) for ids in st.tokenizer(texts, truncation=True, max_length=args.max_length)["input_ids"])
    print(f"{len(texts)} skills, {tokens} tokens at max length {args.max_length}, {args.model}, "
          f"{args.threads} threads; sentence-transformers {metadata.version('sentence-transformers')}, "
          f"torch {torch.__version__}; best of {args.repeat}")

    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl"
        inp.write_text("".join(json.dumps(t) + "\n" for t in [skill_text(s) for s in skills]))
        ours, theirs = [], []
        for _ in range(args.repeat):
            cmd = [str(binary), "embed", "--model", str(model_dir), "--input", str(inp), "--output", str(out),
                   "--max-length", str(args.max_length), "--document-prefix", args.prefix] + args.extra.split()
            proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
            m = re.search(r"embedded \d+ texts \((\d+) tokens\) in ([0-9.]+) s", proc.stderr)
            if not m or int(m.group(1)) != tokens:
                sys.exit(f"unexpected pipeline output: {proc.stderr}")
            ours.append(float(m.group(2)))
            t0 = time.perf_counter()
            reference = st.encode(texts, batch_size=args.batch_size, convert_to_numpy=True)
            theirs.append(time.perf_counter() - t0)
        vectors = np.array([json.loads(l) for l in out.read_text().splitlines()], dtype=np.float32)

    cos = np.sum(vectors * reference, axis=1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1))
    best_ours, best_theirs = min(ours), min(theirs)
    print(f"pipeline embed {args.extra or '(f32)'}: {tokens / best_ours:9.0f} tokens/s  ({best_ours:.2f} s)")
    print(f"sentence-transformers:       {tokens / best_theirs:9.0f} tokens/s  ({best_theirs:.2f} s)")
    print(f"speed ratio (ours / PyTorch): {best_theirs / best_ours:.2f}x; worst cosine {cos.min():.7f}")


if __name__ == "__main__":
    main()
