#!/usr/bin/env python3
"""Reference outputs of transformers / sentence-transformers / peft (PyTorch, float32) for the
registry architectures' TEST checkpoints (scripts/make_registry_models.py).

Writes crates/embedder/tests/data/registry_reference.json: for each checkpoint, the token ids
(length and sha256, as in qwen3_reference.json) and the f32 embeddings of the first 48 sample
skills (official text `name | description | skill_md`, encode_document) at max_seq_length 512 and
of the 24 sample queries (encode_query: the model's query prompt), batch size 8 (ragged,
right-padded batches).

- test-gemma3-embedding / test-gemma3-bidirectional: sentence-transformers 6.2 loads them as they
  are (transformers' Gemma3TextModel; the bidirectional one with its window rewrite). Also
  checked: transformers loads each with no missing or unexpected weights, the sliding window it
  applies is 16 / 21, and the inputs are far longer than the window.
- test-pplx-embedding: transformers has no `bidirectional_pplx_qwen3` (pplx-embed ships it as
  remote code), so the reference runs transformers' Qwen3Model on the same weights with an
  all-visible 4D attention mask over the real tokens (bidirectional), masked mean pooling, and
  pplx-embed's Int8TanhQuantizer (`clamp(round(tanh(x)·127), -128, 127)`), in that order.
- test-mistral-embedding: sentence-transformers 6.2 loads it as it is (transformers'
  MistralModel, causal with its 24-token sliding window).
- test-nv-embed: NV-Embed-v1's modeling code is remote code (not installable here), so the reference
  rebuilds it: transformers' MistralModel on the `embedding_model.` weights with every layer's
  `self_attn.is_causal = False` (what NV-Embed's BidirectionalMistralModel sets), SDPA, and a
  latent-attention block written from NV-Embed's published description (modeling_nvembed.py:
  PreNorm LayerNorms, to_q / to_kv / to_out cross-attention to the learned latents with
  scaled_dot_product_attention, GEGLU feed-forward, masked mean, L2) on the
  `latent_attention_model.` weights, both loaded strictly. Texts are encoded as
  NVEmbedModel.encode does: `instruction + text + eos_token`, right padding, the first
  `len(tokenizer.tokenize(instruction))` positions zeroed in the pooling mask; queries get the
  official evaluation's instruction, documents none. Two ways:
  `official`: as skillret/eval.py under transformers 5 with its _compat.py, which makes the
  bidirectional model run MistralModel.forward: batches of 4 in order, each given a 2D attention
  mask, so transformers builds Mistral's sliding-window causal mask where a batch has padding (or
  reaches the window) and skips it where it has none (then SDPA runs the non-causal layers
  bidirectionally); `bidirectional`: every real token sees every real token (a 4D mask), as
  NV-Embed was trained.
- test-jina-v5: peft loads adapters/<task>/ onto transformers' Qwen3Model and merges it
  (`merge_and_unload`), for tasks retrieval and text-matching; sentence-transformers then
  pools and normalises (last token) with the prompts "Query: " / "Document: ".

    pip install sentence-transformers==6.2.0 transformers==5.24.0 torch==2.15.0 peft==0.21.2
    scripts/fetch-models.sh qwen3-tokenizer && python3 scripts/make_registry_models.py
    python3 scripts/make_registry_fixture.py [--sample ../shared/skillret-sample]
"""

import argparse
import json
import platform
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

from make_qwen3_fixture import digest, skill_text, vectors

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
OUT = ROOT / "crates/embedder/tests/data/registry_reference.json"
SKILLS, MAX_LENGTH, BATCH = 48, 512, 8


def st_encode(st, docs, queries):
    st.max_seq_length = MAX_LENGTH
    d = st.encode_document(docs, batch_size=BATCH, convert_to_numpy=True)
    q = st.encode_query(queries, batch_size=BATCH, convert_to_numpy=True)
    return d, q


def token_digests(st, texts, prompt):
    tok = st.tokenizer
    return [digest(tok(prompt + t, truncation=True, max_length=MAX_LENGTH)["input_ids"]) for t in texts]


def mistral(docs, queries):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    path = MODELS / "test-mistral-embedding"
    model, info = AutoModel.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    assert type(model).__name__ == "MistralModel", type(model)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    st = SentenceTransformer(str(path), device="cpu")
    d, q = st_encode(st, docs, queries)
    prompt = st.prompts["query"]
    return {
        "sliding_window": model.config.sliding_window,
        "query_prompt": prompt,
        "tokens": {"documents": token_digests(st, docs, ""), "queries": token_digests(st, queries, prompt)},
        "documents": vectors(d),
        "queries": vectors(q),
    }


def gemma3(name, docs, queries):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoConfig, AutoModel

    path = MODELS / name
    model, info = AutoModel.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    assert type(model).__name__ == "Gemma3TextModel", type(model)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    config = AutoConfig.from_pretrained(path)
    st = SentenceTransformer(str(path), device="cpu")
    d, q = st_encode(st, docs, queries)
    prompt = st.prompts["query"]
    return {
        "applied_sliding_window": config.sliding_window,
        "layer_types": config.layer_types,
        "bidirectional": bool(config.use_bidirectional_attention),
        "query_prompt": prompt,
        "tokens": {"documents": token_digests(st, docs, ""), "queries": token_digests(st, queries, prompt)},
        "documents": vectors(d),
        "queries": vectors(q),
    }


def pplx(docs, queries):
    import shutil
    import tempfile

    from transformers import AutoTokenizer, Qwen3Model

    path = MODELS / "test-pplx-embedding"
    with tempfile.TemporaryDirectory() as tmp:
        for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"]:
            shutil.copyfile(path / f, Path(tmp) / f)
        config = json.loads((path / "config.json").read_text())
        config["model_type"] = "qwen3"
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        model, info = Qwen3Model.from_pretrained(tmp, dtype=torch.float32, output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], info
        tok = AutoTokenizer.from_pretrained(tmp)
    model.eval()

    def encode(texts):
        out = []
        for start in range(0, len(texts), BATCH):
            batch = tok(texts[start : start + BATCH], truncation=True, max_length=MAX_LENGTH, padding=True, return_tensors="pt")
            keep = batch["attention_mask"].bool()
            n = keep.shape[1]
            # Every real token sees every real token; padding is seen by none.
            visible = keep[:, None, None, :].expand(-1, 1, n, n)
            with torch.inference_mode():
                hidden = model(input_ids=batch["input_ids"], attention_mask=visible).last_hidden_state
            m = keep.unsqueeze(-1).float()
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
            soft = torch.tanh(pooled)
            hard = torch.clamp(torch.round(soft * 127), -128, 127)
            out.append((hard.detach() + soft - soft.detach()).numpy())
        return np.concatenate(out)

    # The mask really is bidirectional: the first token's state depends on the last one.
    ids = tok(["alpha beta gamma"], return_tensors="pt")
    n = ids["input_ids"].shape[1]
    full = torch.ones(1, 1, n, n, dtype=torch.bool)
    with torch.inference_mode():
        a = model(input_ids=ids["input_ids"], attention_mask=full).last_hidden_state[0, 0]
        ids2 = ids["input_ids"].clone()
        ids2[0, -1] = 1000
        b = model(input_ids=ids2, attention_mask=full).last_hidden_state[0, 0]
    assert not torch.allclose(a, b), "the 4D mask did not make attention bidirectional"
    return {
        "query_prompt": "",
        "tokens": {
            "documents": [digest(tok(t, truncation=True, max_length=MAX_LENGTH)["input_ids"]) for t in docs],
            "queries": [digest(tok(t, truncation=True, max_length=MAX_LENGTH)["input_ids"]) for t in queries],
        },
        "documents": vectors(encode(docs)),
        "queries": vectors(encode(queries)),
    }


NV_INSTRUCTION = "Instruct: Given a question, retrieve passages that answer the question\nQuery: "
NV_BATCH = 4


class PreNorm(torch.nn.Module):
    def __init__(self, dim, fn, context=False):
        super().__init__()
        self.fn = fn
        self.norm = torch.nn.LayerNorm(dim)
        self.norm_context = torch.nn.LayerNorm(dim) if context else None

    def forward(self, x, context=None):
        x = self.norm(x)
        if self.norm_context is not None:
            return self.fn(x, self.norm_context(context))
        return self.fn(x)


class CrossAttention(torch.nn.Module):
    def __init__(self, dim, heads, head_dim):
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.to_q = torch.nn.Linear(dim, inner, bias=False)
        self.to_kv = torch.nn.Linear(dim, 2 * inner, bias=False)
        self.to_out = torch.nn.Linear(inner, dim, bias=False)

    def forward(self, x, context):
        q = self.to_q(x)
        k, v = self.to_kv(context).chunk(2, dim=-1)
        split = lambda t: t.reshape(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)
        out = torch.nn.functional.scaled_dot_product_attention(split(q), split(k), split(v))
        return self.to_out(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


class GegluFeedForward(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(dim, 8 * dim), torch.nn.Identity(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        a, gates = self.net[0](x).chunk(2, dim=-1)
        return self.net[2](a * torch.nn.functional.gelu(gates))


class LatentAttention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        dim = c["latent_dim"]
        self.cross_attend_blocks = torch.nn.ModuleList([
            PreNorm(dim, CrossAttention(dim, c["num_cross_heads"], c["cross_dim_head"]), context=True),
            PreNorm(dim, GegluFeedForward(dim)),
        ])
        self.latents = torch.nn.Parameter(torch.zeros(c["num_latents_value"], dim))

    def forward(self, hiddens, pool_mask):
        attend, ff = self.cross_attend_blocks
        latents = self.latents.expand(hiddens.shape[0], -1, -1)
        hiddens = attend(hiddens, context=latents) + hiddens
        hiddens = ff(hiddens) + hiddens
        m = pool_mask.unsqueeze(-1).float()
        return torch.nn.functional.normalize((hiddens * m).sum(1) / pool_mask.sum(1, keepdim=True).float(), p=2, dim=-1)


def nv_embed(docs, queries):
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, MistralConfig, MistralModel

    path = MODELS / "test-nv-embed"
    config = json.loads((path / "config.json").read_text())
    text = dict(config["text_config"])
    assert text.pop("model_type") == "bidirectional_mistral"
    model = MistralModel(MistralConfig(**text, attn_implementation="sdpa"))
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    state = load_file(path / "model.safetensors")
    part = lambda prefix: {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    model.load_state_dict(part("embedding_model."), strict=True)
    for layer in model.layers:
        layer.self_attn.is_causal = False  # as BidirectionalMistralModel.__init__
    latent = LatentAttention(config["latent_attention_config"])
    latent.load_state_dict(part("latent_attention_model."), strict=True)
    assert len(state) == len(part("embedding_model.")) + len(part("latent_attention_model."))
    model.eval()
    tok = AutoTokenizer.from_pretrained(path)
    window = model.config.sliding_window

    def batch_of(texts, instruction):
        full = [instruction + t + tok.eos_token for t in texts]
        return tok(full, max_length=MAX_LENGTH, padding=True, return_token_type_ids=False, return_tensors="pt", truncation=True)

    def encode(texts, instruction, mode):
        skip = len(tok.tokenize(instruction)) if instruction else 0
        out, kinds = [], {"bidirectional": 0, "causal": 0}
        for start in range(0, len(texts), NV_BATCH):
            batch = batch_of(texts[start : start + NV_BATCH], instruction)
            keep = batch["attention_mask"]
            n = keep.shape[1]
            if mode == "official":
                mask = keep
                unpadded = bool(keep.all())
                kinds["bidirectional" if unpadded and n < window else "causal"] += 1
            else:
                mask = keep.bool()[:, None, None, :].expand(-1, 1, n, n)
            pool_mask = keep.clone()
            pool_mask[:, :skip] = 0
            with torch.inference_mode():
                hidden = model(input_ids=batch["input_ids"], attention_mask=mask).last_hidden_state
                out.append(latent(hidden, pool_mask).numpy())
        return np.concatenate(out), kinds

    # The official run's two kinds of batch really differ: an unpadded batch is bidirectional
    # (the first token's state depends on the last), a padded one causal.
    ids = tok(["alpha beta gamma delta"], return_tensors="pt")["input_ids"]
    changed = ids.clone()
    changed[0, -1] = 1000
    with torch.inference_mode():
        first = lambda i: model(input_ids=i, attention_mask=torch.ones_like(i)).last_hidden_state[0, 0]
        assert not torch.allclose(first(ids), first(changed)), "an unpadded batch ran causally"
        padded = lambda i: model(input_ids=torch.cat([i, torch.zeros_like(i[:, :1])], 1),
                                 attention_mask=torch.cat([torch.ones_like(i), torch.zeros_like(i[:, :1])], 1)).last_hidden_state[0, 0]
        assert torch.allclose(padded(ids), padded(changed)), "a padded batch ran bidirectionally"
    bos = tok("x")["input_ids"][0]
    assert bos == tok.convert_tokens_to_ids(tok.bos_token), "the tokenizer prepends no BOS"
    digests = {
        "documents": [digest(batch_of([t], "")["input_ids"][0].tolist()) for t in docs],
        "queries": [digest(batch_of([t], NV_INSTRUCTION)["input_ids"][0].tolist()) for t in queries],
    }
    entries = {}
    for mode in ["official", "bidirectional"]:
        d, dk = encode(docs, "", mode)
        q, qk = encode(queries, NV_INSTRUCTION, mode)
        entries[f"test-nv-embed/{mode}"] = {
            "attention": mode,
            "query_prompt": NV_INSTRUCTION,
            "instruction_tokens": len(tok.tokenize(NV_INSTRUCTION)),
            "sliding_window": window,
            "batch_size": NV_BATCH,
            "batches": {"documents": dk, "queries": qk} if mode == "official" else None,
            "tokens": digests,
            "documents": vectors(d),
            "queries": vectors(q),
        }
    official = entries["test-nv-embed/official"]["batches"]["documents"]
    assert official["bidirectional"] > 0 and official["causal"] > 0, official
    return entries


def jina(docs, queries, task):
    from peft import PeftModel
    from sentence_transformers import SentenceTransformer

    path = MODELS / "test-jina-v5"
    st = SentenceTransformer(str(path), device="cpu")
    st.max_seq_length = MAX_LENGTH
    plain = st.encode_document(docs, batch_size=BATCH, convert_to_numpy=True)
    base = st[0].auto_model
    merged = PeftModel.from_pretrained(base, str(path / "adapters" / task)).merge_and_unload()
    st[0].auto_model = merged
    d, q = st_encode(st, docs, queries)
    # The adapter moves every vector: the test fails if it is not merged.
    moved = float(max((plain * d).sum(1)))
    assert moved < 0.995, f"{task}: the adapter hardly changes the vectors (cosine {moved})"
    prompt = st.prompts["query"]
    return {
        "task": task,
        "closest_cosine_to_the_base_model": moved,
        "query_prompt": prompt,
        "document_prompt": st.prompts["document"],
        "tokens": {
            "documents": token_digests(st, docs, st.prompts["document"]),
            "queries": token_digests(st, queries, prompt),
        },
        "documents": vectors(d),
        "queries": vectors(q),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    sample = Path(args.sample)
    skills = [json.loads(l) for l in (sample / "skills/test.jsonl").read_text().splitlines() if l.strip()][:SKILLS]
    queries = [json.loads(l) for l in (sample / "queries/test.jsonl").read_text().splitlines() if l.strip()]
    docs = [skill_text(s) for s in skills]
    qs = [q["query"] for q in queries]
    models = {
        "test-gemma3-embedding": gemma3("test-gemma3-embedding", docs, qs),
        "test-gemma3-bidirectional": gemma3("test-gemma3-bidirectional", docs, qs),
        "test-pplx-embedding": pplx(docs, qs),
        "test-jina-v5/retrieval": jina(docs, qs, "retrieval"),
        "test-jina-v5/text-matching": jina(docs, qs, "text-matching"),
        "test-mistral-embedding": mistral(docs, qs),
        **nv_embed(docs, qs),
    }
    longest = max(m["tokens"]["documents"][i]["len"] for m in models.values() for i in range(SKILLS))
    fixture = {
        "tool": "sentence-transformers / transformers / peft (PyTorch), float32 on the CPU",
        "sentence_transformers": metadata.version("sentence-transformers"),
        "transformers": metadata.version("transformers"),
        "peft": metadata.version("peft"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "command": "python3 scripts/make_registry_fixture.py",
        "max_length": MAX_LENGTH,
        "longest_document_tokens": longest,
        "document_ids": [s["id"] for s in skills],
        "query_ids": [q["id"] for q in queries],
        "models": models,
    }
    OUT.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"{OUT}: {len(models)} models, documents up to {longest} tokens")


if __name__ == "__main__":
    main()
