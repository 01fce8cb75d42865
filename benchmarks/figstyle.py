"""One style for every figure of the docs (``docs/img/*.png``), so each renders legibly.

At a 1280 px window the docs' content column is about 1000 CSS px wide (mkdocs.yml puts
the table of contents in the navigation; ``scripts/check_docs_site.py`` measures it). A
figure ``WIDTH`` inches wide is drawn at ``DPI`` (1500 px), so it fills that column (images
scale down to it) and one point of font renders at about 1000 / (72 * WIDTH) = 1.85 px:
the smallest text here (``SMALL``, 9 pt) at about 16 px, and still 12.5 px in a 750 px
column (a narrower window, or the old layout with a right-hand sidebar). Panels are
stacked, never side by side, so each gets the whole width.
"""

from __future__ import annotations

from typing import Any

WIDTH = 7.5  # inches: the docs' content column at 1280 px
DPI = 200
SMALL, NORMAL, LARGE = 9, 11, 12  # points: tick and value labels, axis labels and legends, titles
PANEL_HEIGHT = 3.4  # inches per stacked panel

RC: dict[str, Any] = {
    "font.size": NORMAL, "axes.titlesize": LARGE, "axes.labelsize": NORMAL, "xtick.labelsize": SMALL + 1,
    "ytick.labelsize": SMALL + 1, "legend.fontsize": SMALL + 1, "figure.titlesize": LARGE,
    "savefig.dpi": DPI, "figure.dpi": 100,
}


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, with the docs' style applied."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(RC)
    return plt


def figure(panels: int = 1, height: float = PANEL_HEIGHT, **kwargs: Any) -> tuple[Any, Any]:
    """A figure of ``panels`` stacked panels, ``WIDTH`` wide (``plt.subplots``'s return)."""
    plt = pyplot()
    return plt.subplots(panels, 1, figsize=(WIDTH, height * panels), **kwargs)
