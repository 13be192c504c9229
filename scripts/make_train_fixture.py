#!/usr/bin/env python3
"""PyTorch reference for the trainer's parity test: crates/train/tests/data/parity.json.

Three AdamW steps on models/test-tiny-bert (scripts/make_cross_encoders.py), dropout off
(model.eval(), gradients on), for each objective, as sentence-transformers and transformers'
Trainer compute them:

- "mnrl": a sentence-transformers bi-encoder (Transformer, max_seq_length 64 + mean Pooling)
  with `MultipleNegativesRankingLoss` (scale 20, cosine) on (query, positive skill, hard
  negative skill) triples, 4 a batch;
- "bce": `BertForSequenceClassification` (one label) with `BCEWithLogitsLoss` (as
  sentence-transformers' `BinaryCrossEntropyLoss`) on (query, skill) pairs truncated
  longest-first to 64 tokens, 8 a batch (each query with 1 positive and 3 negatives).

Optimiser as transformers' Trainer builds it: torch AdamW (betas 0.9/0.999, eps 1e-8,
weight decay 0.01 except biases and LayerNorm weights), `get_linear_schedule_with_warmup`
(1 warm-up step of 3), `clip_grad_norm_(…, 1.0)`; lr 1e-3 so that three steps move the
weights visibly. Texts: the shared SkillRet sample's first queries and skills (the fixture
stores the token ids, so the test needs neither the sample nor a tokenizer). Stored: each
step's loss and gradient norm, and the weights after the third step (every tensor except
the word embeddings in full; of those, the rows of the tokens seen plus rows 1000–1007,
which only weight decay touches), as base64 little-endian f32.

    python3 scripts/make_train_fixture.py [--data ../shared/skillret-sample]

Needs torch, transformers and sentence-transformers (versions recorded in the header).
"""

import argparse
import base64
import json
import struct
from pathlib import Path

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer
from sentence_transformers.base.modules import Transformer
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.sentence_transformer.modules import Pooling
from transformers import AutoModelForSequenceClassification, AutoTokenizer, get_linear_schedule_with_warmup

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "test-tiny-bert"
OUT = ROOT / "crates" / "train" / "tests" / "data" / "parity.json"
MAX_LENGTH = 64
LR, WEIGHT_DECAY, WARMUP, STEPS, MAX_NORM, SCALE = 1e-3, 0.01, 1, 3, 1.0, 20.0
UNTOUCHED = list(range(1000, 1008))


def read_jsonl(path, n):
    rows = []
    with open(path) as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
            if len(rows) == n:
                break
    return rows


def skill_text(s):
    body = s.get("skill_md") or s.get("description") or ""
    return f"{(s.get('name') or '').strip()} | {(s.get('description') or '').strip()} | {body.strip()}"


def b64(tensor):
    values = tensor.detach().to(torch.float32).flatten().tolist()
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode()


def optimizer_for(named):
    decay = [p for n, p in named if not (n.endswith("bias") or "LayerNorm" in n)]
    other = [p for n, p in named if n.endswith("bias") or "LayerNorm" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": other, "weight_decay": 0.0}],
        lr=LR,
        betas=(0.9, 0.999),
        eps=1e-8,
    )
    return opt, get_linear_schedule_with_warmup(opt, WARMUP, STEPS)


def weights(named, seen):
    out = {}
    rows = sorted(set(seen) | set(UNTOUCHED))
    for name, p in named:
        if name.endswith("word_embeddings.weight"):
            out[name] = {"shape": list(p.shape), "rows": rows, "values": b64(p[rows])}
        else:
            out[name] = {"shape": list(p.shape), "values": b64(p)}
    return out


def step(named, params, opt, sched, loss):
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
    opt.step()
    sched.step()
    opt.zero_grad()
    return float(norm)


def mnrl(queries, skills):
    transformer = Transformer(str(MODEL), max_seq_length=MAX_LENGTH)
    pooling = Pooling(transformer.get_embedding_dimension(), "mean")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    model.eval()
    loss_fn = MultipleNegativesRankingLoss(model, scale=SCALE)
    encoder = transformer.auto_model
    named = [(n, p) for n, p in encoder.named_parameters() if not n.startswith("pooler.")]
    for n, p in encoder.named_parameters():
        p.requires_grad_(not n.startswith("pooler."))
    params = [p for _, p in named]
    opt, sched = optimizer_for(named)
    steps, seen = [], []
    for k in range(STEPS):
        anchors = [queries[(4 * k + i) % len(queries)]["query"] for i in range(4)]
        positives = [skill_text(skills[8 * k + i]) for i in range(4)]
        negatives = [skill_text(skills[8 * k + 4 + i]) for i in range(4)]
        columns = [model.tokenize(texts) for texts in (anchors, positives, negatives)]
        ids = []
        for features in columns:
            rows = []
            for row, mask in zip(features["input_ids"], features["attention_mask"]):
                rows.append(row[: int(mask.sum())].tolist())
            ids.append(rows)
            seen.extend(t for r in rows for t in r)
        loss = loss_fn(columns, None)
        entry = {"anchors": ids[0], "positives": ids[1], "negatives": ids[2], "loss": float(loss)}
        entry["grad_norm"] = step(named, params, opt, sched, loss)
        steps.append(entry)
    return {"steps": steps, "weights": weights(named, seen)}


def bce(queries, skills):
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForSequenceClassification.from_pretrained(MODEL, dtype=torch.float32)
    model.eval()
    named = list(model.named_parameters())
    params = [p for _, p in named]
    opt, sched = optimizer_for(named)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    steps, seen = [], []
    for k in range(STEPS):
        pairs, labels = [], []
        for j in range(2):
            q = queries[(2 * k + j) % len(queries)]["query"]
            for i in range(4):
                pairs.append((q, skill_text(skills[8 * k + 4 * j + i])))
                labels.append(1.0 if i == 0 else 0.0)
        enc = tokenizer(
            [p[0] for p in pairs],
            [p[1] for p in pairs],
            truncation="longest_first",
            max_length=MAX_LENGTH,
            padding=True,
            return_tensors="pt",
        )
        rows, types = [], []
        for row, ty, mask in zip(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"]):
            n = int(mask.sum())
            rows.append(row[:n].tolist())
            types.append(ty[:n].tolist())
        seen.extend(t for r in rows for t in r)
        logits = model(**enc).logits.view(-1)
        loss = loss_fn(logits, torch.tensor(labels))
        entry = {"ids": rows, "types": types, "labels": labels, "loss": float(loss)}
        entry["grad_norm"] = step(named, params, opt, sched, loss)
        steps.append(entry)
    named = [(n.removeprefix("bert."), p) for n, p in named]
    return {"steps": steps, "weights": weights(named, seen)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "skillret-sample"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    data = Path(args.data)
    queries = read_jsonl(data / "queries" / "test.jsonl", 12)
    skills = read_jsonl(data / "skills" / "test.jsonl", 8 * STEPS)
    fixture = {
        "_header": {
            "tool": f"torch {torch.__version__}, transformers {transformers.__version__}, "
            f"sentence-transformers {sentence_transformers.__version__}",
            "command": "python3 scripts/make_train_fixture.py",
            "model": "models/test-tiny-bert (scripts/make_cross_encoders.py)",
        },
        "config": {
            "lr": LR,
            "weight_decay": WEIGHT_DECAY,
            "warmup": WARMUP,
            "steps": STEPS,
            "max_norm": MAX_NORM,
            "scale": SCALE,
        },
        "mnrl": mnrl(queries, skills),
        "bce": bce(queries, skills),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"{OUT}: written ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
