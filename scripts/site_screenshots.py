"""Screenshots of the results site for docs/site/: serves the site's test database (the SIWLM
paper's table, a three-seed study and a study with a hostile name) and photographs each page in
Chromium through Playwright.

    python scripts/site_screenshots.py [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PAGES = {"studies": "/", "study": "/ui/studies/demo/rte",
         "recommend": "/ui/recommend?train_size=5000", "across": "/ui/across"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium"),
                        help="a Chromium binary (default: chromium on the PATH)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "site")
    args = parser.parse_args()
    if not args.chromium:
        parser.error("--chromium: no Chromium found; apt-get install chromium, or give its path")
    from playwright.sync_api import sync_playwright

    from tests.helpers import real_server
    from tests.site_data import site_database

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder, \
            real_server(site_database(Path(folder))) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium,
                                             args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        for name, path in PAGES.items():
            page.goto(base + path)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(args.out / f"{name}.png"), full_page=True)
            print(f"wrote {args.out / f'{name}.png'}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
