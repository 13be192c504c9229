#!/usr/bin/env python3
"""End to end on the shared SkillRet sample: `pipeline run` against the official
protocol in Python, one after the other on the same machine, and the ratio.

The Python side is the official protocol as REFERENCE.md describes it, run as its
own process so that its wall time includes what a user waits for (interpreter,
imports, model load): sentence-transformers `encode` of skills and queries
(normalised), FAISS `IndexFlatIP` top 20, pytrec_eval at k = 5, 10, 15. The Rust
side is `pipeline run --config <config>` with an empty cache directory (every
vector computed), also timed as a whole process. Both use the same thread count.
Both sides' NDCG@10 are printed as a check that they did the same job.

    scripts/fetch-models.sh && cargo build --release -p pipeline
    pip install sentence-transformers==6.2.0 torch==2.15.0 faiss-cpu==1.15.1 pytrec_eval-terrier==0.5.11
    python3 scripts/bench_e2e.py [--config configs/minilm.toml] [--model all-MiniLM-L6-v2]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

OFFICIAL = r'''
import json, sys
import numpy as np
import faiss, pytrec_eval, torch
from sentence_transformers import SentenceTransformer
sample, model_dir, threads, qprefix, dprefix, max_length = sys.argv[1:7]
torch.set_num_threads(int(threads))
def text(s):
    body = s.get("skill_md") or ""
    if not body.strip():
        body = s.get("description", "")
    return f"{(s.get('name') or '').strip()} | {(s.get('description') or '').strip()} | {(body or '').strip()}"
skills = [json.loads(l) for l in open(f"{sample}/skills/test.jsonl") if l.strip()]
queries = [json.loads(l) for l in open(f"{sample}/queries/test.jsonl") if l.strip()]
qrels = {}
for l in open(f"{sample}/qrels/test.jsonl"):
    if l.strip():
        r = json.loads(l)
        qrels.setdefault(r["query_id"], {})[r["skill_id"]] = int(r["relevance"])
model = SentenceTransformer(model_dir, device="cpu")
if max_length != "default":
    model.max_seq_length = int(max_length)
docs = model.encode([dprefix + text(s) for s in skills], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
qs = model.encode([qprefix + q["query"] for q in queries], batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
index = faiss.IndexFlatIP(docs.shape[1])
index.add(docs.astype(np.float32))
scores, ids = index.search(qs.astype(np.float32), 20)
run = {q["id"]: {skills[j]["id"]: float(s) for s, j in zip(scores[i], ids[i])} for i, q in enumerate(queries)}
measures = {"ndcg_cut_5", "ndcg_cut_10", "ndcg_cut_15", "recall_5", "recall_10", "recall_15", "map_cut_5", "map_cut_10", "map_cut_15", "P_5", "P_10", "P_15"}
per_query = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
print(json.dumps({"NDCG@10": sum(v["ndcg_cut_10"] for v in per_query.values()) / len(per_query)}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/minilm.toml")
    ap.add_argument("--model", default="all-MiniLM-L6-v2", help="folder under models/ (same model as the config)")
    ap.add_argument("--query-prefix", default="")
    ap.add_argument("--document-prefix", default="")
    ap.add_argument("--max-length", default="default")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    args = ap.parse_args()

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), RAYON_NUM_THREADS=str(args.threads))
    binary = ROOT / "target/release/pipeline"
    if not binary.exists():
        sys.exit(f"{binary} not found: run cargo build --release -p pipeline")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        py = subprocess.run(
            [sys.executable, "-c", OFFICIAL, args.sample, str(ROOT / "models" / args.model), str(args.threads),
             args.query_prefix, args.document_prefix, args.max_length],
            check=True, capture_output=True, text=True, env=env)
        python_s = time.perf_counter() - t0
        python_ndcg = json.loads(py.stdout.strip().splitlines()[-1])["NDCG@10"]

        config = tmp / "config.toml"
        text = (ROOT / args.config).read_text()
        # An empty cache: every vector is computed, as in the Python run.
        config.write_text(text + f'\n[output]\ncache = "{tmp / "cache"}"\n')
        t0 = time.perf_counter()
        subprocess.run([str(binary), "run", "--config", str(config), "--data", args.sample, "--out", str(tmp / "out")],
                       check=True, capture_output=True, text=True, env=env, cwd=ROOT)
        rust_s = time.perf_counter() - t0
        rust_ndcg = json.loads((tmp / "out/metrics.json").read_text())["retriever"]["NDCG@10"]

    print(f"official protocol (Python, sentence-transformers + FAISS Flat + pytrec_eval): {python_s:7.1f} s  NDCG@10 {python_ndcg:.4f}")
    print(f"pipeline run --config {args.config}: {rust_s:7.1f} s  NDCG@10 {rust_ndcg:.4f}")
    print(f"wall-time ratio (ours / Python): {rust_s / python_s:.2f}")


if __name__ == "__main__":
    main()
