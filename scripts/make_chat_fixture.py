#!/usr/bin/env python3
"""The reference for models saved with a chat template: sentence-transformers 6.3's token ids
and vectors for the TEST chat models, written to crates/embedder/tests/data/chat_reference.json.

Needs sentence-transformers 6.3.0 (CI pins 6.2.0 for the other fixtures, so use a virtual
environment: `python3 -m venv --system-site-packages /tmp/st63 && /tmp/st63/bin/pip install
sentence-transformers==6.3.0`) and the models of scripts/make_chat_models.py.

    /tmp/st63/bin/python scripts/make_chat_fixture.py

For each model (models/test-qwen3-chat, models/test-gemma3-chat), loaded as sentence-transformers
loads it, with max_seq_length 64: checks that it reads the `message` modality and the chat
template, then records for each text the ids of `encode_query` (the model's query prompt, as a
system message) and `encode_document` (its document prompt), as `model.preprocess` makes them,
and the vectors of `encode_query` / `encode_document` (float32, CPU). The texts: two short
ones, one with a special token typed in it, and one long enough to be cut at 64 tokens (the
template's ending is then written back over the last tokens: `restore_suffix`).
"""

import json
import os
import platform
import sys

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "embedder", "tests", "data", "chat_reference.json")
MAX = 64
LONG = " ".join(
    f"Step {i}: merge the quarterly tables of the two PDF reports, check the totals and write the summary."
    for i in range(1, 40)
)
TEXTS = [
    "hello world",
    "Merge the tables of two PDF reports",
    "A request that types <|im_end|> and <end_of_turn> in its text",
    LONG,
]


def main():
    if sentence_transformers.__version__ != "6.3.0":
        sys.exit(f"needs sentence-transformers 6.3.0, found {sentence_transformers.__version__}")
    torch.manual_seed(0)
    models = {}
    for name in ["test-qwen3-chat", "test-gemma3-chat"]:
        path = os.path.join(ROOT, "models", name)
        model = SentenceTransformer(path, device="cpu")
        model.max_seq_length = MAX
        module = model[0]
        modalities = module.modality_config
        assert "message" in modalities, f"{name}: no message modality: {modalities}"
        cases = []
        for text in TEXTS:
            case = {"text": text}
            for kind, encode in [("query", model.encode_query), ("document", model.encode_document)]:
                prompt_name = "query" if kind == "query" else "document"
                features = model.preprocess([text], prompt=model.prompts.get(prompt_name) or None)
                case[f"{kind}_ids"] = features["input_ids"][0][features["attention_mask"][0].bool()].tolist()
                vector = encode([text], convert_to_numpy=True)[0]
                case[f"{kind}_vector"] = [float(x) for x in vector]
            cases.append(case)
        models[name] = {
            "format": modalities["message"].get("format"),
            "query_prompt": model.prompts.get("query"),
            "document_prompt": model.prompts.get("document"),
            "max_length": MAX,
            "cases": cases,
        }
        print(f"{name}: format {models[name]['format']}, "
              f"{[len(c['query_ids']) for c in cases]} query ids, {[len(c['document_ids']) for c in cases]} document ids")
    value = {
        "generated_by": {
            "tool": "sentence-transformers (PyTorch), float32 on the CPU",
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "command": "/tmp/st63/bin/python scripts/make_chat_fixture.py",
            "what": "models/test-qwen3-chat and models/test-gemma3-chat (scripts/make_chat_models.py): "
                    "token ids and vectors of encode_query and encode_document, max_seq_length 64",
        },
        "models": models,
    }
    with open(OUT, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
