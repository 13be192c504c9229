#!/usr/bin/env python3
"""Build the TEST cross-encoders the reranker's and the trainer's tests and benchmark use.

THEIR SCORES MEAN NOTHING. No cross-encoder weights can be downloaded on these
machines (no HuggingFace Hub), so these checkpoints only exercise the code paths
with real layouts and real sizes; real rerankers load by Hub id where the Hub is
reachable.

- models/test-bert-cross-encoder: all-MiniLM-L6-v2's encoder and pooler (from
  models/all-MiniLM-L6-v2, installed by scripts/fetch-models.sh) under `bert.`,
  plus a seeded random `classifier` (1 label), in the layout transformers'
  `BertForSequenceClassification.save_pretrained` writes (model.safetensors,
  config.json with id2label, tokenizer files).
- models/test-xlmr-cross-encoder: a tiny random XLM-RoBERTa sequence classifier
  (2 layers, hidden 32, 2 labels) in the layout of
  `XLMRobertaForSequenceClassification` (`roberta.*`, `classifier.dense`,
  `classifier.out_proj`), with multilingual-e5-small's XLM-R tokenizer.json.
- models/test-tiny-bert: a tiny random BERT sequence classifier (2 layers,
  hidden 32, 4 heads, 128 positions, 1 label) in the layout of
  `BertForSequenceClassification` (`bert.*` with pooler, `classifier`), with
  all-MiniLM-L6-v2's WordPiece tokenizer: the model of the trainer's parity
  test against PyTorch (scripts/make_train_fixture.py).

Standard library only, so CI rebuilds both byte for byte without PyTorch: the
random values come from Python's seeded Mersenne Twister. That transformers
loads each with no missing or unexpected weights is checked by
scripts/make_reranker_fixture.py. Idempotent: a checkpoint whose files are
already there is left alone (delete the folder to rebuild it).

    python3 scripts/make_cross_encoders.py [--models models]
"""

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

from checkpoint_io import f32, normal, read_safetensors, uniform, write_safetensors

ROOT = Path(__file__).resolve().parent.parent
WARNING = "TEST MODEL: random classification head, its scores mean nothing (built by scripts/make_cross_encoders.py)"


def bert_cross_encoder(models, seed):
    src = models / "all-MiniLM-L6-v2"
    out = models / "test-bert-cross-encoder"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    if not (src / "model.safetensors").exists():
        sys.exit(f"{src}: missing; run scripts/fetch-models.sh first")
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    hidden = config["hidden_size"]
    tensors = {f"bert.{name}": value for name, value in read_safetensors(src / "model.safetensors").items()}
    if "bert.pooler.dense.weight" not in tensors:
        sys.exit(f"{src}/model.safetensors has no pooler")
    rng = random.Random(seed)
    tensors["classifier.weight"] = ([1, hidden], normal(rng, hidden, 0.02 * 10))
    tensors["classifier.bias"] = ([1], f32([0.0]))
    write_safetensors(out / "model.safetensors", tensors)
    config.update(
        {
            "architectures": ["BertForSequenceClassification"],
            "id2label": {"0": "LABEL_0"},
            "label2id": {"LABEL_0": 0},
            "_comment": WARNING,
        }
    )
    config.pop("_name_or_path", None)
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name in ["tokenizer.json", "vocab.txt", "special_tokens_map.json", "LICENSE", "NOTICE"]:
        if (src / name).exists():
            shutil.copyfile(src / name, out / name)
    tokenizer_config = json.loads((src / "tokenizer_config.json").read_text())
    tokenizer_config["model_max_length"] = 512
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    (out / "README.md").write_text(f"# {WARNING}\n\nEncoder and pooler: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0, see LICENSE).\n")
    print(f"{out}: built")


def add_linear(t, rng, name, n_in, n_out, std):
    t[f"{name}.weight"] = ([n_out, n_in], normal(rng, n_in * n_out, std))
    t[f"{name}.bias"] = ([n_out], uniform(rng, n_out, 0.05))


def add_norm(t, rng, name, hidden):
    t[f"{name}.weight"] = ([hidden], f32(1.0 + 0.1 * (2.0 * rng.random() - 1.0) for _ in range(hidden)))
    t[f"{name}.bias"] = ([hidden], uniform(rng, hidden, 0.05))


def add_layers(t, rng, prefix, layers, hidden, inter, std):
    """The transformer layers of a BERT-style encoder, in transformers' names."""
    for i in range(layers):
        p = f"{prefix}.encoder.layer.{i}"
        for part in ["query", "key", "value"]:
            add_linear(t, rng, f"{p}.attention.self.{part}", hidden, hidden, std)
        add_linear(t, rng, f"{p}.attention.output.dense", hidden, hidden, std)
        add_norm(t, rng, f"{p}.attention.output.LayerNorm", hidden)
        add_linear(t, rng, f"{p}.intermediate.dense", hidden, inter, std)
        add_linear(t, rng, f"{p}.output.dense", inter, hidden, std)
        add_norm(t, rng, f"{p}.output.LayerNorm", hidden)


def xlmr_cross_encoder(models, seed):
    tokenizer = models / "multilingual-e5-small" / "tokenizer.json"
    out = models / "test-xlmr-cross-encoder"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    if not tokenizer.exists():
        sys.exit(f"{tokenizer}: missing; run scripts/fetch-models.sh first")
    out.mkdir(parents=True, exist_ok=True)
    vocab = json.loads((models / "multilingual-e5-small" / "config.json").read_text())["vocab_size"]
    hidden, layers, heads, inter, positions, labels = 32, 2, 4, 64, 514, 2
    rng = random.Random(seed)
    t = {}

    def linear(name, n_in, n_out):
        add_linear(t, rng, name, n_in, n_out, 0.08)

    t["roberta.embeddings.word_embeddings.weight"] = ([vocab, hidden], uniform(rng, vocab * hidden, 0.1))
    t["roberta.embeddings.position_embeddings.weight"] = ([positions, hidden], uniform(rng, positions * hidden, 0.1))
    t["roberta.embeddings.token_type_embeddings.weight"] = ([1, hidden], uniform(rng, hidden, 0.1))
    add_norm(t, rng, "roberta.embeddings.LayerNorm", hidden)
    add_layers(t, rng, "roberta", layers, hidden, inter, 0.08)
    linear("classifier.dense", hidden, hidden)
    linear("classifier.out_proj", hidden, labels)
    write_safetensors(out / "model.safetensors", t)
    config = {
        "_comment": WARNING,
        "architectures": ["XLMRobertaForSequenceClassification"],
        "attention_probs_dropout_prob": 0.1,
        "bos_token_id": 0,
        "classifier_dropout": None,
        "eos_token_id": 2,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden,
        "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "label2id": {"LABEL_0": 0, "LABEL_1": 1},
        "layer_norm_eps": 1e-05,
        "max_position_embeddings": positions,
        "model_type": "xlm-roberta",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": 1,
        "position_embedding_type": "absolute",
        "type_vocab_size": 1,
        "vocab_size": vocab,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(tokenizer, out / "tokenizer.json")
    tokenizer_config = {
        "bos_token": "<s>",
        "cls_token": "<s>",
        "eos_token": "</s>",
        "mask_token": "<mask>",
        "model_max_length": 512,
        "pad_token": "<pad>",
        "sep_token": "</s>",
        "tokenizer_class": "XLMRobertaTokenizer",
        "unk_token": "<unk>",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    (out / "README.md").write_text(f"# {WARNING}\n\nRandom weights; tokenizer: multilingual-e5-small's XLM-R sentencepiece tokenizer.json.\n")
    print(f"{out}: built")


def tiny_bert(models, seed):
    src = models / "all-MiniLM-L6-v2"
    out = models / "test-tiny-bert"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    if not (src / "tokenizer.json").exists():
        sys.exit(f"{src}: missing; run scripts/fetch-models.sh first")
    out.mkdir(parents=True, exist_ok=True)
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    hidden, layers, heads, inter, positions = 32, 2, 4, 64, 128
    rng = random.Random(seed)
    t = {}

    def linear(name, n_in, n_out):
        add_linear(t, rng, name, n_in, n_out, 0.1)

    t["bert.embeddings.word_embeddings.weight"] = ([vocab, hidden], normal(rng, vocab * hidden, 0.5))
    t["bert.embeddings.position_embeddings.weight"] = ([positions, hidden], normal(rng, positions * hidden, 0.1))
    t["bert.embeddings.token_type_embeddings.weight"] = ([2, hidden], normal(rng, 2 * hidden, 0.1))
    add_norm(t, rng, "bert.embeddings.LayerNorm", hidden)
    add_layers(t, rng, "bert", layers, hidden, inter, 0.1)
    linear("bert.pooler.dense", hidden, hidden)
    linear("classifier", hidden, 1)
    write_safetensors(out / "model.safetensors", t)
    config = {
        "_comment": WARNING,
        "architectures": ["BertForSequenceClassification"],
        "attention_probs_dropout_prob": 0.1,
        "classifier_dropout": None,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden,
        "id2label": {"0": "LABEL_0"},
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "label2id": {"LABEL_0": 0},
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": positions,
        "model_type": "bert",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "vocab_size": vocab,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name in ["tokenizer.json", "vocab.txt", "special_tokens_map.json", "LICENSE", "NOTICE"]:
        if (src / name).exists():
            shutil.copyfile(src / name, out / name)
    tokenizer_config = json.loads((src / "tokenizer_config.json").read_text())
    tokenizer_config["model_max_length"] = positions
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    (out / "README.md").write_text(f"# {WARNING}\n\nRandom weights; tokenizer: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0, see LICENSE).\n")
    print(f"{out}: built")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=str(ROOT / "models"))
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument(
        "only",
        nargs="*",
        choices=["bert", "xlmr", "tiny"],
        help="build only these (default: all; xlmr needs models/multilingual-e5-small)",
    )
    args = ap.parse_args()
    models = Path(args.models)
    only = set(args.only or ["bert", "xlmr", "tiny"])
    # Each has its own seed, so a model is the same bytes whichever are built with it.
    if "bert" in only:
        bert_cross_encoder(models, args.seed)
    if "xlmr" in only:
        xlmr_cross_encoder(models, args.seed + 1)
    if "tiny" in only:
        tiny_bert(models, args.seed + 2)


if __name__ == "__main__":
    main()
