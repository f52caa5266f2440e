"""The self-contained interactive HTML report: ``write_html_report`` / ``shiftbench report``.

``out_dir/index.html`` is one file that opens from ``file://`` with no network: plotly.js is
inlined once in the head, the report's own CSS and JavaScript (``report/assets``) are inlined,
and a Content-Security-Policy allows only those exact inline scripts (by SHA-256), so nothing
can be fetched and no injected handler could run. Next to it, every figure is written as
PNG, SVG and PDF (matplotlib, :mod:`.figures`) and every table as CSV, Markdown and LaTeX
(:mod:`.tables`), per testbed under ``out_dir/<testbed>/``.

The page is built from the section registry (:mod:`.sections`): with ``highlight``, first
"Your models" (their effective robustness, interval and rank on every shift); then per testbed
an overview, the interactive scatter of each shift, one at a time behind a selector (trend,
bootstrap band, y = x, Clopper-Pearson bars, colour by model type, hover with name, type,
accuracies and effective robustness; ImageNet-A with its piecewise trend; highlighted models as
labelled stars on top; a family of shifts such as one per corruption is one group of the
selector), synthetic vs natural effective robustness, and the sortable table of every model
(metadata, accuracy and effective robustness on every shift); then report-wide sections such as
calibration from a results store. A section without data is left out; a shift whose trend
cannot be fitted says why. The sticky table of contents folds each testbed's sections under it,
so every section is at most two clicks away.

Example
-------
>>> import shiftbench as sb                                              # doctest: +SKIP
>>> from shiftbench.report import write_html_report                      # doctest: +SKIP
>>> write_html_report([sb.load_testbed("imagenet-reference")], "report") # doctest: +SKIP
PosixPath('report/index.html')
"""
from __future__ import annotations

import base64
import hashlib
import importlib
import os
import pkgutil
import re
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path

from shiftbench.analysis.scaling import check_scale
from shiftbench.errors import ConfigError, did_you_mean
from shiftbench.reference import data_notes
from shiftbench.report.cache import CACHE_DIR, ReportCache, SharedCache
from shiftbench.report.figures import DEFAULT_FORMATS, FORMATS, FigureWriter
from shiftbench.report.sections import (
    Rendered,
    ReportContext,
    TestbedReport,
    esc,
    prefetch_sections,
    render_sections,
)
from shiftbench.report.shifts import NATURAL_SHIFTS, ShiftPair, analyse_shift
from shiftbench.testbed import Testbed


def _import_section_modules() -> None:
    """Import every ``shiftbench.report.section_*`` module: each registers its sections (a module
    that re-registers an existing key replaces that section and keeps its place)."""

    import shiftbench.report as package  # deferred: loads Pillow, loads matplotlib, loads plotly, loads pyarrow

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name.startswith("section_"):
            importlib.import_module(f"shiftbench.report.{info.name}")


_import_section_modules()

_SCRIPT = re.compile(r"<script(?: type=\"text/javascript\")?>(.*?)</script>", re.DOTALL)


def _asset(name: str) -> str:
    text = resources.files("shiftbench.report").joinpath("assets", name).read_text(encoding="utf-8")
    if re.search(r"</(script|style)", text, re.IGNORECASE):   # would end the inline element early
        raise ConfigError(f"report asset {name} contains a closing script/style tag; it cannot be inlined")
    return text


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs  # deferred: loads plotly

    return get_plotlyjs()


def _csp(document: str) -> str:
    """A Content-Security-Policy allowing exactly the inline scripts of ``document``."""
    hashes = sorted({"'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode() + "'"
                     for body in _SCRIPT.findall(document)})
    return ("default-src 'none'; script-src " + " ".join(hashes) + "; style-src 'unsafe-inline'; "
            "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'")


#: With more table-of-contents entries than this, each testbed's list starts folded.
TOC_OPEN_ENTRIES = 24


def _toc(groups: Sequence[tuple[str, str, list[Rendered]]]) -> str:
    """The sticky side bar: one entry per testbed and report-wide section; a testbed's sections
    are a ``<details>`` list under it, so every section is at most two clicks from any place on the
    page (open the testbed, pick the section). The lists start open when the whole is short."""
    open_ = " open" if sum(len(c) for _, _, c in groups) + len(groups) <= TOC_OPEN_ENTRIES else ""
    items = []
    for title, anchor, children in groups:
        link = f'<a href="#{esc(anchor)}">{esc(title)}</a>'
        if not children:
            items.append(f"<li>{link}</li>")
            continue
        sub = "".join(f'<li><a href="#{esc(c.anchor)}">{esc(c.title)}</a></li>' for c in children)
        items.append(f"<li><details{open_}><summary>{link}</summary><ul>{sub}</ul></details></li>")
    return (f'<nav class="sb-toc" aria-label="Contents"><p class="sb-toc-title">Contents</p>'
            f'<ul>{"".join(items)}</ul></nav>')


def _check_testbeds(testbeds: Sequence[Testbed]) -> list[Testbed]:
    testbeds = list(testbeds)
    if not testbeds:
        raise ConfigError("write_html_report needs at least one testbed; e.g. load_testbed('imagenet-reference')")
    for tb in testbeds:
        if not isinstance(tb, Testbed):
            raise ConfigError(f"{tb!r} is not a Testbed; load it with shiftbench.load_testbed(name_or_path)")
    return testbeds


def _check_highlight(testbeds: Sequence[Testbed], highlight: Sequence[str] | None) -> tuple[str, ...]:
    """The highlighted models, each in some testbed (else a did-you-mean error), without repeats."""
    if highlight is None:
        return ()
    if isinstance(highlight, str):
        highlight = [highlight]
    known = {m for tb in testbeds for m in tb.models}
    for m in highlight:
        if str(m) not in known:
            raise ConfigError(did_you_mean("model", str(m), sorted(known), "highlight names models of the testbeds"))
    return tuple(dict.fromkeys(str(m) for m in highlight))


def _testbed_dirname(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-.") or "testbed"
    out, i = base, 2
    while out in taken:
        out, i = f"{base}-{i}", i + 1
    taken.add(out)
    return out


def _open_store(store: str | Path | None):
    if store is None:
        return None
    from shiftbench.store import Store  # deferred: loads pyarrow

    return Store.existing(store)


Shifts = Sequence[ShiftPair] | Mapping[str, Sequence[ShiftPair]]


def shifts_for(testbed: Testbed, shifts: Shifts) -> list[ShiftPair]:
    """The shifts analysed on ``testbed``: ``shifts`` itself, or its entry for the testbed's name
    when it maps names to shifts (testbeds not named get :data:`NATURAL_SHIFTS`)."""
    if isinstance(shifts, Mapping):
        return list(shifts.get(testbed.name, NATURAL_SHIFTS))
    return list(shifts)


def n_steps(testbeds: Sequence[Testbed], shifts: Shifts = NATURAL_SHIFTS) -> int:
    """How many times :func:`write_html_report` calls ``on_step`` (for a progress bar's total)."""
    return sum(2 * len(shifts_for(tb, shifts)) + 1 for tb in testbeds) + 1


def _analyse(ctx: ReportContext, testbeds: Sequence[Testbed], shifts: Shifts) -> None:
    """Fit every shift of every testbed (a failure is recorded with its reason, not raised)."""
    taken: set[str] = set()
    for tb in testbeds:
        analyses = []
        for shift in shifts_for(tb, shifts):
            ctx.step(f"{tb.name}: {shift.label}")
            analyses.append(analyse_shift(tb, shift, scale=ctx.scale, n_resamples=ctx.n_resamples, seed=ctx.seed))
        ctx.testbeds.append(TestbedReport(tb, analyses, ctx.out_dir / _testbed_dirname(tb.name, taken),
                                          anchor=ctx.anchor("tb", tb.name)))


def _body(ctx: ReportContext, title: str) -> str:
    """The page body: header, table of contents, then every section that has data."""
    groups: list[tuple[str, str, list[Rendered]]] = []
    blocks = []
    for tbr in ctx.testbeds:            # the slow analyses start in the analysis process, beside the sections
        prefetch_sections(ctx, "testbed", tbr)
    prefetch_sections(ctx, "report", None)
    for r in render_sections(ctx, "front", None):          # "Your models" comes first
        groups.append((r.title, r.anchor, []))
        blocks.append(r.html)
    for tbr in ctx.testbeds:
        target = ctx.steps + len(tbr.analyses) + 1
        rendered = render_sections(ctx, "testbed", tbr)
        groups.append((tbr.testbed.name, tbr.anchor, rendered))
        notes = "".join(f'<p class="sb-note">Data note: {esc(n)}</p>' for n in data_notes(tbr.testbed.source))
        blocks.append(f'<section class="sb-testbed" id="{esc(tbr.anchor)}"><h2>{esc(tbr.testbed.name)}</h2>'
                      + notes + "".join(r.html for r in rendered) + "</section>")
        while ctx.steps < target:                           # shifts without data draw nothing
            ctx.step(f"{tbr.testbed.name}: sections")
    for r in render_sections(ctx, "report", None):
        groups.append((r.title, r.anchor, []))
        blocks.append(r.html)
    ctx.step("writing index.html")
    names = ", ".join(f"{t.testbed.name} ({len(t.testbed)} models)" for t in ctx.testbeds)
    formats = ", ".join(f[1:].upper() for f in ctx.figure_formats)
    files = f"Static figures ({formats}) and tables" if formats else "Tables"
    return (f'<header class="sb-header" id="top"><h1>{esc(title)}</h1>'
            f"<p>Effective robustness under distribution shift: {esc(names)}.</p>"
            f"<p>Generated {esc(time.strftime('%Y-%m-%d %H:%M'))} by shiftbench. Figures: drag to zoom, "
            "double-click to reset, click a legend entry to hide or show a model type. "
            f"{files} (CSV, Markdown, LaTeX) are in the folders next to this file.</p></header>"
            f'<div class="sb-layout">{_toc(groups)}<main>{"".join(blocks)}</main></div>')


def _document(title: str, body: str) -> str:
    """The whole page: plotly.js and the report's CSS/JS inlined, under a CSP allowing only them."""
    head_scripts = f"<script>{_plotly_js()}</script>"
    tail_scripts = f"<script>{_asset('report.js')}</script>"
    csp = _csp(head_scripts + body + tail_scripts)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_asset('report.css')}</style>{head_scripts}</head>"
            f"<body>{body}{tail_scripts}</body></html>\n")


def write_html_report(
    testbeds: Sequence[Testbed],
    out_dir: str | Path,
    *,
    store: str | Path | None = None,
    shifts: Shifts = NATURAL_SHIFTS,
    n_resamples: int = 1000,
    scale: str = "logit",
    seed: int = 0,
    figure_formats: Sequence[str] = DEFAULT_FORMATS,
    title: str = "shiftbench report",
    on_step: Callable[[str], None] | None = None,
    highlight: Sequence[str] | None = None,
    cache: bool = True,
) -> Path:
    """Write ``out_dir/index.html`` (self-contained) plus static figures and tables; returns its path.

    Parameters
    ----------
    testbeds:
        The testbeds to report on, each in its own part of the page and folder ``out_dir/<name>/``.
    store:
        A results store directory (``shiftbench eval --store``); adds the calibration section.
    shifts:
        The (in-distribution, shifted) setting pairs to analyse; default the natural shifts of
        Taori et al. 2020. Or a mapping from testbed name to its own shifts (e.g. a digits
        testbed beside the ImageNet ones). Shifts a testbed has no settings for are listed, not drawn.
    n_resamples, seed:
        Bootstrap resamples (and seed) of each trend's 95% band.
    scale:
        Axis scaling of the trends: ``logit`` (default), ``probit`` or ``linear``.
    figure_formats:
        Static figure formats, any of ``.png``, ``.svg``, ``.pdf``; default PNG and PDF
        (:data:`~shiftbench.report.figures.DEFAULT_FORMATS`); empty to skip static figures.
    on_step:
        Called with a short label at each step - every shift's fit, every shift's drawing, the
        other sections, the page - :func:`n_steps` times in all (for progress bars).
    highlight:
        Models to mark (your own, say; each must be in some testbed): every shift's scatter draws
        them on top as labelled stars, and a "Your models" section comes first in the report with
        their effective robustness, 95% interval and rank on every shift
        (:func:`~shiftbench.analysis.placement.place_models`).
    cache:
        Keep the results of the slow analyses (metric informativeness, label-free estimates,
        model similarity) and a content hash of every static figure in
        ``out_dir/.shiftbench-cache/``, so that a rebuild recomputes and redraws only what changed,
        and the same results and figure files by content hash in the cache shared by every report
        on this machine (``$SHIFTBENCH_CACHE_DIR``, default ``~/.cache/shiftbench/report``), so that
        a report built into a new folder copies what an earlier report already drew
        (:mod:`shiftbench.report.cache`); ``False`` computes and draws everything.
    """
    testbeds = _check_testbeds(testbeds)
    check_scale(scale)
    if n_resamples < 1:
        raise ConfigError(f"n_resamples={n_resamples}: the bootstrap bands need at least 1 resample (1000 is usual)")
    bad = [f for f in figure_formats if f not in FORMATS]
    if bad:
        raise ConfigError(f"figure format {bad[0]!r}: use {', '.join(FORMATS)} (or none)")
    marked = _check_highlight(testbeds, highlight)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: is a file; give a directory for the report (-o DIR)")
    out.mkdir(parents=True, exist_ok=True)
    opened = _open_store(store)
    kept = out / CACHE_DIR if cache else None
    shared = SharedCache.default() if cache else None
    ctx = ReportContext(out_dir=out, testbeds=[], store_results=opened.results() if opened else None, store=opened,
                        scale=scale,
                        n_resamples=n_resamples, seed=seed, figure_formats=tuple(figure_formats), on_step=on_step,
                        highlight=marked, figures=FigureWriter(cache=kept, shared=shared),
                        cache=ReportCache(kept, shared))
    try:
        _analyse(ctx, testbeds, shifts)
        document = _document(title, _body(ctx, title))
    except (KeyboardInterrupt, SystemExit):
        ctx.figures.abort()  # interrupted: end the figure and analysis workers now
        raise
    finally:
        ctx.figures.wait()   # every static figure written (or its error raised) before the page
    path = out / "index.html"
    tmp = path.with_name(f".index.html.{os.getpid()}.tmp")
    tmp.write_text(document, encoding="utf-8")
    tmp.replace(path)
    ctx.cache.prune()      # a finished build keeps only what it used
    return path
