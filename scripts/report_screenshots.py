"""Screenshots of a run's report.html, one per view, in headless Chromium (Playwright, Debian's
chromium): the pictures in the README come from this script.

    python3 scripts/report_screenshots.py RUN_DIR OUT_DIR [--prefix NAME] [--query ID]

Writes OUT_DIR/<prefix>-summary.png, -attribution.png, -transitions.png, -depth.png,
-slices.png, -queries.png and -query.png (the query ID opened, else the first query whose
NDCG@10 changed most), each 1400 px wide. Fails on any console error.
"""

import argparse
import os
import shutil
import sys

from playwright.sync_api import sync_playwright


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--prefix", default="report")
    ap.add_argument("--query")
    ap.add_argument("--height", type=int, default=900)
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    url = "file://" + os.path.abspath(os.path.join(args.run_dir, "report.html"))
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": args.height})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        for view in ["summary", "attribution", "transitions", "depth", "slices", "queries"]:
            page.click(f'nav a[data-view="{view}"]')
            page.wait_for_selector(f"#view-{view}")
            if view == "queries":
                page.click('button.sort[data-sort="delta"]')
                page.wait_for_selector('button.sort[data-sort="delta"]:has-text("▲")')
            shot = os.path.join(args.out_dir, f"{args.prefix}-{view}.png")
            page.screenshot(path=shot)
            print(shot)
        query = args.query or page.eval_on_selector("#queries tbody tr", "r => r.dataset.query")
        page.click(f'#queries tr[data-query="{query}"]')
        page.wait_for_selector("#query-title")
        shot = os.path.join(args.out_dir, f"{args.prefix}-query.png")
        page.screenshot(path=shot)
        print(shot)
        browser.close()
    if errors:
        print(f"console errors: {errors}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
