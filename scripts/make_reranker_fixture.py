#!/usr/bin/env python3
"""Reference logits of the test cross-encoders from PyTorch transformers.

For 200 real (query, skill) pairs of the shared SkillRet sample (the official
document text recipe; for each query its relevant skills, then skills drawn with
a fixed seed), scores the test checkpoints of scripts/make_cross_encoders.py (and jina-reranker-v2's
flash-layout one of scripts/make_registry_models.py, renamed to transformers' layout)
with `AutoModelForSequenceClassification` and tokenises each pair as
sentence-transformers' CrossEncoder does (query first, truncation
"longest_first" at the max length). Checks first that transformers loads each
checkpoint with no missing or unexpected weights (the layout is exact).

Writes crates/reranker/tests/data/reference_logits.json; its header names the
tools, versions and command. The Rust test (crates/reranker/tests/parity.rs)
recomputes the logits and requires |difference| <= 1e-4.

    scripts/fetch-models.sh && python3 scripts/make_cross_encoders.py
    pip install transformers==5.24.0 torch==2.15.0
    python3 scripts/make_reranker_fixture.py
"""

import argparse
import json
import random
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    # name: max length (the BERT one at 256, as MiniLM cross-encoders are run; the
    # tiny XLM-R at its full 512 positions, so that longest-first truncation of
    # both texts is exercised)
    "test-bert-cross-encoder": 256,
    "test-xlmr-cross-encoder": 512,
    # jina-reranker-v2's flash layout (scripts/make_registry_models.py) at its own 1,024 tokens
    "test-jina-reranker-v2": 1024,
}


def flash_to_transformers(path, tmp):
    """jina's XLM-RoBERTa flash checkpoint as transformers' XLMRobertaForSequenceClassification
    (what jina's own conversion script inverts): emb_ln -> embeddings.LayerNorm, mixer.Wqkv split
    into query/key/value rows, mixer.out_proj, norm1, mlp.fc1, mlp.fc2, norm2 renamed."""
    import shutil

    from safetensors.torch import load_file, save_file

    flash = load_file(str(path / "model.safetensors"))
    out = {}
    for name, t in flash.items():
        n = name.replace("roberta.emb_ln.", "roberta.embeddings.LayerNorm.")
        if ".mixer.Wqkv." in n:
            stem, kind = n.split(".mixer.Wqkv.")
            stem = stem.replace("encoder.layers.", "encoder.layer.")
            for part, piece in zip(["query", "key", "value"], t.chunk(3, dim=0)):
                out[f"{stem}.attention.self.{part}.{kind}"] = piece.contiguous()
            continue
        for a, b in [
            (".mixer.out_proj.", ".attention.output.dense."),
            (".norm1.", ".attention.output.LayerNorm."),
            (".mlp.fc1.", ".intermediate.dense."),
            (".mlp.fc2.", ".output.dense."),
            (".norm2.", ".output.LayerNorm."),
        ]:
            n = n.replace(a, b)
        out[n.replace("encoder.layers.", "encoder.layer.")] = t
    save_file(out, str(Path(tmp) / "model.safetensors"))
    config = json.loads((path / "config.json").read_text())
    for key in ["auto_map", "use_flash_attn", "emb_pooler", "output_past"]:
        config.pop(key, None)
    config["model_type"] = "xlm-roberta"
    (Path(tmp) / "config.json").write_text(json.dumps(config))
    for f in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copyfile(path / f, Path(tmp) / f)
    return Path(tmp)


def skill_text(skill):
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    return f"{(skill.get('name') or '').strip()} | {(skill.get('description') or '').strip()} | {(body or '').strip()}"


def pairs_of(sample, n, seed):
    skills = [json.loads(l) for l in open(sample / "skills/test.jsonl") if l.strip()]
    queries = [json.loads(l) for l in open(sample / "queries/test.jsonl") if l.strip()]
    by_id = {s["id"]: s for s in skills}
    rng = random.Random(seed)
    per_query = -(-n // len(queries))
    pairs = []
    for q in queries:
        chosen = [sid for sid in q["skill_ids"] if sid in by_id]
        while len(chosen) < per_query:
            sid = rng.choice(skills)["id"]
            if sid not in chosen:
                chosen.append(sid)
        pairs += [(q, by_id[sid]) for sid in chosen[:per_query]]
    return pairs[:n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    ap.add_argument("--pairs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "crates/reranker/tests/data/reference_logits.json"))
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.set_num_threads(2)
    pairs = pairs_of(Path(args.sample), args.pairs, args.seed)
    out = {
        "_header": {
            "tool": "transformers AutoModelForSequenceClassification (PyTorch) and AutoTokenizer "
            "with truncation='longest_first', as sentence-transformers' CrossEncoder tokenises pairs",
            "versions": {p: metadata.version(p) for p in ["transformers", "torch", "tokenizers"]},
            "command": "python3 scripts/make_reranker_fixture.py",
            "data": "shared/skillret-sample: queries/test.jsonl, skills/test.jsonl (official text recipe)",
            "note": "test checkpoints from scripts/make_cross_encoders.py: their scores mean nothing",
        },
        "pairs": [[q["id"], s["id"]] for q, s in pairs],
        "models": {},
    }
    import tempfile

    for name, max_length in MODELS.items():
        path = ROOT / "models" / name
        tmp = tempfile.TemporaryDirectory()
        if "model_type" not in json.loads((path / "config.json").read_text()):
            path = flash_to_transformers(path, tmp.name)
        model, info = AutoModelForSequenceClassification.from_pretrained(
            str(path), output_loading_info=True, attn_implementation="eager"
        )
        problems = {k: v for k, v in info.items() if v}
        if problems:
            sys.exit(f"{name}: transformers reports {problems}")
        model.eval()
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        logits, tokens = [], []
        with torch.no_grad():
            for start in range(0, len(pairs), 16):
                batch = pairs[start : start + 16]
                enc = tokenizer(
                    [q["query"] for q, _ in batch],
                    [skill_text(s) for _, s in batch],
                    padding=True,
                    truncation="longest_first",
                    max_length=max_length,
                    return_tensors="pt",
                )
                if model.config.type_vocab_size > 1 and "token_type_ids" not in enc:
                    sys.exit(f"{name}: the tokenizer gave no token_type_ids")
                tokens += enc["attention_mask"].sum(dim=1).tolist()
                logits += model(**enc).logits.tolist()
        out["models"][name] = {
            "max_length": max_length,
            "labels": model.config.num_labels,
            "tokens": tokens,
            "logits": logits,
        }
        print(f"{name}: {len(logits)} pairs, {sum(tokens)} tokens, labels {model.config.num_labels}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
