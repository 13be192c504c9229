#!/usr/bin/env python3
"""Served embedding throughput, side by side in one run: `pipeline embed` through one vLLM
server against the `openai` Python package's async client sending the same inputs (the same
token ids, batch size and requests in flight) to the same server, and the native engine on the
same texts.

  ours      pipeline embed --config <a copy of configs/vllm-minilm.toml> (token ids, base64)
  openai    openai.AsyncOpenAI().embeddings.create(...) over asyncio, a semaphore of
            max_in_flight, the same batches of token ids, base64, use_activation false
  native    pipeline embed --model models/all-MiniLM-L6-v2 (this process, f32)

Each is timed from texts to vectors (ours: `pipeline embed`'s own embedding time, tokenising
included; openai: the same tokenizer's batched encode, then the gathered requests, also reported
alone), alternating, `--repeat`
times; medians and the ratio ours / openai of throughput are printed, with whole-process
times for `pipeline embed`. The outputs are compared (worst cosine) so that both did the same
work. The server must not be busy with anything else.

Needs: cargo build --release -p pipeline; scripts/fetch-models.sh minilm; a vLLM server with
all-MiniLM-L6-v2 on --port (scripts/vllm.sh start models/all-MiniLM-L6-v2 all-MiniLM-L6-v2 8011).
The client side runs in vLLM's venv (.cache/vllm/venv, which has the openai package and
tokenizers); this script re-runs itself there.

    python3 scripts/bench_served.py [--texts 1024] [--batch-size 64] [--in-flight 8] [--repeat 3]
"""

import argparse
import asyncio
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PY = ROOT / ".cache" / "vllm" / "venv" / "bin" / "python"
PIPELINE = ROOT / "target" / "release" / "pipeline"
MODEL = ROOT / "models" / "all-MiniLM-L6-v2"

try:
    import openai
    from tokenizers import Tokenizer
except ImportError:
    if VENV_PY.exists() and Path(sys.prefix).resolve() != VENV_PY.parent.parent.resolve():
        os.execv(str(VENV_PY), [str(VENV_PY), __file__, *sys.argv[1:]])
    sys.exit("needs the openai and tokenizers packages: run scripts/vllm.sh install first")


# CPU seconds each client spent per round (the client's own cost, beside the server's).
CPU = {"--config": [], "--model": [], "openai": [], "openai tokenizing": []}


def texts(n):
    sample = ROOT.parent / "shared" / "skillret-sample" / "skills" / "test.jsonl"
    source = sample if sample.exists() else ROOT / "tests" / "fixtures" / "metatool" / "skills" / "test.jsonl"
    out = []
    rows = [json.loads(l) for l in source.read_text().splitlines() if l.strip()]
    while len(out) < n:
        for s in rows:
            body = (s.get("skill_md") or "").strip() or (s.get("description") or "").strip()
            out.append(f"{(s.get('name') or '').strip()} | {(s.get('description') or '').strip()} | {body}")
            if len(out) == n:
                break
    return source, out


def pipeline_embed(how, inputs, output):
    """`pipeline embed HOW…`: its own embedding seconds and tokens, and the whole process's."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    r = subprocess.run(
        [str(PIPELINE), "embed", *how, "--input", str(inputs), "--output", str(output)],
        capture_output=True,
        text=True,
    )
    whole = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[how[0]].append(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime)
    if r.returncode != 0:
        sys.exit(f"pipeline embed failed:\n{r.stderr}")
    m = re.search(r"embedded (\d+) texts \((\d+) tokens\) in ([0-9.]+) s", r.stderr)
    return float(m.group(3)), int(m.group(2)), whole


async def client(base, name, ids, batch, in_flight):
    import base64
    import struct

    api = openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
    gate = asyncio.Semaphore(in_flight)
    batches = [ids[i : i + batch] for i in range(0, len(ids), batch)]
    out = [None] * len(batches)

    async def one(i, chunk):
        async with gate:
            r = await api.embeddings.create(
                model=name,
                input=chunk,
                encoding_format="base64",
                extra_body={"use_activation": False, "endianness": "little"},
            )
            vecs = []
            for d in sorted(r.data, key=lambda d: d.index):
                raw = base64.b64decode(d.embedding)
                vecs.append(struct.unpack(f"<{len(raw) // 4}f", raw))
            out[i] = vecs

    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    await asyncio.gather(*(one(i, c) for i, c in enumerate(batches)))
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    CPU["openai"].append(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime)
    await api.close()
    return seconds, [v for vs in out for v in vs]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--texts", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--in-flight", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--port", type=int, default=8011)
    args = p.parse_args()
    base = f"http://127.0.0.1:{args.port}/v1"
    name = "all-MiniLM-L6-v2"

    source, items = texts(args.texts)
    tmp = Path(tempfile.mkdtemp(prefix="bench-served-"))
    inputs = tmp / "texts.jsonl"
    inputs.write_text("".join(json.dumps(t) + "\n" for t in items))
    config = tmp / "served.toml"
    config.write_text(
        f"""[data]\ndir = "{ROOT / 'tests/fixtures/tiny'}"\n[embedder]\nbackend = "openai"\nserved_model = "{name}"\nendpoints = ["{base}"]\nmodel = "{MODEL}"\nmax_in_flight = {args.in_flight}\nbatch_size = {args.batch_size}\ntimeout_s = 600\n[retriever]\nkind = "dense"\n"""
    )
    # The token ids the native engine embeds (sentence-transformers' 256-token limit).
    tok = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.enable_truncation(256)
    ids = [e.ids for e in tok.encode_batch(items)]
    tokens = sum(len(x) for x in ids)
    print(f"{len(items)} texts from {source} ({tokens} tokens), batches of {args.batch_size}, "
          f"{args.in_flight} in flight, vLLM at {base}; openai {openai.__version__}", flush=True)

    rows = {"ours": [], "ours (whole process)": [], "openai": [], "openai (requests only)": [], "native": [], "native (whole process)": []}
    for r in range(args.repeat):
        # Alternate which client goes first, so that drift favours neither.
        def run_ours():
            s, n, whole = pipeline_embed(["--config", str(config)], inputs, tmp / "ours.jsonl")
            assert n == tokens, (n, tokens)
            rows["ours"].append(s)
            rows["ours (whole process)"].append(whole)

        def run_openai():
            # From texts, as ours: the same tokenizer (HF tokenizers, batched), then the requests.
            cpu = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            again = [e.ids for e in tok.encode_batch(items)]
            tokenizing = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
            CPU["openai tokenizing"].append(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime)
            assert again == ids
            s, v = asyncio.run(client(base, name, again, args.batch_size, args.in_flight))
            rows["openai (requests only)"].append(s)
            rows["openai"].append(tokenizing + s)
            return v

        if r % 2 == 0:
            run_ours()
            vectors = run_openai()
        else:
            vectors = run_openai()
            run_ours()
        s, n, whole = pipeline_embed(["--model", str(MODEL)], inputs, tmp / "native.jsonl")
        rows["native"].append(s)
        rows["native (whole process)"].append(whole)
        print(f"  round {r + 1}: ours {rows['ours'][-1]:.2f} s, openai {rows['openai'][-1]:.2f} s, native {rows['native'][-1]:.2f} s", flush=True)

    ours_vecs = [json.loads(l) for l in (tmp / "ours.jsonl").read_text().splitlines()]
    native_vecs = [json.loads(l) for l in (tmp / "native.jsonl").read_text().splitlines()]
    norm = lambda v: [x / math.sqrt(sum(y * y for y in v)) for x in v]
    worst_client = min(cosine(a, norm(b)) for a, b in zip(ours_vecs, vectors))
    worst_native = min(cosine(a, b) for a, b in zip(ours_vecs, native_vecs))
    print()
    print("| path | median s | tokens/s | min–max s |")
    print("|---|---:|---:|---:|")
    for k, v in rows.items():
        med = statistics.median(v)
        print(f"| {k} | {med:.2f} | {tokens / med:,.0f} | {min(v):.2f}–{max(v):.2f} |")
    ratio = statistics.median(rows["openai"]) / statistics.median(rows["ours"])
    paired = statistics.median(o / s for o, s in zip(rows["openai"], rows["ours"]))
    print(f"\nours / openai throughput, both from texts: {ratio:.3f} (median of paired ratios {paired:.3f})")
    only = statistics.median(rows["openai (requests only)"]) / statistics.median(rows["ours"])
    print(f"ours (tokenising included) / openai (requests only, tokenised beforehand): {only:.3f}")
    print(f"served / native throughput: {statistics.median(rows['native']) / statistics.median(rows['ours']):.3f}")
    print(
        f"client CPU seconds per round (median): ours {statistics.median(CPU['--config']):.2f} "
        f"(whole process, tokenising included), openai {statistics.median(CPU['openai']):.2f} "
        f"(requests) + {statistics.median(CPU['openai tokenizing']):.2f} (tokenising); native engine {statistics.median(CPU['--model']):.2f}"
    )
    print(f"worst cosine, ours vs the openai client's vectors: {worst_client:.9f}; ours (served) vs native: {worst_native:.9f}")


if __name__ == "__main__":
    main()
