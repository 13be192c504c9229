#!/usr/bin/env python3
"""The reference for models saved with a chat template: sentence-transformers 6.3's token ids
and vectors for the TEST chat embedders, written to crates/embedder/tests/data/chat_reference.json,
and its token ids and scores for the TEST chat rerankers, written to
crates/reranker/tests/data/chat_reference.json.

Needs sentence-transformers 6.3.0 (CI pins 6.2.0 for the other fixtures, so use a virtual
environment: `python3 -m venv --system-site-packages /tmp/st63 && /tmp/st63/bin/pip install
sentence-transformers==6.3.0`) and the models of scripts/make_chat_models.py.

    /tmp/st63/bin/python scripts/make_chat_fixture.py

For each model (models/test-qwen3-chat, models/test-gemma3-chat, models/test-qwen3-raw-chat), loaded as sentence-transformers
loads it, with max_seq_length 64: checks that it reads the `message` modality and the chat
template, then records for each text the ids of `encode_query` (the model's query prompt, as a
system message) and `encode_document` (its document prompt), as `model.preprocess` makes them,
and the vectors of `encode_query` / `encode_document` (float32, CPU). The texts: two short
ones, one with a special token typed in it, and one long enough to be cut at 64 tokens (the
template's ending is then written back over the last tokens: `restore_suffix`).

For each reranker (models/test-bert-cross-encoder-chat, models/test-qwen3-reranker-chat), loaded
as `CrossEncoder` loads it, with max_seq_length 64 (BERT) or 96 (Qwen3): checks the message
modality, then records for each (query, document) pair the ids `preprocess` makes with the
model's default prompt, the logits (`predict` with an identity activation) and the scores
(`predict` with the saved activation, a sigmoid).
"""

import json
import os
import platform
import sys

import sentence_transformers
import torch
import transformers
from sentence_transformers import CrossEncoder, SentenceTransformer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "embedder", "tests", "data", "chat_reference.json")
RERANKER_OUT = os.path.join(ROOT, "crates", "reranker", "tests", "data", "chat_reference.json")
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
    for name in ["test-qwen3-chat", "test-gemma3-chat", "test-qwen3-raw-chat"]:
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
            "pooling": model[1].pooling_mode,
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
            "what": "models/test-qwen3-chat, models/test-gemma3-chat and models/test-qwen3-raw-chat (a plain "
                    "checkpoint: modalities and mean pooling inferred; scripts/make_chat_models.py): "
                    "token ids and vectors of encode_query and encode_document, max_seq_length 64",
        },
        "models": models,
    }
    with open(OUT, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}")
    rerankers(value["generated_by"])


PAIRS = [
    ("hello world", "A skill that greets the user"),
    ("Merge the tables of two PDF reports", "pdf-merge: merges PDF files and their tables"),
    ("A request that types <|im_end|> and [SEP] in its text", "a document with [CLS] and <think> in it"),
    (LONG, LONG.replace("Step", "Stage")),
    ("short request", LONG),
]


def rerankers(generated_by):
    models = {}
    for name, max_length in [("test-bert-cross-encoder-chat", 64), ("test-qwen3-reranker-chat", 96)]:
        path = os.path.join(ROOT, "models", name)
        model = CrossEncoder(path, device="cpu", model_kwargs={"dtype": torch.float32})
        model.max_seq_length = max_length
        modalities = model[0].modality_config
        assert "message" in modalities, f"{name}: no message modality: {modalities}"
        prompt = model.prompts[model.default_prompt_name]
        features = model.preprocess(PAIRS, prompt=prompt)
        mask = features["attention_mask"].bool()
        ids = [row[m].tolist() for row, m in zip(features["input_ids"], mask)]
        logits = model.predict(PAIRS, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        scores = model.predict(PAIRS, convert_to_numpy=True)
        models[name] = {
            "format": modalities["message"].get("format"),
            "prompt": prompt,
            "max_length": max_length,
            "cases": [
                {"query": q, "document": d, "ids": i, "logit": float(l), "score": float(s)}
                for (q, d), i, l, s in zip(PAIRS, ids, logits.reshape(-1), scores.reshape(-1))
            ],
        }
        print(f"{name}: {[len(i) for i in ids]} ids, scores {[round(float(x), 4) for x in scores.reshape(-1)]}")
    value = {
        "generated_by": {
            **generated_by,
            "what": "models/test-bert-cross-encoder-chat and models/test-qwen3-reranker-chat "
                    "(scripts/make_chat_models.py) loaded by CrossEncoder: token ids with the default prompt, "
                    "logits and sigmoid scores of predict, max_seq_length 64 (BERT) and 96 (Qwen3)",
        },
        "models": models,
    }
    os.makedirs(os.path.dirname(RERANKER_OUT), exist_ok=True)
    with open(RERANKER_OUT, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    print(f"wrote {RERANKER_OUT}")


if __name__ == "__main__":
    main()
