#!/usr/bin/env python3
"""Benchmark the decoder embedders (Qwen3, Gemma3) against PyTorch (sentence-transformers), side by side.

--arch qwen3 (default): a Qwen3-0.6B-shape model (Qwen3-Embedding-0.6B's published config: hidden 1024, 28 layers,
16 query / 8 key-value heads of 128, feed-forward 3072, vocabulary 151,669, tied embeddings;
RANDOM weights, seeded: speed does not depend on the values) is built once with transformers
into .cache/bench/qwen3-0.6b-random (bf16 safetensors, the real Qwen3 tokenizer with
Qwen3-Embedding's EOS template and sentence-transformers files: last-token pooling, normalised).

--arch gemma3: a gemma-3-270m-shape Gemma3TextModel (harrier-oss-v1-270m's backbone: hidden
640, 18 layers, 4 query / 1 key-value heads of 256, feed-forward 2048, query_pre_attn_scalar
256, sliding window 512 on five layers of six, RoPE bases 10,000 / 1,000,000; the vocabulary cut
to the Qwen3 tokenizer's 151,669, since the Gemma tokenizer is not reachable here), RANDOM
weights, into .cache/bench/gemma3-270m-random with models/test-gemma3-embedding's tokenizer and
module files (last token, normalised).

The CPU's own bf16/f32 rate is measured first (PyTorch 2048² products, f32 and bf16; oneDNN uses
`vdpbf16ps` where the CPU has AVX-512 BF16), since it differs between machines of this kind.

For each length (default 512 and 4,096 tokens) the same sample skills (official text recipe),
each at least that long so every input is exactly that many tokens (no padding on either side),
are embedded by:
  - PyTorch f32 and PyTorch bf16: sentence-transformers 6.2 `encode_document` (batch of
    --batch-tokens tokens), model loading not timed;
  - ours f32 and ours bf16: `pipeline embed` (its own "embedded ... in X s" line: tokenisation
    and inference, model loading not timed).
PyTorch runs in its fast mode (scripts/bench_anchor.py: tcmalloc, else glibc's malloc tuned; its glibc malloc
as it is pays millions of page faults a pass and was bimodal): each PyTorch model makes one untimed pass
first, then runs alternate, --repeat times (default 3); the best of each is reported as tokens/s, with the ratio to
PyTorch f32 and the worst cosine to PyTorch f32's vectors. 2 threads on both sides.

    cargo build --release -p pipeline && scripts/fetch-models.sh qwen3-tokenizer
    python3 scripts/make_qwen3_models.py      # the tokenizer template and module files
    pip install sentence-transformers==6.2.0 transformers==5.24.0 torch==2.15.0
    apt-get install libtcmalloc-minimal4     # PyTorch's fast mode (else glibc tunables)
    python3 scripts/bench_qwen3.py [--arch qwen3|gemma3] [--lengths 512,4096] [--tokens 16384] [--repeat 3]
        [--sides torch-f32,ours-f32,ours-int8] [--before OTHER_PIPELINE_BINARY]

Sides are torch-f32, torch-bf16 and ours-<f32|bf16|int8>; with --before, each ours side is also run
by the other binary (before-<precision>), alternating with the rest.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

import bench_anchor

ROOT = Path(__file__).resolve().parent.parent
GEMMA3_SHAPE = dict(
    vocab_size=151669,
    hidden_size=640,
    intermediate_size=2048,
    num_hidden_layers=18,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=256,
    query_pre_attn_scalar=256,
    sliding_window=512,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
    },
    layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)],
    tie_word_embeddings=True,
)
SHAPE = dict(
    vocab_size=151669,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
)


def skill_text(skill):
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    return f"{(skill.get('name') or '').strip()} | {(skill.get('description') or '').strip()} | {(body or '').strip()}"


def build_model(path, arch):
    """The random checkpoint of `arch`'s shape, with its TEST embedder's tokenizer and module files."""
    import torch

    if (path / "model.safetensors").exists():
        return
    template = ROOT / ("models/test-gemma3-embedding" if arch == "gemma3" else "models/test-qwen3-embedding")
    if not (template / "tokenizer.json").exists():
        sys.exit(f"{template}: missing; run python3 scripts/make_qwen3_models.py and scripts/make_registry_models.py")
    torch.manual_seed(0)
    if arch == "gemma3":
        from transformers import Gemma3TextConfig, Gemma3TextModel

        shape = GEMMA3_SHAPE
        model = Gemma3TextModel(Gemma3TextConfig(**shape))
        with torch.no_grad():
            # transformers initialises the (1 + w) norms at w = 0; draw them as trained ones are.
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.normal_(0.0, 0.2)
    else:
        from transformers import Qwen3Config, Qwen3Model

        shape = SHAPE
        model = Qwen3Model(Qwen3Config(**shape))
    model = model.to(torch.bfloat16)
    tmp = path.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for name in ["tokenizer.json", "tokenizer_config.json", "modules.json", "sentence_bert_config.json",
                 "config_sentence_transformers.json", "2_Normalize/config.json"]:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template / name, tmp / name)
    pooling = json.loads((template / "1_Pooling/config.json").read_text())
    pooling["embedding_dimension"] = shape["hidden_size"]
    (tmp / "1_Pooling").mkdir(exist_ok=True)
    (tmp / "1_Pooling/config.json").write_text(json.dumps(pooling, indent=4))
    tmp.rename(path)
    print(f"built {path}", file=sys.stderr)


def peak_ratio(torch):
    """PyTorch's 2048² product rate in f32 and bf16 on this CPU, GFLOP/s."""
    rates = {}
    for dtype in [torch.float32, torch.bfloat16]:
        a = torch.randn(2048, 2048, dtype=dtype)
        b = torch.randn(2048, 2048, dtype=dtype)
        a @ b
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        rates[str(dtype).split(".")[1]] = 2 * 2048**3 / best / 1e9
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", choices=["qwen3", "gemma3"], default="qwen3")
    ap.add_argument("--lengths", default="512,4096")
    ap.add_argument("--tokens", type=int, default=16384, help="tokens per length and side")
    ap.add_argument("--batch-tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of alternating runs (best of these; PyTorch warmed up first)")
    ap.add_argument("--torch-allocator", choices=bench_anchor.MODES, default="auto",
                    help="PyTorch's allocator (see scripts/bench_anchor.py): auto = tcmalloc where installed, else "
                         "glibc-tuned; glibc = as it is (slow and history-dependent)")
    ap.add_argument("--sides", default="torch-f32,torch-bf16,ours-f32,ours-bf16")
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    ap.add_argument("--before", help="another build of `pipeline`: a before-<precision> side beside each ours-<precision>")
    ap.add_argument("--model-dir", help="default: .cache/bench/qwen3-0.6b-random or gemma3-270m-random")
    args = ap.parse_args()
    if args.model_dir is None:
        name = "gemma3-270m-random" if args.arch == "gemma3" else "qwen3-0.6b-random"
        args.model_dir = str(ROOT / ".cache/bench" / name)

    allocator = bench_anchor.fast_allocator(args.torch_allocator)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    binary = ROOT / "target/release/pipeline"
    if not binary.exists():
        sys.exit(f"{binary} not found: run cargo build --release -p pipeline")
    model_dir = Path(args.model_dir)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    build_model(model_dir, args.arch)
    sides = args.sides.split(",")
    if args.before:
        sides += [s.replace("ours-", "before-") for s in sides if s.startswith("ours-")]
    models = {}
    if "torch-f32" in sides or True:  # the reference vectors come from it
        models["torch-f32"] = SentenceTransformer(str(model_dir), device="cpu", model_kwargs={"dtype": torch.float32})
    if "torch-bf16" in sides:
        models["torch-bf16"] = SentenceTransformer(str(model_dir), device="cpu", model_kwargs={"dtype": torch.bfloat16})
    tokenizer = models["torch-f32"].tokenizer
    skills = [json.loads(l) for l in open(Path(args.sample) / "skills/test.jsonl") if l.strip()]
    texts_all = [skill_text(s) for s in skills]
    lengths_all = [len(ids) for ids in tokenizer(texts_all, add_special_tokens=True)["input_ids"]]
    rates = peak_ratio(torch)
    flags = set(open("/proc/cpuinfo").read().split())
    print(f"CPU: {', '.join(f for f in ['avx2', 'avx512f', 'avx512_bf16', 'avx512_vnni', 'amx_bf16'] if f in flags)}; "
          f"PyTorch 2048² f32 {rates['float32']:.0f} GFLOP/s, bf16 {rates['bfloat16']:.0f} GFLOP/s "
          f"(bf16/f32 {rates['bfloat16'] / rates['float32']:.2f})")
    shape_name = "gemma-3-270m shape" if args.arch == "gemma3" else "Qwen3-0.6B shape"
    print(f"{shape_name} (random weights), {args.threads} threads; sentence-transformers "
          f"{metadata.version('sentence-transformers')}, transformers {metadata.version('transformers')}, "
          f"torch {torch.__version__}; best of {args.repeat}, runs alternating, PyTorch warmed up (one untimed "
          f"pass of each model); PyTorch's allocator: {allocator}\n")
    rows = []
    for length in [int(x) for x in args.lengths.split(",")]:
        count = max(1, args.tokens // length)
        texts = [t for t, n in zip(texts_all, lengths_all) if n >= length][:count]
        if len(texts) < count:
            sys.exit(f"only {len(texts)} sample skills have {length} tokens")
        tokens = len(texts) * length
        batch = max(1, args.batch_tokens // length)
        with tempfile.TemporaryDirectory() as tmp:
            inp = Path(tmp) / "in.jsonl"
            inp.write_text("".join(json.dumps(t) + "\n" for t in texts))

            def torch_pass(st):
                st.max_seq_length = length
                return None, st.encode_document(texts, batch_size=batch, convert_to_numpy=True).astype(np.float32)

            def ours_pass(side):
                out = Path(tmp) / f"{side}.jsonl"
                precision = side.split("-")[1]
                exe = binary if side.startswith("ours") else Path(args.before)
                cmd = [str(exe), "embed", "--model", str(model_dir), "--input", str(inp),
                       "--output", str(out), "--max-length", str(length), "--precision", precision,
                       "--batch-tokens", str(args.batch_tokens)]
                proc = subprocess.run(cmd, check=True, capture_output=True, text=True, env=bench_anchor.ours_env())
                m = re.search(r"embedded \d+ texts \((\d+) tokens\) in ([0-9.]+) s", proc.stderr)
                if not m or int(m.group(1)) != tokens:
                    sys.exit(f"unexpected pipeline output: {proc.stderr}")
                return float(m.group(2)), np.array([json.loads(l) for l in out.read_text().splitlines()],
                                                   dtype=np.float32)

            passes = {side: (lambda st=models[side]: torch_pass(st)) if side.startswith("torch")
                      else (lambda side=side: ours_pass(side)) for side in sides}
            results = bench_anchor.alternate(passes, args.repeat, warm=[s for s in sides if s.startswith("torch")])
        times = {side: ts for side, (_, ts, _) in results.items()}
        vectors = {side: v for side, (_, _, v) in results.items()}
        reference = vectors["torch-f32"] if "torch-f32" in vectors else None
        base = min(times["torch-f32"]) if "torch-f32" in times else None
        print(f"{length} tokens: {len(texts)} skills, {tokens} tokens, batches of {batch}")
        print(f"  {'side':<11} {'tokens/s':>9} {'seconds':>8} {'× torch f32':>12} {'worst cosine':>13}")
        for side in sides:
            best = min(times[side])
            cos = ""
            if reference is not None and side in vectors:
                v = vectors[side]
                c = np.sum(v * reference, axis=1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(reference, axis=1))
                cos = f"{c.min():.6f}"
            ratio = f"{base / best:.2f}x" if base else ""
            print(f"  {side:<11} {tokens / best:9.1f} {best:8.2f} {ratio:>12} {cos:>13}")
            rows.append((length, side, tokens / best))
        print()


if __name__ == "__main__":
    main()
