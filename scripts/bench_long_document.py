#!/usr/bin/env python3
"""Peak memory and time of one long document at 2k, 8k and 16k tokens, against the reference.

The document is the one of the Qwen3 tests (the shared sample's skill texts in file order,
joined by blank lines until 90,000+ characters). Each length is embedded by its own
`pipeline embed` process (`--max-length N`) whose resident set size is sampled every 10 ms
from /proc: the table shows it once the model is loaded (and as a multiple of the weights'
files), its peak while loading, its peak while embedding, the growth
between the two, that growth divided by the length (flat when memory grows linearly:
attention is tiled, no length × length matrix exists), the embedding time, and, for the TEST
model, the cosine to the sentence-transformers vector of
crates/embedder/tests/data/qwen3_reference.json.

    cargo build --release -p pipeline && python3 scripts/make_qwen3_models.py
    python3 scripts/bench_long_document.py [--model models/test-qwen3-embedding] [--lengths 2000,8000,16000]
    python3 scripts/bench_long_document.py --model .cache/bench/qwen3-0.6b-random   # the 0.6B shape (bench_qwen3.py builds it)
    python3 scripts/bench_long_document.py --model .cache/bench/gemma3-270m-random --lengths 4000,8000,16000
    python3 scripts/bench_long_document.py --model .cache/bench/qwen3-0.6b-random --lengths 512 --precision bf16  # load memory
"""

import argparse
import base64
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def skill_text(skill):
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    return f"{(skill.get('name') or '').strip()} | {(skill.get('description') or '').strip()} | {(body or '').strip()}"


def long_document(sample):
    parts, size = [], 0
    for line in open(Path(sample) / "skills/test.jsonl"):
        if not line.strip():
            continue
        parts.append(skill_text(json.loads(line)))
        size += len(parts[-1])
        if size > 90000:
            break
    return "\n\n".join(parts)


def rss_kib(pid):
    """The process's resident set size now (KiB), or None once it is gone."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def run(binary, model, text, length, tmp, threads, precision="f32"):
    """One `pipeline embed` process: (tokens, seconds, RSS when the model is
    loaded, peak RSS while embedding, vector, peak RSS while loading), RSS in
    KiB sampled every 10 ms from /proc (the load's own transient peak, weights
    being converted while the file is mapped, is reported apart)."""
    inp, out, log = Path(tmp) / "in.jsonl", Path(tmp) / "out.jsonl", Path(tmp) / "err.log"
    inp.write_text(json.dumps(text) + "\n")
    cmd = [str(binary), "embed", "--model", str(model), "--input", str(inp), "--output", str(out),
           "--precision", precision]
    if length:
        cmd += ["--max-length", str(length)]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    loaded, peak, load_peak = None, 0, 0
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
        while proc.poll() is None:
            rss = rss_kib(proc.pid)
            if loaded is None:
                load_peak = max(load_peak, rss or 0)
                # The command prints its model line once the model is loaded.
                if " on cpu" in log.read_text() and rss is not None:
                    loaded = rss
            elif rss is not None:
                peak = max(peak, rss)
            time.sleep(0.01)
    text = log.read_text()
    if proc.returncode != 0:
        sys.exit(f"pipeline embed failed: {text}")
    m = re.search(r"embedded \d+ texts \((\d+) tokens\) in ([0-9.]+) s", text)
    vector = json.loads(out.read_text().splitlines()[0])
    loaded = loaded or 0
    return int(m.group(1)), float(m.group(2)), loaded, max(peak, loaded), vector, load_peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models/test-qwen3-embedding"))
    ap.add_argument("--lengths", default="2000,8000,16000")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16", "int8"])
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    args = ap.parse_args()
    binary = ROOT / "target/release/pipeline"
    if not binary.exists():
        sys.exit(f"{binary} not found: run cargo build --release -p pipeline")
    text = long_document(args.sample)
    reference = {}
    if Path(args.model).resolve() == (ROOT / "models/test-qwen3-embedding").resolve():
        fixture = json.loads((ROOT / "crates/embedder/tests/data/qwen3_reference.json").read_text())
        for entry in fixture["long_document"]["lengths"]:
            raw = base64.b64decode(entry["vector"]["f32le_base64"])
            reference[entry["max_length"]] = struct.unpack(f"<{len(raw) // 4}f", raw)
    with tempfile.TemporaryDirectory() as tmp:
        weights = sum(f.stat().st_size for f in Path(args.model).glob("*.safetensors"))
        print(f"{args.model} ({weights / 2**20:.0f} MiB of weights), --precision {args.precision}, "
              f"{args.threads} threads; RSS sampled every 10 ms")
        print(f"{'tokens':>7} {'RSS loaded':>11} {'÷ weights':>9} {'load peak':>10} {'peak embedding':>15} {'growth':>9} "
              f"{'growth/token':>13} {'seconds':>8} {'cosine to ST':>13}")
        for length in [int(x) for x in args.lengths.split(",")]:
            tokens, seconds, loaded, peak, vector, load_peak = run(
                binary, args.model, text, length, tmp, args.threads, args.precision)
            growth = (peak - loaded) / 1024
            cos = ""
            if length in reference:
                ref = reference[length]
                dot = sum(a * b for a, b in zip(vector, ref))
                na = sum(a * a for a in vector) ** 0.5
                nb = sum(b * b for b in ref) ** 0.5
                cos = f"{dot / (na * nb):.9f}"
            print(
                f"{tokens:>7} {loaded / 1024:>7.0f} MiB {loaded * 1024 / weights:>9.2f} {load_peak / 1024:>6.0f} MiB "
                f"{peak / 1024:>11.0f} MiB {growth:>5.0f} MiB "
                f"{growth * 1024 / tokens:>9.1f} KiB {seconds:>8.2f} {cos:>13}",
                flush=True,
            )


if __name__ == "__main__":
    main()
