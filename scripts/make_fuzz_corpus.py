#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, fuzz/corpus/TARGET/NAME, from the project's own files.

Tool: this script (standard-library Python 3.11), run as
    python3 scripts/make_fuzz_corpus.py [--pipeline target/debug/pipeline]
from the repository root. Sources: configs/ (run and train configurations), tests/fixtures/tiny
and tests/fixtures/metatool (data directories, qrels, runs, the official JSON), the TEST and
fetched models' small files under models/ (config.json, tokenizer and sentence-transformers
files, chat templates; never weights), fuzz/data/tokenizer.json, a `pipeline run` of
configs/bm25.toml on tests/fixtures/tiny (results.json, metrics.json, its run) and of a
saved HNSW index, and answers of served models written out here. Models that are not installed
are passed over with a note; each seed is a few lines, so the corpora stay small. The files of
several parts are cut at NUL bytes, as fuzz/src/lib.rs reads them. Byte-stable: running it again
writes the same files.
"""

import argparse
import json
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"
TINY = ROOT / "tests" / "fixtures" / "tiny"
METATOOL = ROOT / "tests" / "fixtures" / "metatool"
MODELS = ROOT / "models"


def head(path, lines):
    """The first `lines` lines of a file, as bytes."""
    with open(path, "rb") as f:
        return b"".join(f.readline() for _ in range(lines))


def joined(*parts):
    return b"\0".join(parts)


def sized(first, second):
    """Two binary files in one input, as fuzz/src/lib.rs's `sized` cuts them: the first's
    length (8 bytes, little endian), the first, the second."""
    return struct.pack("<Q", len(first)) + first + second


def seed(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data)


def model_file(model, name):
    path = MODELS / model / name
    return path.read_bytes() if path.is_file() else None


def configs():
    for path in sorted((ROOT / "configs").glob("*.toml")):
        seed("run_config", path.stem, path.read_bytes())
    for path in sorted((ROOT / "configs" / "train").glob("*.toml")):
        seed("train_config", path.stem, path.read_bytes())


def data():
    for name, folder in [("tiny", TINY), ("metatool", METATOOL)]:
        skills = head(folder / "skills" / "test.jsonl", 4)
        queries = head(folder / "queries" / "test.jsonl", 3)
        qrels = head(folder / "qrels" / "test.jsonl", 6)
        seed("skills", name, skills)
        seed("data_dir", name, joined(skills, queries, qrels))
        seed("qrels", f"{name}.jsonl", qrels)
    dataset = (METATOOL / "dataset.json").read_bytes()
    seed("data_dir", "metatool-named", joined(
        head(METATOOL / "skills" / "test.jsonl", 2), head(METATOOL / "queries" / "test.jsonl", 2),
        head(METATOOL / "qrels" / "test.jsonl", 2), dataset))
    # Queries that carry their labels (no qrels file), as a list and encoded.
    seed("data_dir", "labels", joined(
        b'{"id": "s1", "name": "pdf", "description": "Read PDFs.", "skill_md": "# PDF"}\n',
        b'{"id": "q1", "query": "parse a pdf", "labels": [{"id": "s1", "relevance": 2}]}\n'
        b'{"id": "q2", "query": "read it", "labels": "[{\\"id\\": \\"s1\\", \\"relevance\\": 1}]"}\n'
        b'{"id": "q3", "query": "x", "skill_ids": ["s1"]}\n'))
    run = head(TINY / "runs" / "lexical.run.trec", 12)
    seed("trec_run", "tiny", run)
    seed("qrels", "tiny.trec", b"q1 0 s1 1\nq1 0 s2 0\nq2 0 s3 2\n")
    official = json.loads((TINY / "runs" / "lexical.official.json").read_text())
    seed("official_json", "tiny", json.dumps(official, indent=1).encode()[:4000])
    seed("eval", "tiny", joined(head(TINY / "qrels" / "test.jsonl", 8), run))
    seed("eval", "trec", joined(b"q1 0 s1 1\nq2 0 s2 1\n", b"q1 Q0 s1 1 2.5 x\nq2 Q0 s1 1 1.0 x\n"))


def models():
    seed("model_config", "tiny-bert", json.dumps(json.loads(
        (ROOT / "fuzz" / "src" / "structured.rs").read_text().split('r#"')[1].split('"#')[0])).encode())
    if not MODELS.is_dir():
        print("make_fuzz_corpus: no models/ (scripts/fetch-models.sh); their seeds are left out", file=sys.stderr)
    for model in sorted(p.name for p in MODELS.iterdir() if p.is_dir()) if MODELS.is_dir() else []:
        config = model_file(model, "config.json")
        if config is not None:
            seed("model_config", model, config)
        template = model_file(model, "chat_template.jinja")
        if template is not None:
            seed("chat_template", model, template)
        tc = MODELS / model / "tokenizer_config.json"
        if tc.is_file():
            value = json.loads(tc.read_text())
            if isinstance(value.get("chat_template"), str):
                seed("chat_template", f"{model}-config", value["chat_template"].encode())
        if (MODELS / model / "modules.json").is_file():
            parts = [model_file(model, n) or b"" for n in
                     ["modules.json", "1_Pooling/config.json", "sentence_bert_config.json",
                      "config_sentence_transformers.json"]]
            seed("sentence_transformers", model, joined(*parts))
    tokenizer = (ROOT / "fuzz" / "data" / "tokenizer.json").read_bytes()
    seed("tokenizer", "tiny-wordpiece", tokenizer)
    seed("tokenizer", "tiny-wordpiece-config", joined(
        tokenizer, b'{"model_max_length": 12, "do_lower_case": true, "cls_token": "[CLS]"}'))
    seed("chat_template", "plain", b"{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
         b"{% if add_generation_prompt %}<|assistant|>{% endif %}")


def tensors(entries):
    """A safetensors file: (name, dtype, shape, bytes) entries."""
    header, data = {}, b""
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def weights():
    f32 = lambda n: struct.pack(f"<{n}f", *[0.25 * i for i in range(n)])
    seed("safetensors", "f32", tensors([("embeddings.word_embeddings.weight", "F32", [4, 2], f32(8)),
                                        ("embeddings.LayerNorm.weight", "F32", [2], f32(2))]))
    seed("safetensors", "mixed", tensors([("a", "BF16", [2, 2], b"\x80\x3f" * 4), ("b", "F16", [3], b"\x00\x3c" * 3),
                                          ("c", "I8", [4], b"\x01\x02\x03\x04"), ("d", "F64", [1], struct.pack("<d", 1.5))]))
    seed("safetensors", "metadata", tensors([("x", "F32", [0], b"")])[:8] + b'{"__metadata__":{"format":"pt"}}')
    for i, blob in enumerate([b"\x03\x00\x10\x20", b"\xff" * 24, bytes(range(64))]):
        seed("safetensors_structured", f"bytes-{i}", blob)
        seed("model_config_structured", f"bytes-{i}", blob)


def cache_and_checkpoint():
    """A whole shard of the cache target's (2 rows of 4 floats) and its probe, in the cache's
    layout (SKRVEC01, the float count, the floats); a checkpoint of step 3 of 10 as
    pipeline train writes one (state.json, the optimiser's moments and step, all F32)."""
    vec = lambda n: b"SKRVEC01" + struct.pack("<Q", n) + struct.pack(f"<{n}f", *[0.5 * i for i in range(n)])
    seed("cache", "shard-and-probe", sized(vec(8), vec(4)))
    seed("cache", "a-short-shard", sized(vec(4), b"SKRVEC01"))
    state = json.dumps({"step": 3, "steps": 10, "fingerprint": "fuzz", "base": "base"}, indent=2).encode()
    f32 = lambda n: struct.pack(f"<{n}f", *[0.125 * i for i in range(n)])
    optimizer = tensors([("m.b", "F32", [3], f32(3)), ("m.w", "F32", [2, 3], f32(6)), ("step", "F32", [1], struct.pack("<f", 3.0)),
                         ("v.b", "F32", [3], f32(3)), ("v.w", "F32", [2, 3], f32(6))])
    seed("checkpoint", "step-3-of-10", joined(state, optimizer))
    seed("checkpoint", "another-fingerprint", joined(state.replace(b'"fuzz"', b'"other"'), optimizer))


def e5s1():
    header = b"E5S1" + struct.pack("<I", 1) + struct.pack("<7i", 8, 1, 2, 16, 3, 8, 2) + struct.pack("<f", 1e-12)
    header += struct.pack("<i", 32)
    pieces = [b"<s>", b"a", b"b"]
    vocab = struct.pack("<5i", 3, 0, 2, 1, 0) + struct.pack("<Q", sum(map(len, pieces)))
    offsets, at = [], 0
    for p in pieces:
        offsets.append(at)
        at += len(p)
    offsets.append(at)
    vocab += struct.pack(f"<{len(offsets)}I", *offsets) + struct.pack("<3I", 0, 0, 0) + b"".join(pieces)
    extra = struct.pack("<iI", 0, 0)
    name = b"embeddings.word_embeddings.weight"
    directory = struct.pack("<i", 1) + struct.pack("<H", len(name)) + name + struct.pack("<BIQQ", 0, 24, 0, 96)
    seed("e5s1", "tiny", header + vocab + extra + directory)


def stable(value):
    """A run's results without what changes between runs: timings, the commit, and this
    checkout's path."""
    if isinstance(value, dict):
        return {k: 0.001 if "seconds" in k and isinstance(v, float) else
                "7ee7938b1aa52137e8f2773631eef0e0f686d310+dirty" if k == "git_commit" else stable(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [stable(v) for v in value]
    if isinstance(value, str) and value.startswith(str(ROOT) + "/"):
        return value[len(str(ROOT)) + 1:]
    return value


def pipeline_outputs(pipeline):
    if not Path(pipeline).is_file():
        print(f"make_fuzz_corpus: no {pipeline}; the outputs and hnsw_index seeds are left out", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bm25"
        subprocess.run([pipeline, "run", "--config", str(ROOT / "configs" / "bm25.toml"),
                        "--data", str(TINY), "--out", str(out)], check=True, capture_output=True)
        results = stable(json.loads((out / "results.json").read_text()))
        trec = head(out / "run.retriever.trec", 20)
        seed("outputs", "bm25", joined(json.dumps(results, indent=1).encode(),
                                       (out / "metrics.json").read_bytes(), trec))
    seed("served", "embeddings", b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2]},'
         b'{"object":"embedding","index":1,"embedding":[0.3,0.4]},{"object":"embedding","index":2,"embedding":[0.5,0.6]}],'
         b'"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}}')
    seed("served", "embeddings-base64", b'{"data":[{"index":0,"embedding":"AACAPwAAAEA="}]}')
    seed("served", "rerank", b'{"id":"r","model":"m","results":[{"index":2,"relevance_score":0.1},'
         b'{"index":0,"relevance_score":0.9},{"index":1,"relevance_score":-1.5}]}')
    seed("served", "tei", b'[{"index":1,"score":0.5},{"index":0,"score":0.25},{"index":2,"score":0.0}]')
    seed("served", "classify", b'{"data":[{"index":0,"probs":[0.2,0.8],"num_classes":2},{"index":1,"probs":[0.5]},'
         b'{"index":2,"probs":[0.1,0.9]}]}')
    seed("served", "models", b'{"object":"list","data":[{"id":"m","object":"model","root":"/srv/models/m",'
         b'"max_model_len":512,"created":1}]}')
    seed("served", "error", b'{"error":{"message":"model not found","type":"NotFound","code":404}}')
    seed("served", "detail", b'{"detail":"Input validation error"}')
    seed("served", "retry-after", b"Wed, 21 Oct 2026 07:28:00 GMT")
    seed("served", "retry-seconds", b"120")


def hnsw(pipeline):
    """index.json \\0 graph \\0 data of the index `pipeline run` saves for the tiny data (MiniLM)."""
    model = MODELS / "all-MiniLM-L6-v2"
    if not model.is_dir() or not Path(pipeline).is_file():
        print("make_fuzz_corpus: no MiniLM or pipeline; the hnsw_index seed is left out", file=sys.stderr)
        return
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "hnsw.toml"
        config.write_text(f"""[data]
dir = "{TINY}"
[embedder]
model = "{model}"
[retriever]
kind = "dense"
index = "hnsw"
top_n = 5
[retriever.hnsw]
m = 4
ef_construction = 8
ef_search = 8
deterministic = true
[eval]
k = [5]
[output]
dir = "{tmp}/out"
cache = "{tmp}/cache"
""")
        subprocess.run([pipeline, "run", "--config", str(config)], check=True, capture_output=True)
        (index,) = (Path(tmp) / "cache" / "hnsw").iterdir()
        header, graph, vectors = [(index / n).read_bytes() for n in ["index.json", "graph.hnsw.graph", "graph.hnsw.data"]]
        seed("hnsw_index", "tiny-minilm", joined(header, sized(graph, vectors)))


# Tokens of each format, beside the keys found in the target's seeds.
FORMAT_TOKENS = {
    "json": ['{', '}', '[', ']', ':', ',', '"', 'null', 'true', 'false', '-1', '0', '1e309', '-0.0',
             '18446744073709551615', '9007199254740993', '\\u0000', '\\ud800'],
    "toml": ['[', ']', '[[', ']]', ' = ', '"', "'", '"""', 'true', 'false', 'inf', 'nan', '-0',
             '18446744073709551615', '9223372036854775807', '1e400', '#', '\n'],
    "trec": [' Q0 ', ' 0 ', '\t', '\n', ' 1 ', ' -1 ', ' nan ', ' inf ', ' 1e308 ', '\r\n'],
    "jinja": ['{{', '}}', '{%', '%}', '{#', '#}', 'for', 'endfor', 'if', 'endif', 'set', 'range(',
              'messages', 'message', 'loop', '|tojson', '|length', '~', 'raise_exception(', 'macro',
              'endmacro', 'call', 'namespace(', 'add_generation_prompt', 'strftime_now('],
    "binary": ['E5S1', '\x00\x00\x00\x00', '\xff\xff\xff\x7f', '\xff\xff\xff\xff',
               '\x20\x00\x00\x00', '\x01\x00\x00\x00'],
}

FORMATS = {
    "run_config": ["toml"], "train_config": ["toml"], "skills": ["json"], "data_dir": ["json"],
    "qrels": ["json", "trec"], "trec_run": ["trec"], "official_json": ["json"], "eval": ["json", "trec"],
    "outputs": ["json", "trec"], "safetensors": ["json", "binary"], "safetensors_structured": ["binary"],
    "model_config": ["json"], "model_config_structured": ["binary"], "tokenizer": ["json"],
    "sentence_transformers": ["json"], "chat_template": ["jinja"], "e5s1": ["binary"],
    "hnsw_index": ["json", "binary"], "cache": ["binary"], "checkpoint": ["json", "binary"],
    "served": ["json"],
}


def dict_escape(token):
    """A token as libFuzzer's dictionaries write it: printable ASCII, else \\xNN (binary tokens'
    characters below 256 are their bytes)."""
    raw = token.encode("latin-1") if all(ord(c) < 256 for c in token) else token.encode()
    return "".join(chr(b) if 0x20 <= b < 0x7F and chr(b) not in '"\\' else f"\\x{b:02x}" for b in raw)


def dictionaries():
    """fuzz/dictionaries/TARGET.dict: the format's tokens and every key of the target's seeds."""
    import re
    out = ROOT / "fuzz" / "dictionaries"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for folder in sorted(CORPUS.iterdir()):
        tokens = []
        for fmt in FORMATS[folder.name]:
            tokens += FORMAT_TOKENS[fmt]
        keys = set()
        for path in folder.iterdir():
            text = path.read_bytes().decode("utf-8", "replace")
            keys.update(re.findall(r'"([A-Za-z_][A-Za-z0-9_.]{1,40})"\s*:', text))
            keys.update(f"[{k}]" for k in re.findall(r"^\[([a-z_.]+)\]", text, re.M))
            keys.update(f"{k} = " for k in re.findall(r"^([a-z_]+) = ", text, re.M))
        tokens += sorted(keys)
        lines = [f'k{i}="{dict_escape(token)}"' for i, token in enumerate(tokens)]
        (out / f"{folder.name}.dict").write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=str(ROOT / "target" / "debug" / "pipeline"))
    args = parser.parse_args()
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    configs()
    data()
    models()
    weights()
    e5s1()
    cache_and_checkpoint()
    pipeline_outputs(args.pipeline)
    hnsw(args.pipeline)
    dictionaries()
    for folder in sorted(CORPUS.iterdir()):
        print(f"{folder.name}: {sum(1 for _ in folder.iterdir())} seeds")


if __name__ == "__main__":
    main()
