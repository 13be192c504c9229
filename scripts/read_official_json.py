#!/usr/bin/env python3
"""Reads an official SkillRet output JSON the way the official code reads it, and checks it.

Written from skillretbenchmark/SKILLRET `skillret/eval.py` at commit dbbdf22 (MIT): `eval_rerank`'s
reading of a first stage (lines 1005-1013: `load_json`, `.get("retrieval", ...)`, the split or the
first value) and its candidate cut (`sorted(candidates.items(), key=lambda x: x[1], reverse=True)
[:from_top_k]`), `_normalize_query_labels` for the judgements, and `trec_eval` (lines 381-416:
pytrec_eval over map_cut/ndcg_cut/recall/P at 5, 10, 15, Completeness = share of queries with
recall 1, means rounded with round(x, 5)).

    python3 scripts/read_official_json.py FILE --data ../shared/skillret-sample [--split test]
        [--from-top-k N --candidates OUT.tsv]

It recomputes the metrics from the file's `retrieval` with pytrec_eval and compares them with the
file's own `metrics` (every key, exactly); with --candidates it writes the candidates eval_rerank
would rescore at depth N (`query<TAB>skill` lines, in its order). Exit 1 on any difference.
Needs `pip install pytrec_eval-terrier==0.5.11`.
"""
import argparse
import json
import sys
from pathlib import Path

import pytrec_eval


def load_json(path):
    with Path(path).open("r", encoding="utf-8") as f:
        return json.load(f)


def load_jsonl(path):
    with Path(path).open("r", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def normalize_query_labels(item):
    if "labels" in item:
        labels = item["labels"]
        if isinstance(labels, str):
            labels = json.loads(labels)
        return labels
    if "skill_ids" in item:
        return [{"id": sid, "relevance": 1} for sid in item["skill_ids"]]
    raise KeyError(f"Query {item.get('id')} has neither 'labels' nor 'skill_ids'")


def trec_eval(qrels, results, k_values=(5, 10, 15)):
    ndcg = {f"NDCG@{k}": 0.0 for k in k_values}
    _map = {f"MAP@{k}": 0.0 for k in k_values}
    recall = {f"Recall@{k}": 0.0 for k in k_values}
    prec = {f"Precision@{k}": 0.0 for k in k_values}
    comp = {f"Completeness@{k}": 0.0 for k in k_values}
    map_string = "map_cut." + ",".join(str(k) for k in k_values)
    ndcg_string = "ndcg_cut." + ",".join(str(k) for k in k_values)
    recall_string = "recall." + ",".join(str(k) for k in k_values)
    precision_string = "P." + ",".join(str(k) for k in k_values)
    evaluator = pytrec_eval.RelevanceEvaluator(
        qrels, {map_string, ndcg_string, recall_string, precision_string}
    )
    scores = evaluator.evaluate(results)
    for query_id in scores:
        for k in k_values:
            ndcg[f"NDCG@{k}"] += scores[query_id][f"ndcg_cut_{k}"]
            _map[f"MAP@{k}"] += scores[query_id][f"map_cut_{k}"]
            recall[f"Recall@{k}"] += scores[query_id][f"recall_{k}"]
            prec[f"Precision@{k}"] += scores[query_id][f"P_{k}"]
            comp[f"Completeness@{k}"] += float(scores[query_id][f"recall_{k}"] == 1.0)
    n = max(len(scores), 1)
    normalize = lambda m: {k: round(v / n, 5) for k, v in m.items()}
    all_metrics = {}
    for m in [normalize(ndcg), normalize(_map), normalize(recall), normalize(prec), normalize(comp)]:
        all_metrics.update(m)
    return all_metrics


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--data", required=True, help="SkillRet directory (queries/<split>.jsonl)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--from-top-k", type=int)
    ap.add_argument("--candidates")
    args = ap.parse_args()

    first_stage_raw = load_json(args.file)
    first_stage = first_stage_raw.get("retrieval", first_stage_raw)
    if args.split in first_stage:
        task_results = first_stage[args.split]
    else:
        task_results = next(iter(first_stage.values())) if first_stage else {}

    queries = load_jsonl(Path(args.data) / "queries" / f"{args.split}.jsonl")
    qrels = {}
    for item in queries:
        qrels[item["id"]] = {str(x["id"]): int(x["relevance"]) for x in normalize_query_labels(item)}
    # eval.py scores the queries of its run; ours holds the same queries.
    results = {qid: task_results[qid] for qid in task_results}
    computed = trec_eval(qrels, results)
    written = first_stage_raw["metrics"][args.split]
    bad = [k for k in computed if written.get(k) != computed[k]]
    bad += [k for k in written if k not in computed]
    for k in computed:
        print(f"{k}\tfile {written.get(k)}\tpytrec_eval {computed[k]}")
    print(f"{len(results)} queries; {len(computed)} metrics; {len(bad)} differ")

    if args.from_top_k is not None:
        with open(args.candidates, "w", encoding="utf-8") as out:
            for item in queries:
                qid = item["id"]
                candidates_scores = task_results.get(qid, {})
                sorted_candidates = sorted(
                    candidates_scores.items(), key=lambda x: x[1], reverse=True
                )[: args.from_top_k]
                for sid, _ in sorted_candidates:
                    out.write(f"{qid}\t{sid}\n")
    if bad:
        print("differ: " + ", ".join(bad), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
