#!/usr/bin/env python3
"""Benchmark `pipeline eval` against pytrec_eval on one synthetic run, in one process.

A run of 5,000 queries x 100 documents (SkillRet-like uuid ids, scores with
ties) and qrels of 1-3 relevant skills per query are generated with a fixed
seed. Both sides read the same two TREC files and compute the official
metrics (NDCG, Recall, MAP, Precision at 5/10/15, plus MRR and HitRate):

- ours: the whole `pipeline eval --format json` process (start-up, parsing,
  scoring, printing);
- pytrec_eval, two ways: the same job as a whole process (`python3 THIS
  --python-side qrels run`: start-up, import, parsing the files into dicts,
  RelevanceEvaluator, evaluate, averaging, printing), and that job timed
  inside Python without interpreter start-up and import (which favours it).

Runs alternate, best of --repeat is reported, and the two results are checked
to agree to 1e-9.

    pip install pytrec_eval-terrier==0.5.11
    cargo build --release -p pipeline
    python3 scripts/bench_eval.py [--queries 5000] [--docs 100] [--repeat 5]
"""

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import uuid
from importlib import metadata
from pathlib import Path

import pytrec_eval

ROOT = Path(__file__).resolve().parent.parent
KS = (5, 10, 15)


def generate(dir_, n_queries, n_docs, seed):
    rng = random.Random(seed)
    corpus = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(6006)]
    qrels_path, run_path = dir_ / "qrels.trec", dir_ / "run.trec"
    with open(qrels_path, "w") as q, open(run_path, "w") as r:
        for i in range(n_queries):
            qid = f"q-{i:05d}"
            relevant = rng.sample(corpus, rng.choice([1, 1, 2, 3]))
            for doc in relevant:
                q.write(f"{qid} 0 {doc} 1\n")
            others = [d for d in rng.sample(corpus, n_docs + 3) if d not in relevant]
            docs = others[: n_docs - 2] + relevant[:2]
            for rank, doc in enumerate(docs):
                score = round(rng.random(), 3)  # three decimals: many ties
                r.write(f"{qid} Q0 {doc} {rank + 1} {score} synthetic\n")
    return qrels_path, run_path


def read_trec(qrels_path, run_path):
    qrels, run = {}, {}
    with open(qrels_path) as fh:
        for line in fh:
            qid, _, doc, rel = line.split()
            qrels.setdefault(qid, {})[doc] = int(rel)
    with open(run_path) as fh:
        for line in fh:
            qid, _, doc, _, score, _ = line.split()
            run.setdefault(qid, {})[doc] = float(score)
    return qrels, run


def python_side(qrels_path, run_path):
    t0 = time.perf_counter()
    qrels, run = read_trec(qrels_path, run_path)
    t1 = time.perf_counter()
    cut = ",".join(map(str, KS))
    measures = {f"ndcg_cut.{cut}", f"map_cut.{cut}", f"recall.{cut}", f"P.{cut}", f"success.{cut}", "recip_rank"}
    scores = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    n = len(scores)
    out = {}
    for k in KS:
        out[f"NDCG@{k}"] = sum(s[f"ndcg_cut_{k}"] for s in scores.values()) / n
        out[f"Recall@{k}"] = sum(s[f"recall_{k}"] for s in scores.values()) / n
        out[f"MAP@{k}"] = sum(s[f"map_cut_{k}"] for s in scores.values()) / n
        out[f"Precision@{k}"] = sum(s[f"P_{k}"] for s in scores.values()) / n
        out[f"Completeness@{k}"] = sum(s[f"recall_{k}"] == 1.0 for s in scores.values()) / n
        out[f"HitRate@{k}"] = sum(s[f"success_{k}"] for s in scores.values()) / n
    out["MRR"] = sum(s["recip_rank"] for s in scores.values()) / n
    out["queries"] = n
    t2 = time.perf_counter()
    return out, t2 - t0, t2 - t1


def python_process(qrels_path, run_path):
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--python-side", qrels_path, run_path],
        check=True, capture_output=True, text=True,
    )
    return json.loads(proc.stdout), time.perf_counter() - t0


def rust_side(binary, qrels_path, run_path):
    t0 = time.perf_counter()
    proc = subprocess.run(
        [binary, "eval", "--qrels", qrels_path, "--run", run_path, "--format", "json"],
        check=True, capture_output=True, text=True,
    )
    return json.loads(proc.stdout), time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--binary", default=str(ROOT / "target/release/pipeline"))
    ap.add_argument("--python-side", nargs=2, metavar=("QRELS", "RUN"),
                    help="run only the pytrec_eval job on two TREC files and print its JSON")
    args = ap.parse_args()
    if args.python_side:
        print(json.dumps(python_side(*args.python_side)[0]))
        return
    if not Path(args.binary).is_file():
        sys.exit(f"{args.binary} not found: run `cargo build --release -p pipeline` first")

    with tempfile.TemporaryDirectory() as tmp:
        qrels_path, run_path = generate(Path(tmp), args.queries, args.docs, args.seed)
        size = run_path.stat().st_size / 1e6
        print(f"synthetic run: {args.queries} queries x {args.docs} documents ({size:.1f} MB), "
              f"pytrec_eval-terrier {metadata.version('pytrec_eval-terrier')}, best of {args.repeat}")
        ours, process, inproc, evaluate_only = [], [], [], []
        for _ in range(args.repeat):
            rust_out, t = rust_side(args.binary, qrels_path, run_path)
            ours.append(t)
            proc_out, t = python_process(qrels_path, run_path)
            process.append(t)
            py_out, t, t_eval = python_side(qrels_path, run_path)
            inproc.append(t)
            evaluate_only.append(t_eval)

    for name, other in [("in-process", py_out), ("process", proc_out)]:
        worst = max(abs(rust_out[k] - other[k]) for k in other)
        if rust_out.keys() != other.keys() or worst > 1e-9:
            sys.exit(f"results differ from pytrec_eval ({name}): max |diff| {worst:g}")
    best = min(ours)
    rows = [
        ("pipeline eval, whole process", best),
        ("pytrec_eval job, whole process", min(process)),
        ("pytrec_eval job, in-process (no start-up)", min(inproc)),
        ("pytrec_eval evaluate() alone", min(evaluate_only)),
    ]
    for label, t in rows:
        ratio = "" if t is best else f"   {t / best:5.1f}x ours"
        print(f"{label:<44}{t * 1000:8.1f} ms{ratio}")
    print(f"metrics agree with pytrec_eval: max |diff| = {worst:.1e} over {len(py_out)} values")
    print(f"speed-up (whole process against whole process): {min(process) / best:.1f}x")


if __name__ == "__main__":
    main()
