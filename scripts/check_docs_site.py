"""Check the built docs site at a 1280 px window in headless chromium (Debian's, driven by
Playwright as in tests/test_admin_browser.py): on every page, no code block or table is
cut (wider than the content column or than its scroll box: a reader would have to
scroll sideways to see all of it), and every
figure of docs/img renders at the column's width with its smallest text at 11 px or more.

    .venv/bin/mkdocs build && .venv/bin/python scripts/check_docs_site.py [site] [--shots DIR]

The smallest text of a figure is ``benchmarks.figstyle.SMALL`` points at the PNG's own DPI
(its pHYs chunk), scaled by the rendered width over the natural width. Exits 1 on a problem.
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.figstyle import SMALL  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
MIN_PX = 11.0
FIGURES = {"algorithms.png", "gcra-trace.png", "regions-day.png", "shedding.png"} | {
    p.name for p in (ROOT / "docs" / "img").glob("peers-*.png")}

MEASURE = r"""() => {
  const content = document.querySelector('.md-content__inner') || document.body;
  const column = content.getBoundingClientRect().width;
  const cut = [];
  for (const el of content.querySelectorAll('pre > code, table')) {
    // cut: wider than the column, or than the box that scrolls it (a reader must scroll to see it all)
    const box = el.closest('.md-typeset__scrollwrap') || el;
    const right = el.getBoundingClientRect().right, limit = content.getBoundingClientRect().right;
    if (right > limit + 1 || box.scrollWidth > box.clientWidth + 1)
      cut.push(`${el.tagName} ${box.scrollWidth} px in ${box.clientWidth}: ` +
               el.innerText.slice(0, 50).replace(/\s+/g, ' '));
  }
  const images = [...content.querySelectorAll('img')].map(i => ({
    src: i.getAttribute('src'), width: i.getBoundingClientRect().width, natural: i.naturalWidth}));
  return {column, cut, images};
}"""


def png_dpi(path: Path) -> float | None:
    data = path.read_bytes()
    at = data.find(b"pHYs")
    if at < 0:
        return None
    x, _, unit = struct.unpack(">IIB", data[at + 4:at + 13])
    return x * 0.0254 if unit == 1 else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("site", nargs="?", default=str(ROOT / "site"))
    parser.add_argument("--shots", default="", help="also write a full-page screenshot of each page here")
    args = parser.parse_args()
    site = Path(args.site)
    pages = sorted(p for p in site.rglob("index.html") if "assets" not in p.parts and p.parent.name != "404")
    from playwright.sync_api import sync_playwright

    problems = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        for html in pages:
            name = str(html.parent.relative_to(site)) or "index"
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            found = page.evaluate(MEASURE)
            problems += [f"{name}: cut {what}" for what in found["cut"]]
            for image in found["images"]:
                file = Path(image["src"]).name
                if file not in FIGURES:
                    continue
                dpi = png_dpi(ROOT / "docs" / "img" / file) or 100.0
                px = SMALL * dpi / 72 * image["width"] / max(image["natural"], 1)
                full = image["width"] >= found["column"] - 2
                print(f"{name}: {file} {image['width']:.0f} of {found['column']:.0f} px, smallest text {px:.1f} px")
                if not full or px < MIN_PX:
                    problems.append(f"{name}: {file} renders {image['width']:.0f} px wide in a "
                                    f"{found['column']:.0f} px column, smallest text {px:.1f} px")
            if args.shots:
                Path(args.shots).mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(Path(args.shots) / (name.replace("/", "-") + ".png")), full_page=True)
        browser.close()
    for problem in problems:
        print("PROBLEM", problem)
    print(f"{len(pages)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
