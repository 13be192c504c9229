"""The HTML report at the size of the whole SkillRet test split: its bytes and how long Chromium
takes to open it.

    python3 scripts/bench_report.py [--pipeline target/release/pipeline] [--work DIR]

Writes a synthetic finished run as large as the test split (17,810 skills with SKILL.md bodies
of the sample's sizes, 2,319 queries of the sample's lengths with 1-3 gold skills each, three
stages: dense top 100, a fusion of it, a reranker over the top 20), builds its report with
`pipeline report`, and opens it in headless Chromium (Playwright, Debian's chromium) three
times: the time until the summary is drawn, then until a query's view is drawn after a click.
Prints the machine, the size and the medians. The texts are drawn from the shared sample's
skills and queries (../shared/skillret-sample), so their lengths are real; the rankings are random.
"""

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "..", "shared", "skillret-sample")
SKILLS, QUERIES = 17_810, 2_319


def write_run(work):
    rng = random.Random(7)
    real_skills = [json.loads(l) for l in open(os.path.join(SAMPLE, "skills", "test.jsonl"))]
    real_queries = [json.loads(l) for l in open(os.path.join(SAMPLE, "queries", "test.jsonl"))]
    data = os.path.join(work, "data")
    for sub in ("skills", "queries", "qrels"):
        os.makedirs(os.path.join(data, sub), exist_ok=True)
    ids = [f"skill-{i:05d}" for i in range(SKILLS)]
    majors = ["development", "data", "devops", "ai-agents", "documents", "security", "design", "business"]
    with open(os.path.join(data, "skills", "test.jsonl"), "w") as f:
        for i, sid in enumerate(ids):
            s = real_skills[i % len(real_skills)]
            major = majors[i % len(majors)]
            f.write(json.dumps({"id": sid, "name": f"{s['name']}-{i}", "description": s["description"],
                                "skill_md": s["skill_md"], "major": major, "sub": f"{major}-{i % 5}"}) + "\n")
    qids = [f"q-{i:05d}" for i in range(QUERIES)]
    gold = {q: rng.sample(ids, rng.choice([1, 1, 2, 2, 3])) for q in qids}
    with open(os.path.join(data, "queries", "test.jsonl"), "w") as f:
        for i, q in enumerate(qids):
            f.write(json.dumps({"id": q, "query": real_queries[i % len(real_queries)]["query"]}) + "\n")
    with open(os.path.join(data, "qrels", "test.jsonl"), "w") as f:
        for q in qids:
            for s in gold[q]:
                f.write(json.dumps({"query_id": q, "skill_id": s, "relevance": 1}) + "\n")
    run = os.path.join(work, "run")
    os.makedirs(run, exist_ok=True)
    stages = {"dense": [], "retriever": [], "reranker": []}
    for q in qids:
        ranked = rng.sample(ids, 100)
        for s in gold[q]:
            if rng.random() < 0.8 and s not in ranked:
                ranked[rng.randrange(40)] = s
        stages["dense"].append((q, ranked))
        fused = ranked[:]
        for _ in range(10):
            a, b = rng.randrange(100), rng.randrange(100)
            fused[a], fused[b] = fused[b], fused[a]
        stages["retriever"].append((q, fused))
        top = fused[:20]
        rng.shuffle(top)
        stages["reranker"].append((q, top))
    for name, lists in stages.items():
        with open(os.path.join(run, f"run.{name}.trec"), "w") as f:
            for q, docs in lists:
                for r, d in enumerate(docs):
                    f.write(f"{q} Q0 {d} {r + 1} {len(docs) - r} {name}\n")
    results = {
        "config": "synthetic.toml",
        "protocol": {"data": {"Dir": data}, "split": "test", "k": [5, 10, 15], "skill_ids_filter": None,
                     "reranker": {"combine": "replace"}},
        "scores": {name: {"queries": QUERIES} for name in stages},
        "changes": [{"stage": "retriever", "against": "dense"}, {"stage": "reranker", "against": "retriever"}],
    }
    json.dump(results, open(os.path.join(run, "results.json"), "w"))
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pipeline", default=os.path.join(ROOT, "target", "release", "pipeline"))
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "bench-report"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    shutil.rmtree(args.work, ignore_errors=True)
    run = write_run(args.work)
    started = time.perf_counter()
    subprocess.run([args.pipeline, "report", run], check=True, stdout=subprocess.DEVNULL)
    build_s = time.perf_counter() - started
    report = os.path.join(run, "report.html")
    size = os.path.getsize(report)
    chromium = shutil.which("chromium")
    opened, query = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for _ in range(args.repeat):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            t0 = time.perf_counter()
            page.goto("file://" + report)
            page.wait_for_selector("#summary-table")
            opened.append(time.perf_counter() - t0)
            page.click('nav a[data-view="queries"]')
            page.wait_for_selector("#queries tbody tr")
            t0 = time.perf_counter()
            page.click("#queries tbody tr")
            page.wait_for_selector("#query-title")
            query.append(time.perf_counter() - t0)
            assert not errors, errors
            page.close()
        browser.close()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}")
    print(f"chromium: {subprocess.run([chromium, '--version'], capture_output=True, text=True).stdout.strip()}")
    print(f"synthetic run: {SKILLS} skills, {QUERIES} queries, 3 stages (dense top 100, fusion, reranker top 20)")
    print(f"pipeline report: {build_s:.2f} s")
    print(f"report.html: {size / 1e6:.2f} MB")
    print(f"open to summary drawn: median {statistics.median(opened):.2f} s ({', '.join(f'{x:.2f}' for x in opened)})")
    print(f"query view after a click: median {statistics.median(query) * 1000:.0f} ms")


if __name__ == "__main__":
    sys.exit(main())
