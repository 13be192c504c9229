#!/usr/bin/env python3
"""Recomputes a run's query-focus deltas (focus.json / focus.tsv) with the reference libraries.

    python3 scripts/check_focus.py RUN_DIR --data DIR [--model DIR]

RUN_DIR is the output of `pipeline run --query-focus`; DIR the data it ran on. The sentences are
read from focus.json (their character offsets), the variants built from them as the pipeline
builds them (`text[:start] + text[end:]` without a sentence, `text[start:end]` alone), and every
focus.tsv row of a dense or BM25 stage is recomputed over the whole corpus:
  - dense (with --model): sentence-transformers, with the run's prompts, length and
    normalisation (results.json's protocol; else the model's own, `encode_query` /
    `encode_document`), scores as numpy float32 inner products;
  - BM25: bm25s 0.3.16 as the official baseline runs it (`bm25s.tokenize(texts, stopwords="en")`,
    default `BM25()`); a query of no known token is searched as "none", as the pipeline does.
Ranks are exact over the corpus in trec_eval's order (score descending, id descending). Prints,
per stage, the worst score differences and the rank mismatches; exits 1 where a score differs by
more than --tolerance (default 1e-5, relative to max(1, |score|)) or a rank differs.

Needs numpy, sentence-transformers and bm25s==0.3.16 (pip).
"""

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np


def strip(text):
    """Python's str.strip(), as the pipeline's py_strip."""
    return text.strip()


def document_text(skill):
    body = skill.get("skill_md") or ""
    if not strip(body):
        body = skill.get("description") or ""
    return f"{strip(skill.get('name') or '')} | {strip(skill.get('description') or '')} | {strip(body)}"


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def variants(text, sentences):
    """The full request, each sentence left out, each alone (the pipeline's order)."""
    out = [text]
    out += [text[:s] + text[e:] for s, e in sentences]
    out += [text[s:e] for s, e in sentences]
    return out


def ranks(scores, ids, at):
    """1-based rank of document `at` in trec_eval's order over the whole corpus."""
    s = scores[at]
    return int(np.sum(scores > s) + np.sum((scores == s) & (ids > ids[at])) + 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--data", required=True)
    parser.add_argument("--model", help="the dense stage's model directory")
    parser.add_argument("--split", default="test")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    run = Path(args.run)
    data = Path(args.data)
    focus = json.loads((run / "focus.json").read_text())
    protocol = json.loads((run / "results.json").read_text())["protocol"]
    kind = protocol["retriever"]["kind"]
    skills = read_jsonl(data / "skills" / f"{args.split}.jsonl")
    queries = {q["id"]: q["query"] for q in read_jsonl(data / "queries" / f"{args.split}.jsonl")}
    doc_ids = [s["id"] for s in skills]
    # Byte order of ids, as the pipeline compares them (UTF-8 bytes).
    ids = np.array([i.encode() for i in doc_ids], dtype=object)
    position = {d: i for i, d in enumerate(doc_ids)}
    texts = [document_text(s) for s in skills]

    # Which stage of focus.json is which scorer.
    stages = {"dense": "dense", "bm25": "bm25"} if kind == "hybrid" else {"retriever": kind}
    scorers = {}
    if "dense" in stages.values():
        if not args.model:
            sys.exit("check_focus: the run has a dense stage; pass --model DIR")
        from sentence_transformers import SentenceTransformer

        # The run's protocol: its prompts (else the model's own), length and normalisation.
        embedder = protocol["embedder"]
        model = SentenceTransformer(args.model, device="cpu")
        if embedder.get("normalize") is False:
            kept = [m for m in model if type(m).__name__ != "Normalize"]
            model = SentenceTransformer(modules=kept, device="cpu")
        if embedder.get("max_length"):
            model.max_seq_length = embedder["max_length"]

        def encode(batch, kind):
            prompt = embedder.get(f"{kind}_prompt")
            if prompt is not None:
                out = model.encode(batch, prompt=prompt, batch_size=32, convert_to_numpy=True)
            elif kind == "query":
                out = model.encode_query(batch, batch_size=32, convert_to_numpy=True)
            else:
                out = model.encode_document(batch, batch_size=32, convert_to_numpy=True)
            return out.astype(np.float32)

        docs = encode(texts, "document")

        def dense(batch):
            return encode(batch, "query") @ docs.T

        scorers["dense"] = dense
    if "bm25" in stages.values():
        import bm25s

        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        vocab = retriever.vocab_dict

        def bm25(batch):
            out = []
            for text in batch:
                tokens = bm25s.tokenize([text], stopwords="en", return_ids=False, show_progress=False)[0]
                tokens = [t for t in tokens if t in vocab] or (["none"] if "none" in vocab else [])
                scores = retriever.get_scores(tokens) if tokens else np.zeros(len(doc_ids))
                out.append(np.asarray(scores, dtype=np.float32))
            return np.stack(out)

        scorers["bm25"] = bm25

    rows = {}
    with open(run / "focus.tsv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            rows.setdefault(row["stage"], []).append(row)

    failed = False
    for stage, scorer_name in stages.items():
        scorer = scorers[scorer_name]
        by_query = {}
        for row in rows.get(stage, []):
            by_query.setdefault(row["query_id"], []).append(row)
        worst = {"score": 0.0, "delta_score": 0.0, "alone_score": 0.0}
        mismatches, checked = [], 0
        for q in focus["queries"]:
            qid, sentences = q["query_id"], q["sentences"]
            scores = scorer(variants(queries[qid], sentences))
            n = len(sentences)
            for row in by_query.get(qid, []):
                i, at = int(row["sentence"]), position[row["skill_id"]]
                full, without, alone = scores[0], scores[1 + i], scores[1 + n + i]
                want = {
                    "score": float(full[at]),
                    "delta_score": float(full[at]) - float(without[at]),
                    "alone_score": float(alone[at]),
                    "rank": ranks(full, ids, at),
                    "delta_rank": ranks(without, ids, at) - ranks(full, ids, at),
                    "alone_rank": ranks(alone, ids, at),
                }
                for key in worst:
                    diff = abs(float(row[key]) - want[key]) / max(1.0, abs(want[key]))
                    worst[key] = max(worst[key], diff)
                    if diff > args.tolerance:
                        failed = True
                for key in ["rank", "delta_rank", "alone_rank"]:
                    if int(row[key]) != want[key]:
                        mismatches.append(f"{qid} sentence {i} {row['skill_id']}: {key} {row[key]} != {want[key]}")
                checked += 1
        print(f"{stage} ({scorer_name}): {checked} rows; worst relative differences: "
              + ", ".join(f"{k} {v:.2e}" for k, v in worst.items())
              + f"; rank mismatches: {len(mismatches)}")
        for m in mismatches[:10]:
            print("  " + m)
        failed |= bool(mismatches)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
