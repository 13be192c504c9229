#!/usr/bin/env python3
"""Speed and accuracy of every precision, side by side with PyTorch and ONNX Runtime, in one run.

Embedders (one table per model): the same 512 skills of the shared SkillRet sample
(lines 1001-1512 of skills/test.jsonl, official text recipe), truncated to the same
max length, 2 threads, model loading not timed, one after the other:

  PyTorch f32              sentence-transformers
  PyTorch bf16             sentence-transformers with the model in bfloat16 (oneDNN: AMX tiles where the
                           CPU has them)
  OpenVINO bf16            the same model converted with openvino.convert_model, compiled with
                           INFERENCE_PRECISION_HINT=bf16 (its default on AMX CPUs), batches of 32 sorted by
                           length, mean pooling here (only where `openvino` is installed and the CPU has
                           AVX-512 BF16 or AMX)
  ONNX Runtime f32         the model exported with torch.onnx (BertModel, mean pooling here)
  ONNX Runtime int8        that export through onnxruntime's quantize_dynamic
                           (per-channel int8 weights, dynamic uint8 activations)
  ours f32 / bf16 / int8   `pipeline embed --precision ...` (on an AMX CPU also capped at avx512, rows
                           `ours@avx512 ...`: the engine without its tile kernels, in the same run)

Each row gives tokens/s, the ratio to PyTorch and to ONNX Runtime int8, and the worst
cosine to PyTorch f32 over the 512 skills and every query of the sample (queries are
embedded untimed, with the model's query prefix).

Cross-encoder: the 480 (query, skill) pairs of all-MiniLM-L6-v2's top 20 on the sample
(reference/minilm.run.trec), PyTorch f32 and bf16 (sentence-transformers CrossEncoder), ONNX Runtime
f32 and int8, ours f32 / bf16 / int8 (`pipeline rerank`): pairs/s, worst |score
difference| to PyTorch f32 and the number of queries whose top-20 order changes.

Last, this CPU's peak rate for the instruction each of our paths is built on (f32 FMA,
bf16 dot, int8 dot) and the share of it our dense layers reach on the models' shapes
(`examples/bench_linear`).

    scripts/fetch-models.sh && cargo build --release -p pipeline && cargo build --release -p engine --example bench_linear
    pip install torch==2.15.0 sentence-transformers==6.2.0 onnxruntime==1.32.0 onnx==1.23.2 onnxscript==0.7.2 \
        openvino==2026.4.1
    python3 scripts/bench_precision.py [--only minilm,e5,cross,peak] [--repeat 3] [--torch-allocator auto]

Engines run in alternating rounds, --repeat of them (best of each); the in-process ones (PyTorch, OpenVINO, ONNX
Runtime) make one untimed pass first. PyTorch runs in its fast mode: glibc's malloc tuned to keep large blocks
on the heap (as it is, PyTorch pays millions of page faults a pass and its speed depends on the heap's history;
tcmalloc, 8% faster still, aborted beside ONNX Runtime: scripts/bench_anchor.py); the first line says which.

ONNX exports are cached under target/bench-onnx/.

--isa avx2 runs every engine capped at AVX2 + FMA: ours with SKILLRET_MAX_ISA=avx2 (int8 on
vpmaddubsw, no VNNI), PyTorch with ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2 and
MKL_ENABLE_INSTRUCTIONS=AVX2 (set before torch is imported: PyTorch's f32 linear layers go through
MKL, which ignores the first two). --isa avxvnni: ours with SKILLRET_MAX_ISA=avxvnni (int8 on
256-bit vpdpbusd), PyTorch with ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2_VNNI and
MKL_ENABLE_INSTRUCTIONS=AVX2. ONNX Runtime has no such
cap (its MLAS kernels pick AVX-512 by themselves), so on an AVX-512 CPU its rows are marked
uncapped and no ratio to it is printed; on an AVX2-only CPU (`grep -c avx512f /proc/cpuinfo` gives
0) leave --isa out: everything runs at AVX2 anyway.

Every run starts by naming the machine: the CPU model, its SIMD flags and `bench_linear`'s peaks
(f32 FMA, bf16 and int8 dot products), so that each figure below reads against its CPU.

--before PATH adds rows for another build of `pipeline` (e.g. the last commit's, built into another
target directory), run the same way in the same run: a before/after comparison.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

import numpy as np

import bench_anchor

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "target/release/pipeline"
BENCH_LINEAR = ROOT / "target/release/examples/bench_linear"
ONNX_DIR = ROOT / "target/bench-onnx"
PRECISIONS = ["f32", "bf16", "int8"]


def skill_text(skill):
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    return f"{(skill.get('name') or '').strip()} | {(skill.get('description') or '').strip()} | {(body or '').strip()}"


def cosines(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(1)


def run(cmd):
    """Runs one of our binaries as it ships (without the allocator PyTorch was given); its stderr."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=bench_anchor.ours_env())
    if proc.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{proc.stderr}")
    return proc.stderr


def timed(repeat, fn):
    """The best time of `repeat` calls of `fn`, and its last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def export_onnx(model_dir, kind, torch):
    """f32 and dynamic-int8 ONNX files of a model directory (cached)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel, AutoModelForSequenceClassification

    out = ONNX_DIR / model_dir.name
    f32, int8 = out / "model.onnx", out / "model-int8.onnx"
    if int8.exists():
        return f32, int8
    out.mkdir(parents=True, exist_ok=True)
    cls = AutoModelForSequenceClassification if kind == "cross" else AutoModel
    model = cls.from_pretrained(str(model_dir)).eval()
    ids = torch.ones(2, 16, dtype=torch.long)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["output"] = {0: "batch"} if kind == "cross" else {0: "batch", 1: "seq"}

    class Wrapped(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            o = self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return o.logits if kind == "cross" else o.last_hidden_state

    with torch.no_grad():
        torch.onnx.export(Wrapped(model), (ids, ids, torch.zeros_like(ids)), str(f32), input_names=names,
                          output_names=["output"], dynamic_axes=axes, opset_version=17, dynamo=False)
    quantize_dynamic(str(f32), str(int8), per_channel=True, weight_type=QuantType.QInt8)
    return f32, int8


def ort_session(path, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def ort_batches(tokenizer, first, second, max_length, batch_size, session):
    """Runs `session` over texts (or pairs) sorted by length, in padded batches, as
    sentence-transformers does; returns outputs (mean-pooled or logits) in input order."""
    enc = tokenizer(first, second, truncation=True if second is None else "longest_first",
                    max_length=max_length) if second is not None else tokenizer(first, truncation=True,
                                                                              max_length=max_length)
    order = np.argsort([-len(x) for x in enc["input_ids"]], kind="stable")
    wanted = {i.name for i in session.get_inputs()}
    results = [None] * len(order)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(enc["input_ids"][i]) for i in idx)
        feed = {}
        for name in ["input_ids", "attention_mask", "token_type_ids"]:
            rows = [enc[name][i] if name in enc else [0] * len(enc["input_ids"][i]) for i in idx]
            feed[name] = np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
        feed = {k: v for k, v in feed.items() if k in wanted}
        out = session.run(None, feed)[0]
        if second is None:
            mask = feed["attention_mask"][..., None].astype(np.float32)
            out = (out * mask).sum(1) / mask.sum(1)
        for i, row in zip(idx, out):
            results[i] = row
    return np.array(results)


def embedder_table(name, model, max_length, query_prefix, doc_prefix, args, torch):
    from sentence_transformers import SentenceTransformer

    model_dir = ROOT / "models" / model
    sample = Path(args.sample)
    skills = [json.loads(l) for l in open(sample / "skills/test.jsonl") if l.strip()][1000:1512]
    queries = [json.loads(l)["query"] for l in open(sample / "queries/test.jsonl") if l.strip()]
    docs = [skill_text(s) for s in skills]
    st = SentenceTransformer(str(model_dir), device="cpu")
    st.max_seq_length = max_length
    tok = st.tokenizer
    tokens = sum(len(x) for x in tok([doc_prefix + d for d in docs], truncation=True, max_length=max_length)["input_ids"])
    print(f"\n## {name}: {len(docs)} skills, {tokens} tokens at max length {max_length}, {args.threads} threads "
          f"(+ {len(queries)} queries for accuracy, untimed)")
    rows = []

    # Every engine's pass over the documents, run in alternating rounds (in-process ones warmed up first);
    # accuracy from each one's last pass and, untimed, the queries.
    docs_in = [doc_prefix + d for d in docs]
    queries_in = [query_prefix + q for q in queries]
    enc = lambda texts: st.encode(texts, batch_size=32, convert_to_numpy=True, show_progress_bar=False)
    sides, embed_queries = {}, {}
    sides["PyTorch f32"] = lambda: (None, enc(docs_in))
    embed_queries["PyTorch f32"] = enc

    # PyTorch bf16: the same model in bfloat16 (oneDNN; AMX tiles where the CPU has them).
    st16 = SentenceTransformer(str(model_dir), device="cpu", model_kwargs={"torch_dtype": torch.bfloat16})
    st16.max_seq_length = max_length
    enc16 = lambda texts: np.asarray(st16.encode(texts, batch_size=32, convert_to_numpy=False,
                                                 convert_to_tensor=True, show_progress_bar=False).float())
    sides["PyTorch bf16"] = lambda: (None, enc16(docs_in))
    embed_queries["PyTorch bf16"] = enc16

    ov = openvino_embedder(model_dir, max_length, args)
    if ov is not None:
        sides["OpenVINO bf16"] = lambda: (None, ov(docs_in))
        embed_queries["OpenVINO bf16"] = ov

    f32_path, int8_path = export_onnx(model_dir, "embed", torch)
    for label, path in [("ONNX Runtime f32", f32_path), ("ONNX Runtime int8", int8_path)]:
        session = ort_session(path, args.threads)
        run_ = lambda texts, session=session: ort_batches(tok, texts, None, max_length, 32, session)
        sides[label] = lambda run_=run_: (None, run_(docs_in))
        embed_queries[label] = run_
    in_process = list(sides)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
        (tmp / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
        ours = {}
        for tag, binary, precision in builds(args):
            common = ["--model", model_dir, "--max-length", max_length, "--precision", precision,
                      "--query-prompt", query_prefix, "--document-prompt", doc_prefix]
            out = tmp / f"d-{tag}-{precision}.jsonl"

            def ours_pass(tag=tag, binary=binary, common=common, out=out):
                err = run(capped(tag, [binary, "embed", "--input", tmp / "docs.jsonl", "--output", out] + common))
                m = re.search(r"embedded \d+ texts \((\d+) tokens\) in ([0-9.]+) s", err)
                device = re.search(r" on (cpu[^\n]*)", err)
                return float(m.group(2)), device.group(1) if device else None

            sides[f"{tag} {precision}"] = ours_pass
            ours[f"{tag} {precision}"] = (tag, binary, common, out)
        results = bench_anchor.alternate(sides, args.repeat, warm=in_process)
        ref_docs = results["PyTorch f32"][2]
        ref_queries = enc(queries_in)
        rows = []
        for label, (seconds, _, result) in results.items():
            if label in ours:
                tag, binary, common, out = ours[label]
                run(capped(tag, [binary, "embed", "--kind", "query", "--input", tmp / "queries.jsonl",
                                 "--output", tmp / "q.jsonl"] + common))
                vecs = np.array([json.loads(l) for l in open(out)])
                qvecs = np.array([json.loads(l) for l in open(tmp / "q.jsonl")])
                label += f" [{result}]" if result else ""
            else:
                vecs, qvecs = result, embed_queries[label](queries_in)
            worst = min(cosines(vecs, ref_docs).min(), cosines(qvecs, ref_queries).min())
            rows.append((label, seconds, worst))
    del st16

    ort_int8 = next(r[1] for r in rows if r[0] == "ONNX Runtime int8")
    torch_bf16 = next(r[1] for r in rows if r[0] == "PyTorch bf16")
    ratio = (lambda x: f"{x:9.2f}") if args.ort_capped else (lambda x: f"{'n/a':>9}")
    print(f"{'engine':<96} {'tokens/s':>9} {'×PyTorch':>9} {'×PT bf16':>9} {'×ORT int8':>9} {'worst cos':>10}")
    for label, seconds, worst in rows:
        if label.startswith("ONNX") and not args.ort_capped:
            label += " (uncapped)"
        print(f"{label:<96} {tokens / seconds:9.0f} {rows[0][1] / seconds:9.2f} {torch_bf16 / seconds:9.2f} "
              f"{ratio(ort_int8 / seconds)} {worst:10.6f}")
    ours = {r[0].split(" [")[0]: r[1] for r in rows}
    line = f"ours bf16 / ours f32: {ours['ours f32'] / ours['ours bf16']:.2f}x"
    if args.ort_capped:
        ort_f32 = next(r[1] for r in rows if r[0] == "ONNX Runtime f32")
        line += (f"; ours f32 / ORT f32: {ort_f32 / ours['ours f32']:.2f}x; "
                 f"ours int8 / ORT int8: {ort_int8 / ours['ours int8']:.2f}x")
    print(line)


def builds(args):
    """(tag, binary, precision) for each build of ours and each precision, ours first; on an AMX CPU (at the
    native level) ours again capped at avx512 (tag ours@avx512: the engine without its tile kernels)."""
    bins = [("ours", BIN)] + ([("before", Path(args.before))] if args.before else [])
    if args.isa == "native" and "amx_tile" in Path("/proc/cpuinfo").read_text().split():
        bins.append(("ours@avx512", BIN))
    return [(tag, b, p) for tag, b in bins for p in PRECISIONS]


def capped(tag, cmd):
    """`cmd` run with SKILLRET_MAX_ISA=avx512 for the ours@avx512 rows."""
    return (["env", "SKILLRET_MAX_ISA=avx512"] if tag == "ours@avx512" else []) + cmd


def openvino_embedder(model_dir, max_length, args):
    """OpenVINO bf16 on the model's transformer (mean pooling here, batches of 32 sorted by length), or None
    where openvino is not installed or the CPU has no bf16 unit."""
    try:
        import openvino as ov
    except ImportError:
        print("(OpenVINO row skipped: pip install openvino)")
        return None
    cpu = Path("/proc/cpuinfo").read_text().split()
    if "amx_bf16" not in cpu and "avx512_bf16" not in cpu:
        print("(OpenVINO row skipped: this CPU has no bf16 unit)")
        return None
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    hf = AutoModel.from_pretrained(str(model_dir)).eval()
    example = tok(["an example"], return_tensors="pt")
    with torch.no_grad():
        converted = ov.convert_model(hf, example_input=dict(example))
    core = ov.Core()
    compiled = core.compile_model(converted, "CPU", {"INFERENCE_PRECISION_HINT": "bf16",
                                                     "INFERENCE_NUM_THREADS": args.threads})
    names = [i.get_any_name() for i in compiled.inputs]

    def embed(texts):
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = [None] * len(texts)
        for b in range(0, len(order), 32):
            idx = order[b:b + 32]
            enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=max_length,
                      return_tensors="np")
            hidden = compiled({n: enc[n] for n in names if n in enc})[0]
            mask = enc["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            for j, i in enumerate(idx):
                out[i] = pooled[j]
        return np.stack(out)

    return embed


def cross_table(model, max_length, args, torch):
    from sentence_transformers import CrossEncoder

    model_dir = ROOT / "models" / model
    sample = Path(args.sample)
    skills = {s["id"]: s for s in (json.loads(l) for l in open(sample / "skills/test.jsonl") if l.strip())}
    queries = {q["id"]: q["query"] for q in (json.loads(l) for l in open(sample / "queries/test.jsonl") if l.strip())}
    run_lines = [l for l in open(sample / "reference/minilm.run.trec") if l.split() and int(l.split()[3]) <= 20]
    keys = [(l.split()[0], l.split()[2]) for l in run_lines]
    pairs = [(queries[q], skill_text(skills[s])) for q, s in keys]
    ce = CrossEncoder(str(model_dir), max_length=max_length, device="cpu")
    print(f"\n## cross-encoder {model}: {len(pairs)} pairs (all-MiniLM-L6-v2's top 20 of {len(queries)} queries), "
          f"max length {max_length}, {args.threads} threads")
    # Every engine's pass over the pairs, in alternating rounds (in-process ones warmed up first).
    sides = {}
    sides["PyTorch f32"] = lambda: (None, np.asarray(ce.predict(
        pairs, batch_size=32, activation_fn=torch.nn.Identity(), show_progress_bar=False),
        dtype=np.float64).reshape(-1))
    ce16 = CrossEncoder(str(model_dir), max_length=max_length, device="cpu", model_kwargs={"torch_dtype": torch.bfloat16})
    sides["PyTorch bf16"] = lambda: (None, np.asarray(ce16.predict(
        pairs, batch_size=32, activation_fn=torch.nn.Identity(), show_progress_bar=False, convert_to_numpy=False,
        convert_to_tensor=True).float(), dtype=np.float64).reshape(-1))
    f32_path, int8_path = export_onnx(model_dir, "cross", torch)
    for label, path in [("ONNX Runtime f32", f32_path), ("ONNX Runtime int8", int8_path)]:
        session = ort_session(path, args.threads)
        sides[label] = lambda session=session: (None, ort_batches(
            ce.tokenizer, [a for a, _ in pairs], [b for _, b in pairs], max_length, 32, session
        ).reshape(-1).astype(np.float64))
    in_process = list(sides)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "first.trec").write_text("".join(run_lines))
        for tag, binary, precision in builds(args):
            out = tmp / f"out-{tag}-{precision}.trec"

            def ours_pass(tag=tag, binary=binary, precision=precision, out=out):
                err = run(capped(tag, [binary, "rerank", "--model", model_dir, "--data", sample, "--run",
                                       tmp / "first.trec", "--top-n", 20, "--output", out,
                                       "--max-length", max_length, "--precision", precision]))
                got = {}
                for line in open(out):
                    q, _, s, _, score, _ = line.split()
                    got[(q, s)] = float(score)
                seconds = float(re.search(r"reranked \d+ pairs in ([0-9.]+) s", err).group(1))
                return seconds, np.array([got[k] for k in keys])

            sides[f"{tag} {precision}"] = ours_pass
        results = bench_anchor.alternate(sides, args.repeat, warm=in_process)
    del ce16
    rows = [(label, seconds, scores) for label, (seconds, _, scores) in results.items()]
    ref = results["PyTorch f32"][2]

    def order_changes(scores):
        changed = 0
        for q in queries:
            idx = [i for i, k in enumerate(keys) if k[0] == q]
            rank = lambda v: sorted(idx, key=lambda i: (-v[i], keys[i][1]))
            changed += rank(scores) != rank(ref)
        return changed

    ort_int8 = next(r[1] for r in rows if r[0] == "ONNX Runtime int8")
    torch_bf16 = next(r[1] for r in rows if r[0] == "PyTorch bf16")
    print(f"{'engine':<20} {'pairs/s':>8} {'×PyTorch':>9} {'×PT bf16':>9} {'×ORT int8':>9} {'worst |Δ score|':>16} "
          f"{'top-20 orders changed':>22}")
    for label, seconds, scores in rows:
        to_ort = f"{ort_int8 / seconds:9.2f}" if args.ort_capped else f"{'n/a':>9}"
        print(f"{label:<20} {len(pairs) / seconds:8.1f} {rows[0][1] / seconds:9.2f} {torch_bf16 / seconds:9.2f} {to_ort} "
              f"{np.abs(scores - ref).max():16.2e} {order_changes(scores):>14} of {len(queries)}")


SIMD_FLAGS = ("avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
              "amx_bf16", "amx_int8")


def machine():
    """The CPU model and its SIMD flags, from /proc/cpuinfo."""
    text = Path("/proc/cpuinfo").read_text()
    model = next((l.split(":", 1)[1].strip() for l in text.splitlines() if l.startswith("model name")), "?")
    flags = next((l.split(":", 1)[1].split() for l in text.splitlines() if l.startswith("flags")), [])
    return model, [f for f in SIMD_FLAGS if f in flags]


def peaks_line():
    """bench_linear's peaks on this CPU, one line."""
    proc = subprocess.run([str(BENCH_LINEAR), "--tsv"], capture_output=True, text=True, check=True)
    peaks = {}
    for line in proc.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "peak":
            peaks[f[1]] = float(f[2])
    return "  ".join(f"{k} {v:.0f} G{'OP' if 'vnni' in k or 'int8' in k else 'FLOP'}/s" for k, v in peaks.items())


def torch_products(torch):
    """PyTorch's own 2048² product in f32 and bf16 on this CPU (best of 5), GFLOP/s: the anchor beside the
    peaks (oneDNN runs bf16 on AMX tiles where the CPU has them)."""
    rates = {}
    for dtype in [torch.float32, torch.bfloat16]:
        a, b = torch.randn(2048, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)
        a @ b
        best = min(timed(1, lambda: a @ b)[0] for _ in range(5))
        rates[str(dtype).split(".")[1]] = 2 * 2048**3 / best / 1e9
    return rates


def peak_table(torch):
    proc = subprocess.run([str(BENCH_LINEAR), "--tsv"], capture_output=True, text=True, check=True)
    peaks, layers, level = {}, [], "?"
    for line in proc.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "level":
            level = f[1]
        elif f[0] == "peak":
            peaks[f[1]] = float(f[2])
        elif f[0] == "layer":
            layers.append(f[1:])
    print(f"\n## this CPU's peaks (registers only, all threads) and our dense layers' share of the peak of the "
          f"instruction each runs on, kernels at the {level} level (4096 rows)")
    print("  ".join(f"{k} {v:.0f} G{'OP' if 'vnni' in k or 'int8' in k else 'FLOP'}/s" for k, v in peaks.items()))
    anchors = torch_products(torch)
    print(f"PyTorch's own 2048² product: f32 {anchors['float32']:.0f} GFLOP/s, bf16 {anchors['bfloat16']:.0f} GFLOP/s")
    shapes = list(dict.fromkeys((l[0], l[1], l[2]) for l in layers))
    print(f"{'layer':<24}" + "".join(f"{p:>18}" for p in PRECISIONS))
    for name, i, o in shapes:
        cells = {l[3]: f"{float(l[4]):7.0f} ({float(l[5]):3.0f}%)" for l in layers if (l[0], l[1], l[2]) == (name, i, o)}
        print(f"{name + ' ' + i + '→' + o:<24}" + "".join(f"{cells.get(p, '—'):>18}" for p in PRECISIONS))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="minilm,e5,cross,peak", help="comma-separated: minilm, e5, cross, peak")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of alternating runs, best of these per engine (in-process engines warmed up first)")
    ap.add_argument("--torch-allocator", choices=bench_anchor.MODES, default="auto",
                    help="PyTorch's allocator (see scripts/bench_anchor.py): auto = glibc-tuned (tcmalloc aborts "
                         "beside ONNX Runtime here); glibc = as it is (slow and history-dependent)")
    ap.add_argument("--cross-encoder", default=None,
                    help="models/ directory of the cross-encoder (default: skill-reranker-minilm if trained, "
                         "else test-bert-cross-encoder)")
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    ap.add_argument("--isa", choices=["native", "avxvnni", "avx2"], default="native",
                    help="cap every engine that can be capped at this level (see above)")
    ap.add_argument("--before", default=None,
                    help="another build of pipeline to run side by side (rows 'before ...')")
    args = ap.parse_args()
    # tcmalloc preloaded aborts next to ONNX Runtime here (scripts/bench_anchor.py): glibc tuned by default.
    allocator = bench_anchor.fast_allocator(args.torch_allocator, prefer="glibc-tuned")
    cpu_avx512 = "avx512f" in Path("/proc/cpuinfo").read_text()
    args.ort_capped = args.isa == "native" or not cpu_avx512
    if args.isa != "native":
        os.environ["SKILLRET_MAX_ISA"] = args.isa
        os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
        os.environ["ONEDNN_MAX_CPU_ISA"] = "AVX2" if args.isa == "avx2" else "AVX2_VNNI"
        os.environ["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    only = set(args.only.split(","))
    for path, hint in [(BIN, "cargo build --release -p pipeline"),
                       (BENCH_LINEAR, "cargo build --release -p engine --example bench_linear")]:
        if not path.exists():
            sys.exit(f"{path} not found: run {hint}")
    import torch

    torch.set_num_threads(args.threads)
    import onnxruntime

    print(f"torch {torch.__version__}, sentence-transformers {metadata.version('sentence-transformers')}, "
          f"onnxruntime {onnxruntime.__version__}, {args.threads} threads, best of {args.repeat} alternating rounds "
          f"(in-process engines warmed up first); PyTorch's allocator: {allocator}; "
          f"CPU {'with' if cpu_avx512 else 'without'} AVX-512; isa {args.isa}"
          + ("" if args.ort_capped else " (ONNX Runtime uncapped: its ratios are not given)"))
    model, flags = machine()
    print(f"CPU: {model}; flags: {' '.join(flags) or 'none of ' + ', '.join(SIMD_FLAGS)}")
    print(f"bench_linear peaks ({args.threads} threads): {peaks_line()}")
    if args.isa != "native":
        print(f"PyTorch CPU capability: {torch.backends.cpu.get_cpu_capability()} "
              f"(ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA and MKL_ENABLE_INSTRUCTIONS set)")
    if "minilm" in only:
        embedder_table("all-MiniLM-L6-v2", "all-MiniLM-L6-v2", 256, "", "", args, torch)
    if "e5" in only:
        embedder_table("multilingual-e5-small", "multilingual-e5-small", 512, "query: ", "passage: ", args, torch)
    if "cross" in only:
        model = args.cross_encoder or ("skill-reranker-minilm" if (ROOT / "models/skill-reranker-minilm").exists()
                                       else "test-bert-cross-encoder")
        cross_table(model, 256, args, torch)
    if "peak" in only:
        peak_table(torch)


if __name__ == "__main__":
    main()
