"""Checks a `pipeline run` report.html in a real browser (headless Chromium through Playwright).

    python3 tests/browser/check_report.py RUN_DIR [--hostile HOSTILE_RUN_DIR] [--screenshots DIR]

RUN_DIR is a `pipeline run` output directory with a reranker (report.html, metrics.json,
per_query.tsv, and focus.json / focus.tsv where it ran with --query-focus); the expected
figures come from metrics.json, per_query.tsv and focus.tsv, not from the page's own data.
HOSTILE_RUN_DIR is a run whose data has a skill with markup and a script in its name,
description and body, and a request with them in a sentence: they must show as text and run
nothing.

Exit status: 0 when every check passed, 1 when one failed (the message says which), 2 when
Playwright or Chromium is missing (`pip install playwright` and Debian's `chromium`; Playwright's
own browser download is not used).
"""

import argparse
import csv
import json
import os
import shutil
import sys

try:
    from playwright.sync_api import sync_playwright
except ImportError:
    print("skipped: Python's playwright is not installed (pip install playwright)")
    sys.exit(2)

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def read_focus_tsv(run_dir):
    """{(stage, query, skill): [(sentence, delta_score, intent)]} from focus.tsv."""
    out = {}
    with open(os.path.join(run_dir, "focus.tsv"), newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            key = (row["stage"], row["query_id"], row["skill_id"])
            out.setdefault(key, []).append((int(row["sentence"]), float(row["delta_score"]), row["intent"] == "1"))
    return out


def read_per_query(run_dir):
    """{stage: {query: {"ndcg": NDCG@10, "ranks": {skill: rank or None}}}} from per_query.tsv."""
    out = {}
    with open(os.path.join(run_dir, "per_query.tsv"), newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            ranks = {}
            for item in filter(None, row["relevant_ranks"].split(",")):
                skill, _, rank = item.rpartition(":")
                ranks[skill] = None if rank == "-" else int(rank)
            out.setdefault(row["stage"], {})[row["query"]] = {"ndcg": float(row["NDCG@10"]), "ranks": ranks}
    return out


class Page:
    """A browser page that records console errors and uncaught exceptions."""

    def __init__(self, browser, url):
        self.errors = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)
        self.page.wait_for_selector("#app header")

    def view(self, name):
        self.page.click(f'nav a[data-view="{name}"]')
        self.page.wait_for_selector(f"#view-{name}")

    def count_is(self, n, total):
        """Waits until the query table lists n rows (a selector, not a script: the page's
        Content-Security-Policy refuses the eval that wait_for_function uses)."""
        self.page.wait_for_selector(f'#count:text-is("{n} of {total} queries")')

    def rows(self):
        return self.page.eval_on_selector_all("#queries tbody tr", "rs => rs.map(r => r.dataset.query)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--hostile")
    ap.add_argument("--leaderboard", help="a `pipeline sweep` output directory")
    ap.add_argument("--screenshots")
    args = ap.parse_args()
    if not CHROMIUM:
        print("skipped: no chromium on PATH (apt-get install chromium)")
        sys.exit(2)
    metrics = json.load(open(os.path.join(args.run_dir, "metrics.json")))
    per_query = read_per_query(args.run_dir)
    stages = [s for s in metrics if isinstance(metrics[s], dict) and "queries" in metrics[s]]
    check("reranker" in stages and "retriever" in stages, f"the run has a retriever and a reranker: {stages}")
    report = "file://" + os.path.abspath(os.path.join(args.run_dir, "report.html"))
    shots = args.screenshots
    if shots:
        os.makedirs(shots, exist_ok=True)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = Page(browser, report)
        pg = page.page

        # 1. The summary's NDCG@10 of every stage is metrics.json's.
        for stage in stages:
            shown = pg.inner_text(f'#summary-table td[data-stage="{stage}"][data-metric="NDCG@10"]')
            expected = f"{metrics[stage]['NDCG@10']:.4f}"
            check(shown == expected, f"summary NDCG@10 of {stage}: page {shown}, metrics.json {expected}")
        if shots:
            pg.screenshot(path=os.path.join(shots, "summary.png"), full_page=True)
        print(f"ok: the summary's NDCG@10 equals metrics.json's for {', '.join(stages)}")

        # 2. Attribution: the classes add up to the queries; harmed and rescued as per_query.tsv says.
        page.view("attribution")
        counts = pg.eval_on_selector_all(
            "#view-attribution .card[data-class]", "cs => cs.slice(0, 5).map(c => [c.dataset.class, Number(c.querySelector('b').textContent)])")
        first, later = per_query["retriever"], per_query["reranker"]
        check(sum(n for _, n in counts) == len(later), f"the classes add up to {len(later)} queries: {counts}")
        harmed = sorted(q for q in later if later[q]["ndcg"] < first[q]["ndcg"] - 1e-12)
        check(dict(counts).get("harmed") == len(harmed), f"harmed: page {counts}, per_query.tsv {len(harmed)}")
        if shots:
            pg.screenshot(path=os.path.join(shots, "attribution.png"), full_page=True)
        print(f"ok: attribution {dict(counts)}")

        # 3. Transitions: a click on a cell lists queries holding such a gold skill.
        page.view("transitions")
        if shots:
            pg.screenshot(path=os.path.join(shots, "transitions.png"), full_page=True)
        cell = pg.query_selector("table.matrix td:not(.zero)")
        check(cell is not None, "the transition matrix has a non-empty cell")
        cell.click()
        pg.wait_for_selector("#transition-chip")
        check(len(page.rows()) > 0, "a transition cell lists its queries")
        print(f"ok: a transition cell filters the queries ({len(page.rows())} rows)")

        page.view("depth")
        check(pg.query_selector("#depth-chart svg polyline") is not None, "the depth chart is drawn")
        if shots:
            pg.screenshot(path=os.path.join(shots, "depth.png"), full_page=True)
        page.view("slices")
        if shots:
            pg.screenshot(path=os.path.join(shots, "slices.png"), full_page=True)

        # 4. The query list: every query; a filter, a sort and a search change the rows as expected.
        page.view("queries")
        check(sorted(page.rows()) == sorted(later), f"the table lists every query: {len(page.rows())} of {len(later)}")
        pg.select_option("#filter-class", "harmed")
        page.count_is(len(harmed), len(later))
        check(sorted(page.rows()) == harmed, f"the harmed filter: {page.rows()} against {harmed}")
        pg.select_option("#filter-class", "")
        page.count_is(len(later), len(later))
        pg.click('button.sort[data-sort="delta"]')
        pg.wait_for_selector('button.sort[data-sort="delta"]:has-text("▲")')
        delta = {q: later[q]["ndcg"] - first[q]["ndcg"] for q in later}
        order = [delta[q] for q in page.rows()]
        check(order == sorted(order), "sorted by Δ, ascending")
        pg.click('button.sort[data-sort="delta"]')
        pg.wait_for_selector('button.sort[data-sort="delta"]:has-text("▼")')
        order = [delta[q] for q in page.rows()]
        check(order == sorted(order, reverse=True), "sorted by Δ, descending")
        some = sorted(later)[len(later) // 2]
        pg.fill("#search", some)
        pg.press("#search", "Enter")
        page.count_is(1, len(later))
        check(page.rows() == [some], f"the search for {some}: {page.rows()}")
        pg.fill("#search", "")
        pg.press("#search", "Enter")
        page.count_is(len(later), len(later))
        if shots:
            pg.screenshot(path=os.path.join(shots, "queries.png"), full_page=False)
        print("ok: the class filter, the sort by Δ and the search")

        # 5. A click on a query shows each stage's ranking, gold skills marked at their ranks.
        target = next(q for q in sorted(later) if any(r and r <= 20 for r in later[q]["ranks"].values()))
        pg.click(f'#queries tr[data-query="{target}"]')
        pg.wait_for_selector("#query-title")
        check(pg.inner_text("#query-title") == f"Query {target}", "the query opens")
        for stage in stages:
            expected = {s: r for s, r in per_query[stage][target]["ranks"].items() if r and r <= 20}
            marked = pg.eval_on_selector_all(
                f'.lists div[data-stage="{stage}"] li.gold', "ls => ls.map(l => [l.dataset.skill, Number(l.dataset.rank)])")
            check(dict(marked) == expected, f"{target} {stage}: gold marked {marked}, per_query.tsv {expected}")
            for skill, rank in per_query[stage][target]["ranks"].items():
                cell = pg.inner_text(f'#gold-table tr[data-skill="{skill}"] td[data-stage="{stage}"]')
                check(cell == (str(rank) if rank else "–"), f"{target} {stage} {skill}: rank {cell}, expected {rank}")
        if shots:
            pg.screenshot(path=os.path.join(shots, "query.png"), full_page=False)
        pg.click(".lists li.gold")
        pg.click("#show-body")
        pg.wait_for_selector("#skill-body:not([hidden])")
        check(len(pg.inner_text("#skill-body")) > 0, "a gold skill's body shows")
        print(f"ok: {target}'s rankings, gold skills marked at their ranks, a body on demand")

        # 5b. Query focus: the summary is focus.json's; every gold skill of every request has
        # its sentences shaded by focus.tsv's Δ score, the intent sentence marked; the query
        # view marks the intent sentences.
        if os.path.isfile(os.path.join(args.run_dir, "focus.json")):
            focus = json.load(open(os.path.join(args.run_dir, "focus.json")))
            tsv = read_focus_tsv(args.run_dir)
            page.view("focus")
            stage = list(focus["stages"])[-1]
            for name, st in focus["stages"].items():
                shown = pg.inner_text(f'#focus-summary td[data-stage="{name}"][data-key="focus_headroom"]').split("\n")[0]
                expected = f"{st['summary']['focus_headroom']['mean']:.4f}"
                check(shown == expected, f"focus headroom of {name}: page {shown}, focus.json {expected}")
            golds = 0
            for q in focus["queries"]:
                for skill in q["gold"]:
                    spans = pg.eval_on_selector_all(
                        f'.focus-query[data-query="{q["query_id"]}"] .focus-gold[data-gold="{skill}"] .sent',
                        "ss => ss.map(s => [Number(s.dataset.sentence), Number(s.dataset.delta), s.classList.contains('intent'), s.getAttribute('style') || ''])")
                    rows = sorted(tsv[(stage, q["query_id"], skill)])
                    check(len(spans) == len(q["sentences"]) == len(rows), f"{q['query_id']} {skill}: {len(spans)} sentences shown")
                    for (i, d, intent, style), (j, want, want_intent) in zip(spans, rows):
                        check(i == j and abs(d - want) <= 1e-9 * max(1, abs(want)), f"{q['query_id']} {skill} sentence {i}: Δ {d}, focus.tsv {want}")
                        check(intent == want_intent, f"{q['query_id']} {skill} sentence {i}: intent {intent}, focus.tsv {want_intent}")
                        check(abs(want) == 0 or "background" in style, f"{q['query_id']} {skill} sentence {i}: no shading")
                    golds += 1
            if shots:
                pg.screenshot(path=os.path.join(shots, "focus.png"), full_page=False)
            intents = {(q, i) for (st, q, _), rows in tsv.items() if st == stage for i, _, m in rows if m}
            some = sorted(intents)[0][0]
            pg.goto(report + f"#q={some}")
            pg.wait_for_selector("#query-title")
            marked = pg.eval_on_selector_all("#query-text mark.intent", "ms => ms.map(m => Number(m.dataset.sentence))")
            check(sorted(marked) == sorted(i for q, i in intents if q == some), f"{some}: intent sentences marked {marked}")
            if shots:
                pg.screenshot(path=os.path.join(shots, "focus-query.png"), full_page=False)
            pg.goto(report + f"#view=queries&q={target}")
            pg.wait_for_selector("#query-title")
            print(f"ok: query focus: {len(focus['stages'])} stage(s), {golds} gold skills shaded as focus.tsv says, intents marked")

        # 6. The hash holds the open query: a new page with the link reopens it.
        url = pg.url
        check(f"q={target}" in url, f"the open query is in the URL: {url}")
        again = Page(browser, url)
        check(again.page.inner_text("#query-title") == f"Query {target}", "the link reopens the query")
        check(not again.errors, f"console errors: {again.errors}")
        print(f"ok: the link {url.split('#')[1]} reopens the query")
        check(not page.errors, f"console errors: {page.errors}")
        print("ok: no console error")

        if args.hostile:
            url = "file://" + os.path.abspath(os.path.join(args.hostile, "report.html"))
            h = Page(browser, url)
            hp = h.page
            h.view("queries")
            hp.click("#queries tbody tr")
            hp.wait_for_selector("#query-title")
            item = hp.query_selector('.lists li[data-skill="hostile"]')
            check(item is not None, "the hostile skill is listed")
            check("</script>" in item.inner_text(), f"its name shows as text: {item.inner_text()!r}")
            item.click()
            hp.click("#show-body")
            hp.wait_for_selector("#skill-body:not([hidden])")
            body = hp.inner_text("#skill-body")
            check("</script><img src=x onerror=" in body, f"the body shows as text: {body[:200]!r}")
            check(hp.query_selector("img") is None, "no image element was made from the data")
            check(hp.evaluate("() => window.pwned === undefined && !document.title.includes('pwned')"),
                  "no script from the data ran")
            if os.path.isfile(os.path.join(args.hostile, "focus.json")):
                h.view("focus")
                sentences = hp.eval_on_selector_all(".focus-text .sent", "ss => ss.map(s => s.textContent)")
                check(any("<img src=x onerror=" in t for t in sentences), f"a hostile sentence shows as text: {sentences}")
                check(hp.query_selector("img") is None, "no image element was made from the request")
                print("ok: a request's sentence with </script><img onerror> shows as text in the focus view")
            check(not h.errors, f"console errors on the hostile report: {h.errors}")
            print("ok: a skill with </script><img onerror> in its name, description and body shows as text and runs nothing")
        if args.leaderboard:
            rows = json.load(open(os.path.join(args.leaderboard, "leaderboard.json")))["rows"]
            url = "file://" + os.path.abspath(os.path.join(args.leaderboard, "leaderboard.html"))
            lb = Page(browser, url)
            shown = lb.page.eval_on_selector_all("#leaderboard tbody tr", "rs => rs.length")
            check(shown == len(rows), f"the leaderboard shows {shown} of {len(rows)} rows")
            links = lb.page.eval_on_selector_all("#leaderboard tbody a", "as => as.map(a => a.href)")
            check(len(links) == len(rows) and all(os.path.isfile(l[len("file://"):]) for l in links),
                  f"each row links its run's report: {links}")
            bars = lb.page.eval_on_selector_all("#bars rect", "rs => rs.length")
            check(bars == len(rows), f"a bar per row: {bars}")
            check(not lb.errors, f"console errors on the leaderboard: {lb.errors}")
            if shots:
                lb.page.screenshot(path=os.path.join(shots, "leaderboard.png"))
            print(f"ok: the leaderboard shows its {len(rows)} rows, each linking its report")
        browser.close()
    print("browser checks passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}")
        sys.exit(1)
