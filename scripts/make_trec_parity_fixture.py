#!/usr/bin/env python3
"""Make the pytrec_eval parity fixture for the eval crate's metrics.

Random qrels (grades 0..3, queries judged only non-relevant, judged queries
absent from the run, run queries without judgements, empty rankings) and
random runs with many score ties, scored per query by pytrec_eval.

    pip install pytrec_eval-terrier==0.5.11
    python3 scripts/make_trec_parity_fixture.py

Writes crates/eval/tests/data/parity/{qrels.trec,run.trec,run.json,expected.json}.
"""

import json
import platform
import random
import sys
from importlib import metadata
from pathlib import Path

import pytrec_eval

SEED = 20261130
CUTOFFS = [1, 2, 3, 5, 10, 15, 20]
OUT = Path(__file__).resolve().parent.parent / "crates/eval/tests/data/parity"


def doc_id(rng):
    # Ids of different lengths, cases and scripts so that tie-breaking by byte
    # order (not by number, not by locale) is exercised.
    stem = rng.choice(["d", "D", "skill-", "cap.x.", "gh:o/r:", "é", "z"])
    return f"{stem}{rng.randrange(0, 60)}"


def make(rng, n_queries):
    qrels, run = {}, {}
    for i in range(n_queries):
        qid = f"q{i:03d}" if rng.random() < 0.9 else f"Q-{i}"
        kind = rng.random()
        pool = sorted({doc_id(rng) for _ in range(rng.randrange(1, 40))})
        if kind < 0.85:
            judged = rng.sample(pool, rng.randrange(1, min(len(pool), 8) + 1))
            grades = {d: rng.choice([0, 0, 1, 1, 1, 2, 3]) for d in judged}
            if kind < 0.08:
                grades = {d: 0 for d in judged}  # judged, nothing relevant
            qrels[qid] = grades
        if kind < 0.78 or kind > 0.85:
            depth = rng.randrange(1, min(len(pool), 30) + 1)
            docs = rng.sample(pool, depth)
            levels = [round(rng.uniform(-1, 1), 1) for _ in range(4)]
            run[qid] = {
                d: (rng.choice(levels) if rng.random() < 0.6 else rng.uniform(-5, 5))
                for d in docs
            }
    return qrels, run


def evaluate(qrels, run):
    measures = {
        "ndcg_cut." + ",".join(map(str, CUTOFFS)),
        "recall." + ",".join(map(str, CUTOFFS)),
        "P." + ",".join(map(str, CUTOFFS)),
        "map_cut." + ",".join(map(str, CUTOFFS)),
        "success." + ",".join(map(str, CUTOFFS)),
        "recip_rank",
    }
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


def main():
    rng = random.Random(SEED)
    qrels, run = make(rng, 120)
    # TREC text cannot express an empty ranking; the JSON run adds two.
    json_run = dict(run)
    for qid in [q for q in qrels if q not in run][:2]:
        json_run[qid] = {}

    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "qrels.trec", "w") as fh:
        for qid in sorted(qrels):
            for doc in sorted(qrels[qid]):
                fh.write(f"{qid} 0 {doc} {qrels[qid][doc]}\n")
    with open(OUT / "run.trec", "w") as fh:
        # Deliberately unsorted, with a meaningless rank column.
        for qid in run:
            for rank, (doc, score) in enumerate(run[qid].items()):
                fh.write(f"{qid} Q0 {doc} {rank * 7 % 5} {score!r} random\n")
    with open(OUT / "run.json", "w") as fh:
        json.dump({"retrieval": {"test": json_run}}, fh, indent=1, ensure_ascii=False)

    header = {
        "tool": "pytrec_eval-terrier",
        "version": metadata.version("pytrec_eval-terrier"),
        "python": platform.python_version(),
        "command": "python3 scripts/make_trec_parity_fixture.py",
        "seed": SEED,
        "note": "per-query values from pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)",
    }
    expected = {
        "generated_by": header,
        "cutoffs": CUTOFFS,
        "trec": evaluate(qrels, run),
        "json": evaluate(qrels, json_run),
    }
    with open(OUT / "expected.json", "w") as fh:
        json.dump(expected, fh, indent=1, sort_keys=False, ensure_ascii=False)
        fh.write("\n")
    print(
        f"{len(qrels)} judged queries, {len(run)} run queries, "
        f"{len(expected['trec'])} scored; wrote {OUT}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
