#!/usr/bin/env python3
"""Load a model directory written by `pipeline train` with sentence-transformers and print its
scores, for the trainer's round-trip test (crates/train/tests/save.rs).

    python3 scripts/check_trained_model.py bi-encoder DIR < texts.json   -> embeddings
    python3 scripts/check_trained_model.py cross-encoder DIR < pairs.json -> logits

Input: a JSON list of strings (bi-encoder) or of [query, document] pairs (cross-encoder).
Output: JSON {"versions": ..., "values": [[...], ...] or [...]} on standard output.
A bi-encoder loads as `SentenceTransformer(DIR)` (its modules.json: pooling, normalisation);
a cross-encoder as `CrossEncoder(DIR)` with the identity activation (raw logits), which also
checks that transformers finds every weight of `BertForSequenceClassification`.
"""

import json
import sys

import sentence_transformers
import torch
import transformers
from sentence_transformers import CrossEncoder, SentenceTransformer


def main():
    kind, path = sys.argv[1], sys.argv[2]
    items = json.load(sys.stdin)
    torch.set_num_threads(1)
    if kind == "bi-encoder":
        model = SentenceTransformer(path, device="cpu")
        values = model.encode(items, convert_to_numpy=True, batch_size=8).tolist()
    elif kind == "cross-encoder":
        info = transformers.AutoModelForSequenceClassification.from_pretrained(path, output_loading_info=True)[1]
        bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        if bad:
            sys.exit(f"{path}: transformers loads it with {bad}")
        model = CrossEncoder(path, device="cpu", activation_fn=torch.nn.Identity())
        values = model.predict([tuple(p) for p in items], batch_size=8, convert_to_numpy=True).tolist()
    else:
        sys.exit(f"unknown kind {kind!r}: bi-encoder or cross-encoder")
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "sentence-transformers": sentence_transformers.__version__}
    json.dump({"versions": versions, "values": values}, sys.stdout)


if __name__ == "__main__":
    main()
