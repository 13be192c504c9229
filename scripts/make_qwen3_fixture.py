#!/usr/bin/env python3
"""Reference outputs of transformers / sentence-transformers (PyTorch) for the Qwen3 tests.

On the TEST checkpoints of scripts/make_qwen3_models.py and the shared SkillRet sample
(official document text `name | description | skill_md`):

1. Checks the checkpoints: transformers loads each with no missing or unexpected weights;
   a `Qwen3ForCausalLM` saved by transformers has exactly our reranker's tensor names;
   sentence-transformers 6.2 re-saves the embedding model's module files exactly as written.
2. crates/embedder/tests/data/qwen3_reference.json:
   - token ids (length, sha256 of the ids as u32 little-endian, first 64 and last 16 ids) as
     sentence-transformers tokenises the first 200 skills (encode_document: no prompt) and the
     24 queries (encode_query: the model's query prompt) at max_seq_length 32768;
   - sentence-transformers embeddings (f32) of the first 64 skills at max_seq_length 1024 and
     the 24 queries, batch size 16 (ragged, right-padded batches);
   - a long document (sample skills joined by blank lines) embedded at 2,000, 8,000 and
     16,000 tokens.
3. crates/reranker/tests/data/qwen3_reference.json: the official SkillRet `Qwen3RankModel`
   computation (prefix + content truncated to max_length − |prefix| − |suffix| + suffix,
   left-padded batches of 8, P(yes) = softmax over the "no"/"yes" logits of the last
   position) on 200 (query, skill) pairs — query k mod 24 with skill k: the first 200 skills
   and all 24 queries — at max_length 8192, and the first 40 of them at max_length 512
   (truncated); token ids hashed as above.
4. crates/embedder/tests/data/st6-minilm/: the module files sentence-transformers 6.2 writes
   when it saves models/all-MiniLM-L6-v2 (JSON only; the weights stay in models/).

    pip install sentence-transformers==6.2.0 transformers==5.24.0 torch==2.15.0
    scripts/fetch-models.sh && python3 scripts/make_qwen3_models.py
    python3 scripts/make_qwen3_fixture.py [--sample ../shared/skillret-sample]
"""

import argparse
import base64
import hashlib
import json
import platform
import shutil
import struct
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
EMBEDDING = ROOT / "models/test-qwen3-embedding"
RERANKER = ROOT / "models/test-qwen3-reranker"
PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
    'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n'
)
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a skill search query, judge whether the skill document is relevant and useful for the query"
LONG_LENGTHS = [2000, 8000, 16000]


def skill_text(skill):
    # The official recipe (load_corpus + build_skill_text).
    body = skill.get("skill_md") or ""
    if not body.strip():
        body = skill.get("description", "")
    return f"{(skill.get('name') or '').strip()} | {(skill.get('description') or '').strip()} | {(body or '').strip()}"


def long_document(skills):
    """The long document of the tests: skill texts in file order joined by blank lines, 90,000+ characters."""
    parts, size = [], 0
    for s in skills:
        parts.append(skill_text(s))
        size += len(parts[-1])
        if size > 90000:
            break
    return "\n\n".join(parts)


def digest(ids):
    ids = [int(i) for i in ids]
    return {
        "len": len(ids),
        "sha256": hashlib.sha256(struct.pack(f"<{len(ids)}I", *ids)).hexdigest(),
        "head": ids[:64],
        "tail": ids[-16:],
    }


def vectors(array):
    array = np.asarray(array, dtype="<f4")
    return {"dim": int(array.shape[1]), "f32le_base64": base64.b64encode(array.tobytes()).decode()}


def header(command, what):
    return {
        "tool": "sentence-transformers / transformers (PyTorch), float32 on the CPU",
        "sentence_transformers": metadata.version("sentence-transformers"),
        "transformers": metadata.version("transformers"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "command": command,
        "what": what,
    }


def check_checkpoints():
    from transformers import AutoModel, AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

    model, info = AutoModel.from_pretrained(EMBEDDING, dtype=torch.float32, output_loading_info=True)
    assert type(model).__name__ == "Qwen3Model", type(model)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    model, info = AutoModelForCausalLM.from_pretrained(RERANKER, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight), "lm_head is not tied"
    with tempfile.TemporaryDirectory() as tmp:
        Qwen3ForCausalLM(Qwen3Config.from_pretrained(RERANKER)).save_pretrained(tmp)
        from safetensors import safe_open

        with safe_open(Path(tmp) / "model.safetensors", "pt") as theirs, safe_open(RERANKER / "model.safetensors", "pt") as ours:
            assert set(theirs.keys()) == set(ours.keys()), set(theirs.keys()) ^ set(ours.keys())
    print("checkpoints: transformers loads both with no missing or unexpected weights; layouts match")


def check_st_files(st):
    """sentence-transformers 6.2 writes the embedding model's module files as our generator does."""
    with tempfile.TemporaryDirectory() as tmp:
        st.save(tmp)
        for name in ["modules.json", "1_Pooling/config.json", "2_Normalize/config.json", "sentence_bert_config.json"]:
            assert json.loads((Path(tmp) / name).read_text()) == json.loads((EMBEDDING / name).read_text()), name
        for name, volatile in [
            ("config_sentence_transformers.json", ["__version__"]),
            ("tokenizer_config.json", ["is_local", "local_files_only"]),
        ]:
            theirs = json.loads((Path(tmp) / name).read_text())
            ours = json.loads((EMBEDDING / name).read_text())
            for key in volatile:
                theirs.pop(key, None)
                ours.pop(key, None)
            assert theirs == ours, (name, theirs, ours)
    print("sentence-transformers 6.2 saves the module files exactly as make_qwen3_models.py writes them")


def save_st6_minilm():
    from sentence_transformers import SentenceTransformer

    out = ROOT / "crates/embedder/tests/data/st6-minilm"
    st = SentenceTransformer(str(ROOT / "models/all-MiniLM-L6-v2"), device="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        st.save(tmp)
        if out.exists():
            shutil.rmtree(out)
        for path in sorted(Path(tmp).rglob("*.json")):
            rel = path.relative_to(tmp)
            if rel.name in ("tokenizer.json", "vocab.json"):
                continue
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / rel)
    (out / "README.md").write_text(
        "# all-MiniLM-L6-v2's module files as sentence-transformers 6.2 saves them\n\n"
        f"Written by `python3 scripts/make_qwen3_fixture.py` (sentence-transformers {metadata.version('sentence-transformers')}, "
        f"transformers {metadata.version('transformers')}, torch {torch.__version__}): "
        "`SentenceTransformer('models/all-MiniLM-L6-v2').save(dir)`, JSON files only. "
        "The tests add the weights and tokenizer from models/all-MiniLM-L6-v2.\n"
    )
    print(f"{out}: written")


def official_p_yes(model, tokenizer, queries, docs, max_length, batch=8):
    """The official SkillRet `Qwen3RankModel._score_batch`, in float32."""
    prefix = tokenizer.encode(PREFIX, add_special_tokens=False)
    suffix = tokenizer.encode(SUFFIX, add_special_tokens=False)
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    pairs = [f"<Instruct>: {INSTRUCTION}\n<Query>: {q}\n<Document>: {d}" for q, d in zip(queries, docs)]
    scores, ids_out = [], []
    for start in range(0, len(pairs), batch):
        inputs = tokenizer(
            pairs[start : start + batch],
            padding=False,
            truncation=True,
            return_attention_mask=False,
            max_length=max_length - len(prefix) - len(suffix),
        )
        for j, ids in enumerate(inputs["input_ids"]):
            inputs["input_ids"][j] = prefix + ids + suffix
            ids_out.append(inputs["input_ids"][j])
        inputs = tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=max_length)
        with torch.inference_mode():
            hidden = model.model(**inputs).last_hidden_state[:, -1:, :]
            logits = model.lm_head(hidden).squeeze(1)
        stacked = torch.stack([logits[:, no], logits[:, yes]], dim=1)
        scores.extend(torch.nn.functional.log_softmax(stacked, dim=1)[:, 1].exp().tolist())
    return scores, ids_out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", default=str(ROOT.parent / "shared/skillret-sample"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sample = Path(args.sample)
    skills = [json.loads(l) for l in open(sample / "skills/test.jsonl") if l.strip()]
    queries = [json.loads(l) for l in open(sample / "queries/test.jsonl") if l.strip()]
    command = "python3 scripts/make_qwen3_fixture.py"

    check_checkpoints()
    st = SentenceTransformer(str(EMBEDDING), device="cpu", model_kwargs={"dtype": torch.float32})
    check_st_files(st)
    save_st6_minilm()

    # 2. The embedding model.
    st.max_seq_length = 32768
    docs = [skill_text(s) for s in skills[:200]]
    qs = [q["query"] for q in queries]
    query_prompt = st.prompts["query"]
    tokens = {
        "documents": [digest(st.preprocess([d])["input_ids"][0]) for d in docs],
        "queries": [digest(st.preprocess([query_prompt + q])["input_ids"][0]) for q in qs],
    }
    st.max_seq_length = 1024
    doc_vectors = st.encode_document(docs[:64], batch_size=16, convert_to_numpy=True)
    query_vectors = st.encode_query(qs, batch_size=16, convert_to_numpy=True)
    long_text = long_document(skills)
    long = []
    for length in LONG_LENGTHS:
        st.max_seq_length = length
        ids = st.preprocess([long_text])["input_ids"][0]
        assert len(ids) == length, (length, len(ids))
        long.append({"max_length": length, "ids": digest(ids), "vector": vectors(st.encode_document([long_text]))})
    out = {
        "generated_by": header(command, "models/test-qwen3-embedding on skillret-sample: token ids, embeddings, a long document"),
        "query_prompt": query_prompt,
        "tokens_max_length": 32768,
        "tokens": tokens,
        "embeddings": {
            "max_length": 1024,
            "batch_size": 16,
            "document_ids": [s["id"] for s in skills[:64]],
            "documents": vectors(doc_vectors),
            "query_ids": [q["id"] for q in queries],
            "queries": vectors(query_vectors),
        },
        "long_document": {"recipe": "skill texts in file order joined by \\n\\n until 90,000+ characters", "lengths": long},
    }
    path = ROOT / "crates/embedder/tests/data/qwen3_reference.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{path}: written")

    # 3. The reranker, as the official evaluation scores.
    tokenizer = AutoTokenizer.from_pretrained(RERANKER, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(RERANKER, dtype=torch.float32).eval()
    n = 200
    pair_queries = [queries[k % len(queries)]["query"] for k in range(n)]
    pair_docs = [skill_text(s) for s in skills[:n]]
    runs = []
    for max_length, count in [(8192, n), (512, 40)]:
        scores, ids = official_p_yes(model, tokenizer, pair_queries[:count], pair_docs[:count], max_length)
        runs.append({"max_length": max_length, "p_yes": scores, "tokens": [digest(i) for i in ids]})
    out = {
        "generated_by": header(command, "models/test-qwen3-reranker, the official SkillRet Qwen3RankModel scoring"),
        "instruction": INSTRUCTION,
        "pairs": {"recipe": "query k mod 24 (by file order) with skill k (by file order)", "count": n},
        "query_ids": [queries[k % len(queries)]["id"] for k in range(n)],
        "skill_ids": [s["id"] for s in skills[:n]],
        "runs": runs,
    }
    path = ROOT / "crates/reranker/tests/data/qwen3_reference.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"{path}: written")


if __name__ == "__main__":
    main()
