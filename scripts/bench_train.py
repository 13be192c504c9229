#!/usr/bin/env python3
"""Training speed side by side: `pipeline train` against sentence-transformers'
trainer on the same pairs, same machine, same threads.

1. `pipeline train` runs a copy of a training configuration (a small number of
   composed pseudo-labelled queries, no checkpoints) on --data; its
   train_log.jsonl gives tokens (padding excluded) and seconds per step.
2. The pairs it trained on (its training_data.jsonl, texts included) go to
   sentence-transformers 6.x: CrossEncoderTrainer + BinaryCrossEntropyLoss for
   a cross-encoder, SentenceTransformerTrainer + MultipleNegativesRankingLoss
   (anchor, positive, negatives) for a bi-encoder, with the same base model,
   max length, batch size (in the trainer's own unit: pairs for the
   cross-encoder, so as many pairs per step as ours), lr and warm-up, no
   evaluation, no saving. A callback times every optimiser step; tokens are
   the tokenizer's (truncated, no padding).
3. Tokens/s of both, over the same steps (the first two steps of each side are
   left out as warm-up), and the ratio.

Usage:
  python3 scripts/bench_train.py --data ../shared/skillret-sample \
      [--config configs/train/reranker-minilm.toml] [--queries 64] [--threads 2]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ours(args, work: Path):
    text = Path(args.config).read_text()
    text = re.sub(r"(?m)^composed = .*$", f"composed = {args.queries}", text)
    text = re.sub(r"(?m)^single = .*$", "single = 0", text)
    text = re.sub(r"(?m)^checkpoint_every = .*$", "checkpoint_every = 0", text)
    if "checkpoint_every" not in text:
        text = text.replace("[train]\n", "[train]\ncheckpoint_every = 0\n")
    config = work / "bench.toml"
    config.write_text(text)
    out = work / "model"
    binary = ROOT / "target/release/pipeline"
    if not binary.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "pipeline"], cwd=ROOT, check=True)
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    subprocess.run(
        [str(binary), "train", "--config", str(config), "--data", args.data, "--out", str(out)],
        cwd=ROOT, check=True, env=env,
    )
    steps = [json.loads(l) for l in (work / "model.training/train_log.jsonl").read_text().splitlines()]
    settings = json.loads((out / "training.json").read_text())["settings"]
    samples = [json.loads(l) for l in (work / "model.training/training_data.jsonl").read_text().splitlines()]
    return steps, settings, samples


def theirs(args, settings, samples, steps_ours):
    import torch

    torch.set_num_threads(args.threads)
    from datasets import Dataset
    from transformers import TrainerCallback

    base = str(ROOT / settings["base"]["model"]) if not os.path.isabs(settings["base"]["model"]) else settings["base"]["model"]
    run = settings["run"]
    max_length = settings["max_length"]
    cross = settings["objective"] == "cross-encoder"

    class Timer(TrainerCallback):
        def __init__(self):
            self.times = []

        def on_step_begin(self, a, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            self.times.append(time.perf_counter() - self.t)

    timer = Timer()
    if cross:
        from sentence_transformers.cross_encoder import CrossEncoder, CrossEncoderTrainer, CrossEncoderTrainingArguments
        from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss

        model = CrossEncoder(base, num_labels=1, max_length=max_length, device="cpu")
        rows = {"query": [], "document": [], "label": []}
        for s in samples:
            for c, label in [(p, 1.0) for p in s["positives"]] + [(n, 0.0) for n in s["negatives"]]:
                rows["query"].append(s["query"])
                rows["document"].append(c["text"])
                rows["label"].append(label)
        pairs_per_step = max(1, round(len(rows["label"]) / max(1, len(steps_ours))))
        data = Dataset.from_dict(rows)
        targs = CrossEncoderTrainingArguments(
            output_dir=tempfile.mkdtemp(), per_device_train_batch_size=pairs_per_step,
            num_train_epochs=1, learning_rate=run["lr"], warmup_ratio=run["warmup_ratio"],
            weight_decay=run["weight_decay"], max_grad_norm=run["max_grad_norm"], seed=run["seed"],
            save_strategy="no", eval_strategy="no", report_to=[], logging_steps=10**9,
            dataloader_num_workers=0, use_cpu=True, disable_tqdm=True,
        )
        trainer = CrossEncoderTrainer(model=model, args=targs, train_dataset=data,
                                      loss=BinaryCrossEntropyLoss(model), callbacks=[timer])
        tok = model.tokenizer
        counted = [len(tok(q, d, truncation=True, max_length=max_length)["input_ids"])
                   for q, d in zip(rows["query"], rows["document"])]
        batches = [sum(counted[i:i + pairs_per_step]) for i in range(0, len(counted), pairs_per_step)]
        unit = f"{pairs_per_step} pairs per step"
    else:
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
        from sentence_transformers.losses import MultipleNegativesRankingLoss

        model = SentenceTransformer(base, device="cpu")
        model.max_seq_length = max_length
        k = len(samples[0]["negatives"])
        rows = {"anchor": [s["query"] for s in samples], "positive": [s["positives"][0]["text"] for s in samples]}
        for j in range(k):
            rows[f"negative_{j}"] = [s["negatives"][j]["text"] for s in samples]
        data = Dataset.from_dict(rows)
        targs = SentenceTransformerTrainingArguments(
            output_dir=tempfile.mkdtemp(), per_device_train_batch_size=run["batch_size"],
            num_train_epochs=1, learning_rate=run["lr"], warmup_ratio=run["warmup_ratio"],
            weight_decay=run["weight_decay"], max_grad_norm=run["max_grad_norm"], seed=run["seed"],
            save_strategy="no", eval_strategy="no", report_to=[], logging_steps=10**9,
            dataloader_num_workers=0, use_cpu=True, disable_tqdm=True,
        )
        trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=data,
                                             loss=MultipleNegativesRankingLoss(model, scale=run["scale"]),
                                             callbacks=[timer])
        tok = model.tokenizer
        per_sample = []
        for i in range(len(samples)):
            texts = [rows[c][i] for c in rows]
            per_sample.append(sum(len(tok(t, truncation=True, max_length=max_length)["input_ids"]) for t in texts))
        b = run["batch_size"]
        batches = [sum(per_sample[i:i + b]) for i in range(0, len(per_sample), b)]
        unit = f"{b} triplets per step"
    trainer.train()
    return timer.times, batches, unit


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--config", default=str(ROOT / "configs/train/reranker-minilm.toml"))
    p.add_argument("--queries", type=int, default=64, help="composed pseudo-labelled queries to train on")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        steps, settings, samples = ours(args, work)
        times, batches, unit = theirs(args, settings, samples, steps)
    skip = 2
    our_tokens = sum(s["tokens"] for s in steps[skip:])
    our_seconds = sum(s["seconds"] for s in steps[skip:])
    their_tokens = sum(batches[skip:len(times)])
    their_seconds = sum(times[skip:])
    a = our_tokens / our_seconds
    b = their_tokens / their_seconds
    print(f"objective {settings['objective']}, base {settings['base']['model']}, max_length {settings['max_length']}, "
          f"{len(samples)} queries, {args.threads} threads")
    print(f"pipeline train        : {len(steps)} steps, {a:8.0f} tokens/s (steps {skip + 1}..)")
    print(f"sentence-transformers : {len(times)} steps ({unit}), {b:8.0f} tokens/s")
    print(f"ratio (ours / theirs) : {a / b:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
