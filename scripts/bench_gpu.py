#!/usr/bin/env python3
"""Ours on CUDA (`pipeline --backend cuda`) against sentence-transformers / transformers on one NVIDIA GPU.

Runs unattended on a machine with an NVIDIA GPU, PyTorch, transformers and sentence-transformers
and no network, from the folder scripts/gpu-payload.sh packs (the stripped `--features
cuda,flash-attn` binary, optionally a "before" binary, the real tokenizers and module files this
project fetches, the SkillRet sample texts):

    scripts/build-cuda.sh && scripts/gpu-payload.sh [--before OLD_BINARY]   # here
    bash .cache/gpu-payload/run.sh OUT [--budget 540] [--before]            # there: the folder alone
    python3 scripts/bench_gpu.py --out OUT [--before]                       # there: in a checkout

Models are built there in the real shapes with RANDOM, seeded weights (transformers' classes on
the GPU; linear weights N(0, 1/fan_in), norms and biases perturbed, so that every layer matters;
speed and parity do not need real weights): MiniLM (all-MiniLM-L6-v2), bge-large (bge-large-en-v1.5:
CLS), Qwen3-0.6B (Qwen3-Embedding-0.6B: last token) and Qwen3-8B in bf16, gemma-3-270m
(harrier-oss-v1-270m's backbone, the vocabulary cut to the Qwen3 tokenizer's), jina-reranker-v2's
XLM-R base shape (a one-label classifier) and Qwen3-Reranker-0.6B (yes/no, the official template).
Each is measured on the same texts (sample skills, official recipe, concatenated and cut to
exactly L tokens) at 512, 4,096, 16,384 and 32,768 tokens where its positions allow:

- parity: the worst cosine of ours to sentence-transformers in the same dtype (bf16 against its
  bf16 / fp16, f32 against its f32), or the largest |ΔP(yes)| / |Δlogit| for rerankers;
- speed: tokens/s of both, each the timed part only (tokenisation and inference; model loading
  and, for PyTorch, one warm-up batch left out; ours after a warm run), and the ratio;
- memory: the peak of each process's GPU memory as nvidia-smi reports it (polled every 50 ms),
  both sides in a process of their own for the 16k point, and the allocator's own peak for PyTorch;
- first call: the wall time of a small `pipeline embed` with an empty driver JIT cache
  (CUDA_CACHE_PATH) against the same with the cache filled.

With SKILLRET_PROFILE=1 in the environment, ours prints where its time goes stage by stage
(synchronised), and each row keeps those lines.

Work goes in order of what matters most and stops at --budget seconds (each result is written as
it comes: OUT/bench_gpu.json, and the table OUT/bench_gpu.md). CUDA's libraries for our binary
come from the machine's PyTorch install (every site-packages/nvidia/*/lib, put on
LD_LIBRARY_PATH); the driver's libcuda.so.1 from the system.

Also runs on a CPU-only machine as a smoke test of the script itself (--device cpu: ours with
--backend candle, tiny shapes, short lengths).
"""

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START = time.monotonic()

QWEN3_06B = dict(
    vocab_size=151669, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
    num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
)
QWEN3_8B = dict(
    QWEN3_06B, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
    num_attention_heads=32, num_key_value_heads=8, tie_word_embeddings=False,
)
GEMMA3_270M = dict(
    vocab_size=151669, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
    num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
    sliding_window=512, max_position_embeddings=32768, rms_norm_eps=1e-6,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
    },
    layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)],
    tie_word_embeddings=True,
)
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2)
BGE_LARGE = dict(MINILM, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                 intermediate_size=4096)
XLMR_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=1026, type_vocab_size=1,
                 pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=1)
# Tiny shapes for --device cpu (the script's own smoke test).
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)

RERANK_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and "
                 "the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
                 "<|im_start|>user\n")
RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
RERANK_INSTRUCTION = "Given a skill search query, judge whether the skill document is relevant and useful for the query"


def elapsed():
    return time.monotonic() - START


def log(*a):
    print(f"[{elapsed():6.1f}s]", *a, file=sys.stderr, flush=True)


class Results:
    """Results written as they come (JSON and a Markdown table)."""

    def __init__(self, out):
        self.out = out
        self.data = {"machine": {}, "rows": [], "first_call": [], "skipped": [], "errors": []}

    def save(self):
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "bench_gpu.json").write_text(json.dumps(self.data, indent=1) + "\n")
        (self.out / "bench_gpu.md").write_text(table(self.data))

    def add(self, key, value):
        self.data[key].append(value)
        self.save()


def fmt(x, digits=0):
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def table(d):
    m = d["machine"]
    lines = [
        f"GPU: {m.get('gpu', '?')}, driver {m.get('driver', '?')}; torch {m.get('torch', '?')}, "
        f"transformers {m.get('transformers', '?')}, sentence-transformers {m.get('sentence_transformers', '?')}",
        "",
        "| model | tokens | dtype | theirs | theirs tok/s | ours | ours tok/s | ratio | worst cos / max Δ | "
        "peak MiB ours / theirs (nvidia-smi) |",
        "|---|---:|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in d["rows"]:
        parity = r.get("worst_cosine")
        parity = f"{parity:.6f}" if parity is not None else (
            f"{r['max_delta']:.2e}" if r.get("max_delta") is not None else "–")
        mem = f"{fmt(r.get('peak_mib_ours'))} / {fmt(r.get('peak_mib_theirs'))}" if r.get("peak_mib_ours") else "–"
        lines.append(
            f"| {r['model']} | {fmt(r['length'])} | {r['dtype']} | {r.get('theirs', '–')} | "
            f"{fmt(r.get('theirs_tps'))} | {r['ours']} | {fmt(r.get('ours_tps'))} | "
            f"{fmt(r.get('ratio'), 2)} | {parity} | {mem} |")
    if d["first_call"]:
        lines += ["", "| binary | first call, empty JIT cache (s) | again, cache filled (s) |", "|---|---:|---:|"]
        for f in d["first_call"]:
            lines.append(f"| {f['binary']} | {fmt(f['cold_s'], 1)} | {fmt(f['warm_s'], 1)} |")
    if d["skipped"]:
        lines += ["", "Skipped (budget): " + ", ".join(d["skipped"])]
    if d["errors"]:
        lines += ["", "Errors:"] + [f"- {e}" for e in d["errors"]]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Payload, libraries, machine


def unpack(payload, work):
    """The payload's folder (payload.tar.xz, as scripts/gpu-payload.sh packs it, is unpacked into
    `work`; a folder is taken as it is)."""
    if payload.is_file():
        with tarfile.open(payload) as t:
            t.extractall(work, filter="data")
        payload = work / "gpu-payload"
    for binary in payload.glob("bin/*"):
        binary.chmod(0o755)
    return payload


def library_path():
    """Every site-packages/nvidia/*/lib of this Python (PyTorch's CUDA wheels)."""
    import site
    dirs = []
    for base in site.getsitepackages() + [site.getusersitepackages()]:
        dirs += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib")))
        dirs += sorted(glob.glob(os.path.join(base, "nvidia", "*", "*", "lib")))
    return ":".join(dirs + [os.environ.get("LD_LIBRARY_PATH", "")]).strip(":")


def machine(device):
    import torch
    import transformers
    import sentence_transformers
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "sentence_transformers": sentence_transformers.__version__, "device": device}
    if device == "cuda":
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        name, driver, memory = [x.strip() for x in out.splitlines()[0].split(",")]
        info.update(gpu=name, driver=driver, memory=memory,
                    capability=".".join(map(str, torch.cuda.get_device_capability())))
    else:
        info.update(gpu="none (CPU smoke test)", driver="–")
    return info


def gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout.split()
    return int(out[0]) if out and out[0].isdigit() else 0


class Peak:
    """The peak GPU memory of one process, polled with nvidia-smi: its own line where nvidia-smi
    lists it (`--query-compute-apps`; in a container the process ids may not match), else the
    device's used memory above what it was when the process started (one process runs at a time)."""

    def __init__(self, pid, enabled):
        self.pid, self.own, self.total, self.stop = pid, 0, 0, threading.Event()
        self.baseline = gpu_used_mib() if enabled else 0
        self.thread = threading.Thread(target=self.run, daemon=True) if enabled else None
        if self.thread:
            self.thread.start()

    def run(self):
        while not self.stop.is_set():
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                  "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 2 and parts[0] == str(self.pid) and parts[1].isdigit():
                    self.own = max(self.own, int(parts[1]))
            self.total = max(self.total, gpu_used_mib() - self.baseline)
            self.stop.wait(0.05)

    def finish(self):
        self.stop.set()
        if self.thread:
            self.thread.join()
        return self.own or self.total or None


# ---------------------------------------------------------------------------------------------
# Models


def perturb(model, seed):
    """Random weights that make every layer matter: linear N(0, 1/fan_in), embeddings N(0, 1/√h)·…,
    norms 1 + N(0, 0.05) (Gemma's `1 + w`: N(0, 0.05)), biases N(0, 0.02)."""
    import torch
    g = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.empty(p.shape, dtype=torch.float32, device=p.device)
            if p.dim() == 2:
                noise.normal_(0.0, p.shape[1] ** -0.5, generator=g)
            elif name.endswith("bias"):
                noise.normal_(0.0, 0.02, generator=g)
            else:
                base = 0.0 if "gemma" in type(model).__name__.lower() else 1.0
                noise.normal_(base, 0.05, generator=g)
            p.copy_(noise.to(p.dtype))


def copy_files(src, out, skip=("config.json", "README.md")):
    """The tokenizer and module files of `src` (not its top-level config.json, which the real
    shape replaces, nor weights)."""
    for f in src.rglob("*"):
        top = f.parent == src and f.name in skip
        if f.is_file() and not top and not f.name.endswith((".safetensors", ".bin")):
            target = out / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, target)


def build(name, spec, payload, models, device, tiny):
    """Builds the model `name` into models/name (once)."""
    import torch
    out = models / name
    if (out / "config.json").exists():
        return out
    log(f"building {name}")
    kind, shape, files, seed = spec["kind"], dict(spec["shape"]), payload / "files" / spec["files"], spec["seed"]
    if tiny:
        shape.update(TINY)
        if "head_dim" in shape:
            shape["head_dim"] = 16
        if "num_key_value_heads" in shape:
            shape["num_key_value_heads"] = min(shape["num_key_value_heads"], 2)
        if "query_pre_attn_scalar" in shape:
            shape["query_pre_attn_scalar"] = 16
        if "layer_types" in shape:
            shape["layer_types"] = shape["layer_types"][:2]
    dtype = torch.bfloat16 if spec.get("bf16") and device == "cuda" else torch.float32
    import transformers as tf
    if kind == "bert":
        config, cls = tf.BertConfig(**shape), tf.BertModel
    elif kind == "xlmr":
        vocab = json.loads((files / "config.json").read_text())["vocab_size"]
        config, cls = tf.XLMRobertaConfig(vocab_size=vocab, **shape), tf.XLMRobertaForSequenceClassification
    elif kind == "qwen3":
        config, cls = tf.Qwen3Config(**shape), tf.Qwen3Model
    elif kind == "qwen3-lm":
        config, cls = tf.Qwen3Config(**shape), tf.Qwen3ForCausalLM
    elif kind == "gemma3":
        config, cls = tf.Gemma3TextConfig(**shape), tf.Gemma3TextModel
    else:
        raise ValueError(kind)
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(config, dtype=dtype)
    perturb(model, seed)
    model.save_pretrained(out, safe_serialization=True)
    copy_files(files, out)
    pooling = out / "1_Pooling" / "config.json"
    if pooling.exists():
        p = json.loads(pooling.read_text())
        for key in ("embedding_dimension", "word_embedding_dimension"):
            if key in p:
                p[key] = shape["hidden_size"]
        if spec.get("pooling") == "cls":
            for key in list(p):
                if key.startswith("pooling_mode_"):
                    p[key] = key == "pooling_mode_cls_token"
            if "pooling_mode" in p:
                p["pooling_mode"] = "cls"
        pooling.write_text(json.dumps(p, indent=4) + "\n")
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


SPECS = {
    "minilm": dict(kind="bert", shape=MINILM, files="minilm", seed=1),
    "bge-large": dict(kind="bert", shape=BGE_LARGE, files="minilm", pooling="cls", seed=2),
    "qwen3-0.6b": dict(kind="qwen3", shape=QWEN3_06B, files="qwen3-embedding", bf16=True, seed=3),
    "qwen3-8b": dict(kind="qwen3", shape=QWEN3_8B, files="qwen3-embedding", bf16=True, seed=4),
    "gemma3-270m": dict(kind="gemma3", shape=GEMMA3_270M, files="gemma3-embedding", bf16=True, seed=5),
    "jina-reranker-v2": dict(kind="xlmr", shape=XLMR_BASE, files="xlmr-cross-encoder", seed=6),
    "qwen3-reranker-0.6b": dict(kind="qwen3-lm", shape=QWEN3_06B, files="qwen3-reranker", bf16=True, seed=7),
}


# ---------------------------------------------------------------------------------------------
# Texts


def sample(payload):
    skills = [json.loads(l) for l in (payload / "sample" / "skills" / "test.jsonl").read_text().splitlines() if l.strip()]
    queries = [json.loads(l) for l in (payload / "sample" / "queries" / "test.jsonl").read_text().splitlines() if l.strip()]
    return skills, queries


def skill_text(s):
    body = s.get("skill_md") or s.get("description") or ""
    return f"{s.get('name', '')} | {s.get('description', '')} | {body}"


def long_texts(skills, n, length):
    """n texts, each several sample skills joined, long enough to be cut at `length` tokens."""
    chars = max(2000, length * 8)
    texts, i = [], 0
    for _ in range(n):
        parts, size = [], 0
        while size < chars:
            t = skill_text(skills[i % len(skills)])
            parts.append(t)
            size += len(t)
            i += 1
        texts.append("\n\n".join(parts))
    return texts


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


# ---------------------------------------------------------------------------------------------
# Ours


def ours(binary, args, env, measure_memory, timeout=300):
    """Runs `pipeline` with `args`; returns its stderr, exit status, peak memory and wall time."""
    started = time.monotonic()
    proc = subprocess.Popen([str(binary)] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    peak = Peak(proc.pid, measure_memory)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\n(timed out after {timeout} s)"
    return dict(stderr=err, rc=proc.returncode, peak_mib=peak.finish(), wall_s=time.monotonic() - started)


def ours_embed(binary, model, texts_file, length, dtype, kernel, batch_tokens, work, env, backend,
               measure_memory=False, tag=""):
    output = work / f"ours-{model.name}-{length}-{dtype}-{kernel}{tag}.jsonl"
    args = ["embed", "--model", model, "--input", texts_file, "--output", output, "--backend", backend,
            "--precision", dtype, "--max-length", length, "--batch-tokens", batch_tokens]
    if kernel:
        args += ["--attention-kernel", kernel]
    r = ours(binary, args, env, measure_memory)
    m = re.search(r"embedded (\d+) texts \((\d+) tokens\) in ([0-9.]+) s", r["stderr"])
    if r["rc"] != 0 or not m:
        raise RuntimeError(f"{binary.name} embed {model.name} {length} {dtype} {kernel}: rc {r['rc']}: {r['stderr'][-1500:]}")
    device = re.search(r"on ((?:cuda|cpu)[^\n]*)", r["stderr"])
    import numpy as np
    vectors = np.array([json.loads(l) for l in output.read_text().splitlines()], dtype=np.float64)
    return dict(seconds=float(m.group(3)), tokens=int(m.group(2)), vectors=vectors, peak_mib=r["peak_mib"],
                device=device.group(1) if device else "?", wall_s=r["wall_s"], profile=profile(r["stderr"]))


def profile(stderr):
    """The stage totals ours prints under SKILLRET_PROFILE=1."""
    return [l.strip() for l in stderr.splitlines() if l.startswith("profile:")]


# ---------------------------------------------------------------------------------------------
# Theirs


def st_encode(model_dir, texts, length, dtype, batch, device):
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    st = SentenceTransformer(str(model_dir), device=device,
                             model_kwargs={"dtype": torch_dtype, "attn_implementation": "sdpa"})
    st.max_seq_length = length
    st.encode_document(texts[:batch], batch_size=batch)
    sync(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    v = st.encode_document(texts, batch_size=batch, convert_to_numpy=True)
    sync(device)
    seconds = time.perf_counter() - t
    allocated = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    del st
    if device == "cuda":
        torch.cuda.empty_cache()
    return dict(vectors=np.asarray(v, dtype=np.float64), seconds=seconds, allocated_mib=allocated)


def sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def worst_cosine(a, b):
    import numpy as np
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float((a * b).sum(axis=1).min())


def st_worker(argv):
    """`--st-worker JSON`: one sentence-transformers encode in a process of its own (its memory
    measured from outside); prints the result as JSON."""
    job = json.loads(argv)
    texts = json.loads(Path(job["texts"]).read_text())
    r = st_encode(Path(job["model"]), texts, job["length"], job["dtype"], job["batch"], job["device"])
    print(json.dumps({"seconds": r["seconds"], "allocated_mib": r["allocated_mib"]}))


# ---------------------------------------------------------------------------------------------
# Rerankers (theirs)


def timed(run, pairs, batch, device):
    """`run` over `pairs` in batches, after one warm-up batch: scores, seconds, tokens."""
    run(pairs[:batch])
    sync(device)
    t = time.perf_counter()
    scores, tokens = [], 0
    for i in range(0, len(pairs), batch):
        s, n = run(pairs[i:i + batch])
        scores += s
        tokens += n
    sync(device)
    return scores, time.perf_counter() - t, tokens


def yes_no_scores(model_dir, pairs, dtype, device, max_length, batch):
    """The official Qwen3RankModel scoring: template, content truncated on the right, left padding,
    softmax over the (no, yes) logits of the last position → P(yes)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    tok = AutoTokenizer.from_pretrained(str(model_dir), padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype,
                                                 attn_implementation="sdpa").to(device).eval()
    prefix = tok.encode(RERANK_PREFIX, add_special_tokens=False)
    suffix = tok.encode(RERANK_SUFFIX, add_special_tokens=False)
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")

    def run(chunk):
        contents = [f"<Instruct>: {RERANK_INSTRUCTION}\n<Query>: {q}\n<Document>: {d}" for q, d in chunk]
        enc = tok(contents, padding=False, truncation="longest_first", return_attention_mask=False,
                  max_length=max_length - len(prefix) - len(suffix), add_special_tokens=False)
        ids = [prefix + x + suffix for x in enc["input_ids"]]
        batch_enc = tok.pad({"input_ids": ids}, padding=True, return_tensors="pt").to(device)
        with torch.no_grad():
            logits = model(**batch_enc).logits[:, -1, :]
        pair = torch.stack([logits[:, no], logits[:, yes]], dim=1).float()
        return torch.softmax(pair, dim=1)[:, 1].tolist(), sum(len(x) for x in ids)

    return timed(run, pairs, batch, device)


def cross_encoder_scores(model_dir, pairs, dtype, device, max_length, batch):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(
        str(model_dir), dtype=torch_dtype, attn_implementation="sdpa").to(device).eval()

    def run(chunk):
        enc = tok([q for q, _ in chunk], [d for _, d in chunk], padding=True, truncation="longest_first",
                  max_length=max_length, return_tensors="pt").to(device)
        with torch.no_grad():
            return model(**enc).logits[:, 0].float().tolist(), int(enc["attention_mask"].sum())

    return timed(run, pairs, batch, device)


# ---------------------------------------------------------------------------------------------
# The plan


class Bench:
    def __init__(self, args):
        self.args = args
        self.device = args.device
        self.backend = "cuda" if self.device == "cuda" else "candle"
        self.tiny = self.device != "cuda"
        self.work = Path(tempfile.mkdtemp(prefix="bench-gpu-", dir=args.work))
        self.payload = unpack(Path(args.payload), self.work)
        self.models = self.work / "models"
        self.results = Results(Path(args.out))
        self.env = dict(os.environ, LD_LIBRARY_PATH=library_path(), RUST_LOG="warn")
        bins = self.payload / "bin"
        self.binary = bins / "pipeline"
        self.before = bins / "pipeline-before" if (bins / "pipeline-before").exists() and args.before else None
        if args.binary:
            self.binary = Path(args.binary)
        self.skills, self.queries = sample(self.payload)
        self.reference_scores = {}

    def left(self):
        return self.args.budget - elapsed()

    def step(self, name, need, fn):
        """Runs one item if `need` seconds are left; records errors and goes on."""
        if self.args.only and not any(o in name for o in self.args.only.split(",")):
            return
        if self.left() < need:
            log(f"skip {name}: {self.left():.0f} s left, needs ~{need}")
            self.results.add("skipped", name)
            return
        log(f"{name} ({self.left():.0f} s left)")
        try:
            fn()
        except Exception as e:  # noqa: BLE001 — one failure must not stop the rest
            log(f"error in {name}: {e}")
            self.results.add("errors", f"{name}: {str(e)[-2000:]}")

    def texts(self, length, tokens):
        n = max(1, tokens // length)
        texts = long_texts(self.skills, n, length)
        path = self.work / f"texts-{length}-{n}.jsonl"
        write_jsonl(path, texts)
        return texts, path

    def embed_row(self, name, length, dtype, theirs_dtype, kernel, tokens, batch_seqs, binary=None,
                  memory=False, parity_only=False):
        spec = SPECS[name]
        model = build(name, spec, self.payload, self.models, self.device, self.tiny)
        texts, path = self.texts(length, tokens)
        batch_tokens = batch_seqs * length
        binary = binary or self.binary
        label = "ours" if binary == self.binary else "before"
        # A warm run first (the driver's JIT cache, the page cache).
        ours_embed(binary, model, path, length, dtype, kernel, batch_tokens, self.work, self.env,
                   self.backend, tag="-warm")
        o = ours_embed(binary, model, path, length, dtype, kernel, batch_tokens, self.work, self.env,
                       self.backend, measure_memory=memory and self.device == "cuda")
        theirs = None
        if theirs_dtype:
            theirs = st_encode(model, texts, length, theirs_dtype, batch_seqs, self.device)
        row = dict(model=name, length=length, dtype=dtype, ours=f"{label} {o['device']}",
                   ours_tps=o["tokens"] / o["seconds"], tokens=o["tokens"], ours_s=o["seconds"],
                   peak_mib_ours=o["peak_mib"])
        if o["profile"]:
            row["profile"] = o["profile"]
        if theirs:
            row.update(theirs=f"sentence-transformers {theirs_dtype} (sdpa)",
                       theirs_tps=o["tokens"] / theirs["seconds"], theirs_s=theirs["seconds"],
                       ratio=theirs["seconds"] / o["seconds"],
                       worst_cosine=worst_cosine(o["vectors"], theirs["vectors"]),
                       theirs_allocated_mib=theirs["allocated_mib"])
        if parity_only:
            row.pop("ratio", None)
        self.results.add("rows", row)
        log(json.dumps({k: v for k, v in row.items() if k != "vectors"}))
        return o

    def memory_row(self, name, length, batch_seqs):
        """Both sides in a process of their own, peak by nvidia-smi."""
        spec = SPECS[name]
        model = build(name, spec, self.payload, self.models, self.device, self.tiny)
        texts, path = self.texts(length, length * batch_seqs)
        o = ours_embed(self.binary, model, path, length, "bf16", self.kernel(), length * batch_seqs,
                       self.work, self.env, self.backend, measure_memory=self.device == "cuda", tag="-mem")
        job = self.work / "st-job.json"
        job_texts = self.work / "st-texts.json"
        job_texts.write_text(json.dumps(texts))
        job.write_text(json.dumps(dict(model=str(model), texts=str(job_texts), length=length,
                                       dtype="bf16", batch=batch_seqs, device=self.device)))
        proc = subprocess.Popen([sys.executable, __file__, "--st-worker", job.read_text()],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak = Peak(proc.pid, self.device == "cuda")
        out, err = proc.communicate(timeout=300)
        theirs = json.loads(out.strip().splitlines()[-1]) if proc.returncode == 0 else {}
        row = dict(model=name, length=length, dtype="bf16 (memory)", ours=f"ours {o['device']}",
                   ours_tps=o["tokens"] / o["seconds"], peak_mib_ours=o["peak_mib"],
                   theirs="sentence-transformers bf16 (sdpa), own process",
                   theirs_tps=o["tokens"] / theirs["seconds"] if theirs else None,
                   peak_mib_theirs=peak.finish(), theirs_allocated_mib=theirs.get("allocated_mib"),
                   memory_ratio=None)
        if row["peak_mib_ours"] and row["peak_mib_theirs"]:
            row["memory_ratio"] = row["peak_mib_ours"] / row["peak_mib_theirs"]
        if proc.returncode != 0:
            row["theirs_error"] = err[-1500:]
        self.results.add("rows", row)
        log(json.dumps(row))

    def fit_row(self, name, length):
        """Ours alone: one input of `length` tokens, peak memory (the 24 GB question)."""
        spec = SPECS[name]
        model = build(name, spec, self.payload, self.models, self.device, self.tiny)
        texts, path = self.texts(length, length)
        o = ours_embed(self.binary, model, path, length, "bf16", self.kernel(), length, self.work,
                       self.env, self.backend, measure_memory=self.device == "cuda", tag="-fit")
        row = dict(model=name, length=length, dtype="bf16 (fit)", ours=f"ours {o['device']}",
                   ours_tps=o["tokens"] / o["seconds"], peak_mib_ours=o["peak_mib"])
        self.results.add("rows", row)
        log(json.dumps(row))

    def kernel(self):
        return None if self.device != "cuda" else self.args.kernel

    def first_call(self, binary, label):
        model = build("minilm", SPECS["minilm"], self.payload, self.models, self.device, self.tiny)
        _, path = self.texts(128, 128 * 16)
        times = []
        cache = Path(tempfile.mkdtemp(prefix="jit-", dir=self.work))
        env = dict(self.env, CUDA_CACHE_PATH=str(cache))
        for _ in range(2):
            args = ["embed", "--model", model, "--input", path, "--output", self.work / "first.jsonl",
                    "--backend", self.backend, "--max-length", 128]
            r = ours(binary, args, env, False)
            if r["rc"] != 0:
                raise RuntimeError(f"{label} first call: {r['stderr'][-1500:]}")
            times.append(r["wall_s"])
        self.results.add("first_call", dict(binary=label, cold_s=times[0], warm_s=times[1]))

    def rerank_data(self, n_queries, per_query):
        data = self.work / "rerank-data"
        if not data.exists():
            (data / "skills").mkdir(parents=True)
            (data / "queries").mkdir()
            skills = self.skills[: n_queries * per_query]
            queries = self.queries[:n_queries]
            write_jsonl(data / "skills" / "test.jsonl", skills)
            rows = []
            for i, q in enumerate(queries):
                ids = [s["id"] for s in skills[i * per_query:(i + 1) * per_query]]
                rows.append(dict(q, skill_ids=ids[:1]))
            write_jsonl(data / "queries" / "test.jsonl", rows)
            with open(data / "run.trec", "w") as f:
                for i, q in enumerate(queries):
                    for r, s in enumerate(skills[i * per_query:(i + 1) * per_query]):
                        f.write(f"{q['id']} Q0 {s['id']} {r + 1} {100 - r} first\n")
        pairs, keys = [], []
        for i, q in enumerate(self.queries[:n_queries]):
            for s in self.skills[i * per_query:(i + 1) * per_query]:
                pairs.append((q["query"], skill_text(s)))
                keys.append((q["id"], s["id"]))
        return data, pairs, keys

    def rerank_row(self, name, dtype, theirs_dtype, max_length, batch_pairs, binary=None):
        spec = SPECS[name]
        model = build(name, spec, self.payload, self.models, self.device, self.tiny)
        n_queries = 24 if not self.tiny else 4
        data, pairs, keys = self.rerank_data(n_queries, 20)
        binary = binary or self.binary
        label = "ours" if binary == self.binary else "before"
        output = self.work / f"rerank-{name}-{dtype}.trec"
        args = ["rerank", "--model", model, "--data", data, "--run", data / "run.trec", "--top-n", 20,
                "--output", output, "--backend", self.backend, "--precision", dtype,
                "--max-length", max_length, "--batch-tokens", 16384]
        if self.kernel() and binary == self.binary and dtype == "bf16":
            args += ["--attention-kernel", self.kernel()]
        ours(binary, args, self.env, False)  # warm
        r = ours(binary, args, self.env, False)
        m = re.search(r"reranked (\d+) pairs in ([0-9.]+) s", r["stderr"])
        if r["rc"] != 0 or not m:
            raise RuntimeError(f"rerank {name} {dtype}: rc {r['rc']}: {r['stderr'][-1500:]}")
        seconds = float(m.group(2))
        got = {}
        for line in output.read_text().splitlines():
            q, _, d, _, score, _ = line.split()
            got[(q, d)] = float(score)
        scorer = yes_no_scores if spec["kind"] == "qwen3-lm" else cross_encoder_scores
        theirs, their_seconds, tokens = scorer(model, pairs, theirs_dtype, self.device, max_length,
                                              16 if spec["kind"] == "qwen3-lm" else 32)
        delta = max(abs(got[k] - t) for k, t in zip(keys, theirs))
        # Their own dtype's spread: bf16 against their f32, where that ran first.
        reference = self.reference_scores.get(name)
        if theirs_dtype == "f32":
            self.reference_scores[name] = theirs
        spread = {}
        if reference and theirs_dtype != "f32":
            spread = dict(ours_vs_their_f32=max(abs(got[k] - t) for k, t in zip(keys, reference)),
                          theirs_vs_their_f32=max(abs(a - t) for a, t in zip(theirs, reference)))
        device = re.search(r"on ((?:cuda|cpu)[^\n;]*)", r["stderr"])
        row = dict(model=name, length=f"{len(pairs)} pairs", dtype=dtype,
                   ours=f"{label} {device.group(1) if device else '?'}", ours_s=seconds,
                   ours_tps=tokens / seconds, theirs=f"transformers {theirs_dtype} (sdpa)",
                   theirs_tps=tokens / their_seconds, theirs_s=their_seconds,
                   ratio=their_seconds / seconds, max_delta=delta, **spread)
        self.results.add("rows", row)
        log(json.dumps(row))

    def run(self):
        a = self.args
        self.results.data["machine"] = machine(self.device)
        self.results.data["args"] = {k: str(v) for k, v in vars(a).items()}
        self.results.save()
        log(json.dumps(self.results.data["machine"]))
        k = self.kernel()
        L = (lambda n: n) if not self.tiny else (lambda n: min(n, 256))
        tok = a.tokens if not self.tiny else 2048
        # 1. First call (a fresh machine: the driver's JIT cache is empty), ours then before.
        self.step("first call", 40, lambda: self.first_call(self.binary, "ours"))
        if self.before:
            self.step("first call (before)", 40, lambda: self.first_call(self.before, "before"))
        # 2. Qwen3-0.6B: bf16 speed and parity at each length; f32 parity.
        for length in [512, 4096, 16384]:
            self.step(f"qwen3-0.6b bf16 {length}", 40,
                      lambda length=length: self.embed_row("qwen3-0.6b", L(length), "bf16", "bf16", k, tok,
                                                           max(1, 16384 // length)))
        self.step("qwen3-0.6b bf16 exact 4096", 40,
                  lambda: self.embed_row("qwen3-0.6b", L(4096), "bf16", "bf16", "exact", tok // 2, 4))
        self.step("qwen3-0.6b f32 1024", 40,
                  lambda: self.embed_row("qwen3-0.6b", L(1024), "f32", "f32", "exact", tok // 2, 16))
        # 3. BERT family: bf16 against fp16.
        for name, length in [("minilm", 256), ("bge-large", 512)]:
            self.step(f"{name} bf16 {length}", 30,
                      lambda name=name, length=length: self.embed_row(name, L(length), "bf16", "fp16", k,
                                                                      tok * 2, 64))
        self.step("minilm f32 256", 30, lambda: self.embed_row("minilm", L(256), "f32", "f32", "exact", tok, 64))
        # 4. The yes/no reranker: bf16 speed, f32 parity.
        self.step("qwen3-reranker f32", 60,
                  lambda: self.rerank_row("qwen3-reranker-0.6b", "f32", "f32", L(4096), 16))
        self.step("qwen3-reranker bf16", 50,
                  lambda: self.rerank_row("qwen3-reranker-0.6b", "bf16", "bf16", L(4096), 16))
        # 5. Memory at 16k, both in processes of their own.
        self.step("qwen3-0.6b memory 16384", 60, lambda: self.memory_row("qwen3-0.6b", L(16384), 1))
        # 6. Before (this starting point), on the same texts.
        if self.before:
            for length in [512, 4096]:
                self.step(f"before qwen3-0.6b bf16 {length}", 60,
                          lambda length=length: self.embed_row("qwen3-0.6b", L(length), "bf16", None, None,
                                                               tok // 4, max(1, 16384 // length),
                                                               binary=self.before))
        # 7. The rest of the registry's shapes and lengths.
        self.step("gemma3-270m bf16 4096", 40,
                  lambda: self.embed_row("gemma3-270m", L(4096), "bf16", "bf16", k, tok, 4))
        self.step("jina-reranker-v2 bf16", 40,
                  lambda: self.rerank_row("jina-reranker-v2", "bf16", "bf16", L(1024), 32))
        self.step("qwen3-0.6b bf16 32768", 40,
                  lambda: self.embed_row("qwen3-0.6b", L(32768), "bf16", "bf16", k, L(32768) * 2, 1))
        self.step("qwen3-0.6b fit 32768", 30, lambda: self.fit_row("qwen3-0.6b", L(32768)))
        self.step("qwen3-8b fit 8192", 120, lambda: self.fit_row("qwen3-8b", L(8192)))
        self.step("qwen3-8b bf16 4096", 60,
                  lambda: self.embed_row("qwen3-8b", L(4096), "bf16", "bf16", k, tok // 2, 4))
        self.results.data["seconds"] = elapsed()
        self.results.save()
        print(table(self.results.data))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--st-worker":
        st_worker(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--payload", default=str(ROOT / ".cache" / "gpu-payload" / "payload.tar.xz"),
                    help="the payload.tar.xz scripts/gpu-payload.sh made (or its unpacked folder)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "bench-gpu"))
    ap.add_argument("--work", default=None, help="scratch space (models, outputs) [default: the system's]")
    ap.add_argument("--budget", type=float, default=540, help="seconds; items that would not fit are skipped")
    ap.add_argument("--tokens", type=int, default=65536, help="tokens per measurement")
    ap.add_argument("--kernel", default="flash", help="ours' attention kernel for bf16 (flash | exact)")
    ap.add_argument("--before", action="store_true", help="also run the payload's pipeline-before")
    ap.add_argument("--binary", default=None, help="our binary [default: the payload's]")
    ap.add_argument("--only", default=None,
                    help="comma-separated parts of item names to run (e.g. 'bge,minilm'), others skipped")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a smoke test of this script (tiny shapes, --backend candle)")
    args = ap.parse_args()
    Bench(args).run()


if __name__ == "__main__":
    main()
