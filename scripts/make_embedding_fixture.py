#!/usr/bin/env python3
"""Reference embeddings from sentence-transformers (PyTorch) for the embedder's parity test.

Embeds the first 64 skills of the shared SkillRet sample (official document text recipe
`name | description | skill_md`) and its 24 queries with:
  - models/all-MiniLM-L6-v2 at its own max length (256), no prefixes;
  - models/multilingual-e5-small (our converted f32 weights) at 512, `query: ` / `passage: `.

    pip install sentence-transformers==6.2.0 transformers==5.24.0 torch==2.15.0
    scripts/fetch-models.sh
    python3 scripts/make_embedding_fixture.py [--sample ../shared/skillret-sample]

Writes crates/embedder/tests/data/reference_embeddings.json: a header (tools, versions,
command), then per model the ids and the float32 vectors, little-endian, base64.
The texts themselves are not stored (they stay in ../shared, outside the repository).
"""

import argparse
import base64
import json
import platform
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates/embedder/tests/data/reference_embeddings.json"
MODELS = {
    "all-MiniLM-L6-v2": {"max_length": 256, "query_prefix": "", "document_prefix": ""},
    "multilingual-e5-small": {"max_length": 512, "query_prefix": "query: ", "document_prefix": "passage: "},
}


def skill_text(skill):
    # The official recipe (load_corpus + build_skill_text).
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    name = (skill.get("name") or "").strip()
    desc = (skill.get("description") or "").strip()
    return f"{name} | {desc} | {(body or '').strip()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    ap.add_argument("--skills", type=int, default=64)
    args = ap.parse_args()
    sample = Path(args.sample)
    skills = [json.loads(l) for l in open(sample / "skills/test.jsonl") if l.strip()][: args.skills]
    queries = [json.loads(l) for l in open(sample / "queries/test.jsonl") if l.strip()]
    torch.set_num_threads(2)

    out = {
        "generated_by": {
            "tool": "sentence-transformers",
            "version": metadata.version("sentence-transformers"),
            "transformers": metadata.version("transformers"),
            "torch": torch.__version__,
            "python": platform.python_version(),
            "command": "python3 scripts/make_embedding_fixture.py",
            "texts": f"first {len(skills)} skills (name | description | skill_md) and all {len(queries)} queries of skillret-sample",
        },
        "models": {},
    }
    for name, cfg in MODELS.items():
        model = SentenceTransformer(str(ROOT / "models" / name), device="cpu")
        model.max_seq_length = cfg["max_length"]
        docs = [cfg["document_prefix"] + skill_text(s) for s in skills]
        qs = [cfg["query_prefix"] + q["query"] for q in queries]
        entry = dict(cfg)
        for kind, texts, ids in [("documents", docs, [s["id"] for s in skills]), ("queries", qs, [q["id"] for q in queries])]:
            vectors = model.encode(texts, batch_size=32, convert_to_numpy=True).astype("<f4")
            entry[kind] = {
                "ids": ids,
                "dim": int(vectors.shape[1]),
                "vectors_f32le_base64": base64.b64encode(vectors.tobytes()).decode(),
            }
        out["models"][name] = entry
        print(f"{name}: {len(docs)} documents, {len(qs)} queries")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
