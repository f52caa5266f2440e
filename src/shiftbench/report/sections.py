"""The sections of the HTML report and the registry that orders them.

A section is a class registered with :func:`register_section`. It declares its ``scope`` (once
per testbed, or once per report), says in :meth:`Section.available` whether it has data, and
renders HTML in :meth:`Section.render` - writing its static figures (PNG/SVG/PDF) and tables
(CSV/Markdown/LaTeX) next to the report through the :class:`ReportContext`: a static figure is
best passed as its drawing function and arguments (:meth:`ReportContext.static_plot`), so that it
is built in the figure workers and never rebuilt while its arguments are unchanged. A section without
data is simply left out: users never see placeholders. To add a section, subclass
:class:`Section` in any module imported by :mod:`shiftbench.report.html` and decorate it.

Everything user-supplied (model, setting, testbed and type names, error messages) is escaped
here with :func:`esc` (HTML) or :func:`~shiftbench.report.interactive.plotly_text` (plotly);
tables are rendered by ``report.js`` with ``textContent``.
"""
from __future__ import annotations

import functools
import html
import itertools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar
from urllib.parse import quote

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from shiftbench.analysis import most_effectively_robust
from shiftbench.analysis.placement import fitted_on_note, place_models, skipped_lines, skipped_without_trend
from shiftbench.analysis.recipes import DEFAULTS
from shiftbench.analysis.trend import fit_note
from shiftbench.analysis.synthetic import (
    IMAGENET_C_ANY_MODE,
    IMAGENET_C_PATTERN,
    RECIPES,
    STANDARD_LIKE,
    SYNTHETIC,
    TAORI_FIT_EXCLUDE,
    TAORI_MIN_X,
    SyntheticVsNatural,
    complete_severities,
    corruption_correlations,
    corruption_settings,
    synthetic_effective_robustness,
    synthetic_vs_natural,
)
from shiftbench.errors import ConfigError, ShiftbenchError
from shiftbench.report.cache import ReportCache, store_stamp
from shiftbench.report.figures import (
    DEFAULT_FORMATS,
    MAX_LEGEND,
    FigureWriter,
    family_looks,
    plot_calibration,
    plot_corruption_correlation,
    plot_synthetic_vs_natural,
    plot_trend,
    plot_trend_inputs,
    setting_family,
)
from shiftbench.report.interactive import (
    calibration_figure,
    correlation_bars,
    plotly_text,
    synthetic_figure,
    trend_figure,
)
from shiftbench.report.shifts import ShiftAnalysis, fits_table
from shiftbench.report.tables import file_slug, placement_table, write_table
from shiftbench.store import Store
from shiftbench.testbed import Testbed

T = TypeVar("T")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True,
                 "toImageButtonOptions": {"format": "svg", "filename": "shiftbench-figure"},
                 # a short toolbar (download, zoom, pan, reset) leaves room for the title beside it
                 "modeBarButtonsToRemove": ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d",
                                            "hoverClosestCartesian", "hoverCompareCartesian", "toggleSpikelines"]}
#: Width (px) of a figure's box on a 1,400 px page, full and in a pair, and of plotly's toolbar.
PLOT_WIDTH, HALF_WIDTH, TOOLBAR = 980, 530, 130
#: The natural shift that synthetic robustness is compared with (Taori et al. 2020, Figure 5).
NATURAL_REFERENCE = "ImageNetV2"


def esc(text: object) -> str:
    """HTML-escape any text (quotes included) for element content and attribute values."""
    return html.escape(str(text), quote=True)


def slug(text: str) -> str:
    """A lowercase ``[a-z0-9-]`` identifier for anchors (:meth:`ReportContext.anchor` makes each
    unique on the page). Not for file names: different names share a slug (``a/b``, ``a-b``);
    files are named with :func:`~shiftbench.report.tables.file_slug`."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def json_for_script(obj: object) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``<``, ``>`` or ``&``)."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ---------------------------------------------------------------------------- context
@dataclass
class TestbedReport:
    """One testbed's share of the report: its shift analyses and output folder."""

    testbed: Testbed
    analyses: list[ShiftAnalysis]
    dir: Path
    anchor: str
    cache: dict[str, object] = field(default_factory=dict)

    @property
    def analysed(self) -> list[ShiftAnalysis]:
        """Analyses whose two settings are both in the testbed (fitted or not)."""
        tb = self.testbed
        return [a for a in self.analyses if a.shift.x in tb.settings and a.shift.y in tb.settings]

    @property
    def missing(self) -> list[ShiftAnalysis]:
        """Analyses of shifts this testbed has no data for."""
        return [a for a in self.analyses if a not in self.analysed]


@dataclass
class Rendered:
    """A rendered block of the page and its entry in the table of contents."""

    title: str
    anchor: str
    html: str


@dataclass
class ReportContext:
    """What sections read (testbeds, analyses, store results) and how they write files."""

    out_dir: Path
    testbeds: list[TestbedReport]
    store_results: pd.DataFrame | None = None
    #: The results store passed with ``--store`` (its studies: trajectories, sweeps, ...), if any.
    store: Store | None = None
    scale: str = "logit"
    n_resamples: int = 1000
    seed: int = 0
    figure_formats: Sequence[str] = DEFAULT_FORMATS
    on_step: Callable[[str], None] | None = None
    #: Models to highlight in every scatter and to place first, in the "Your models" section.
    highlight: tuple[str, ...] = ()
    #: writes the static figures (in a background process; ``FigureWriter(0)``: inline)
    figures: FigureWriter = field(default_factory=FigureWriter)
    #: results of slow analyses kept between builds (:mod:`.cache`; ``ReportCache(None)``: none)
    cache: ReportCache = field(default_factory=lambda: ReportCache(None))
    #: analyses started in a worker by :meth:`prefetch`, by cache key, until :meth:`memo` takes them
    _started: dict[str, Future] = field(default_factory=dict)
    _once: dict[str, object] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)
    _anchors: set[str] = field(default_factory=set)
    steps: int = 0

    def step(self, label: str) -> None:
        """Report progress (one unit of :func:`~shiftbench.report.html.n_steps`)."""
        self.steps += 1
        if self.on_step is not None:
            self.on_step(label)

    def anchor(self, *parts: str) -> str:
        """A unique element id built from ``parts``."""
        base = "-".join(slug(p) for p in parts)
        name, i = base, 2
        while name in self._anchors:
            name, i = f"{base}-{i}", i + 1
        self._anchors.add(name)
        return name

    def plot(self, fig: go.Figure, half: bool = False) -> str:
        """The HTML of an interactive figure (plotly.js itself is inlined once, in the head);
        ``half``: drawn half the page wide (:func:`pair_html`). A title that would run under
        plotly's toolbar is moved below it (:func:`clear_toolbar`)."""
        clear_toolbar(fig, HALF_WIDTH if half else PLOT_WIDTH)
        height = int(fig.layout.height or 500)
        div = pio.to_html(fig, full_html=False, include_plotlyjs=False, config=PLOTLY_CONFIG,
                          div_id=f"sb-plot-{next(self._ids)}", default_width="100%", default_height=f"{height}px",
                          validate=False)
        return f'<div class="sb-plot">{div}</div>'

    def memo(self, name: str, inputs: Sequence[object], compute: Callable[[], T], code: Sequence[object] = ()) -> T:
        """``compute()``, reused from the last build when ``inputs`` (tables, store stamps,
        parameters) and the source of ``code`` (modules or functions) are unchanged
        (:class:`~shiftbench.report.cache.ReportCache`), or taken from :meth:`prefetch`'s worker
        when it was started there under the same name, inputs and code."""
        key = self.cache.key(name, inputs, code)
        started = self._started.pop(key, None)
        if started is not None:
            compute = functools.partial(_collect, started, compute)
        return self.cache.get(name, inputs, compute, code, key=key)

    def once(self, name: str, compute: Callable[[], T]) -> T:
        """``compute()`` the first time ``name`` is asked for in this build, then its value: a
        section is instantiated for each call (``available``, ``prefetch``, ``render``), so what
        they all read from the store is computed here once."""
        if name not in self._once:
            self._once[name] = compute()
        return self._once[name]  # type: ignore[return-value]

    def store_stamp(self) -> pd.DataFrame:
        """:func:`~shiftbench.report.cache.store_stamp` of :attr:`store` (what every analysis of the
        store is keyed by), read once per build."""
        assert self.store is not None
        return self.once("store stamp", lambda: store_stamp(self.store))

    def prefetch(self, name: str, inputs: Sequence[object], fn: Callable[..., object], *args: object,
                 code: Sequence[object] = (), **kwargs: object) -> None:
        """Start ``fn(*args, **kwargs)`` in the analysis process now (:meth:`FigureWriter.compute`),
        for the later :meth:`memo` of the same ``name``, ``inputs`` and ``code`` to collect: a slow
        analysis then runs beside the sections built before it. Nothing starts when the cache
        holds the result or there are no workers; ``fn`` must be picklable (module level)."""
        key = self.cache.key(name, inputs, code)
        if key in self._started or self.cache.holds(name, key):
            return
        future = self.figures.compute(fn, *args, **kwargs)
        if future is not None:
            self._started[key] = future

    def link(self, path: Path) -> str:
        """A relative link to a file written under :attr:`out_dir`, labelled by its format."""
        rel = path.resolve().relative_to(self.out_dir.resolve()).as_posix()
        return f'<a href="{esc(quote(rel))}">{esc(path.suffix[1:].upper())}</a>'

    def static_figure(self, fig, stem: Path) -> str:
        """Save a matplotlib figure in every format; returns the links."""
        if not self.figure_formats:
            import matplotlib.pyplot as plt  # deferred: loads Pillow, loads matplotlib

            plt.close(fig)
            return ""
        paths = self.figures.save(fig, stem, self.figure_formats)
        return f'<p class="sb-files">Figure: {" · ".join(self.link(p) for p in paths)}</p>'

    def static_plot(self, stem: Path, draw: Callable[..., object], *args: object, **kwargs: object) -> str:
        """:meth:`static_figure` of ``draw(*args, **kwargs)`` (a module-level function returning a
        matplotlib figure), built in the figure workers rather than here and keyed by its arguments
        and its code (:meth:`static_figure_lazily`; the key holds ``draw``'s name and source):
        while they are unchanged the figure is not even built again."""
        return self.static_figure_lazily(functools.partial(draw, *args, **kwargs), stem,
                                         (args, sorted(kwargs.items())))

    def static_figure_lazily(self, build: Callable[[], object], stem: Path, inputs: tuple) -> str:
        """:meth:`static_figure` of ``build()``, built only when a file is not current under
        ``inputs`` (:meth:`~shiftbench.report.figures.FigureWriter.save_lazily`)."""
        if not self.figure_formats:
            return ""
        paths = self.figures.save_lazily(build, stem, self.figure_formats, inputs)
        return f'<p class="sb-files">Figure: {" · ".join(self.link(p) for p in paths)}</p>'

    def table(self, frame: pd.DataFrame, stem: Path, caption: str, what: str = "Table") -> str:
        """Write ``frame`` as CSV, Markdown and LaTeX; returns the links."""
        paths = write_table(frame, stem, caption=caption)
        return f'<p class="sb-files">{esc(what)}: {" · ".join(self.link(p) for p in paths)}</p>'


def _collect(started: Future[T], compute: Callable[[], T]) -> T:
    """The result of a prefetched analysis; its own errors (a :class:`ShiftbenchError`: too few
    models, say) are raised as :meth:`ReportContext.memo` would raise them, and any other failure
    of the worker (an argument that would not pickle, a worker that died) computes it here."""
    try:
        return started.result()
    except ShiftbenchError:
        raise
    except Exception:  # noqa: BLE001 - the worker failed, not the analysis: compute it in this process
        return compute()


def clear_toolbar(fig: go.Figure, width: int) -> go.Figure:
    """Move a title that would reach plotly's toolbar (top right, shown on hover) below it: the
    title's width is estimated from its characters (``0.55 em`` each) against a ``width`` px box."""
    title = fig.layout.title
    text = re.sub(r"<[^>]+>", "", str(title.text or ""))
    size = (title.font.size if title.font and title.font.size else 14)
    if not text or 12 + 0.55 * size * len(text) < width - TOOLBAR:
        return fig
    height = int(fig.layout.height or 500)
    top = fig.layout.margin.t if fig.layout.margin and fig.layout.margin.t is not None else 80
    fig.update_layout(title=dict(yref="container", y=1 - 34 / height, yanchor="top"),
                      margin=dict(t=max(int(top), 34 + int(size * 1.4) + 22)))
    return fig


# ---------------------------------------------------------------------------- registry
class Section:
    """Base class of report sections (see the module docstring)."""

    key: ClassVar[str] = ""
    title: ClassVar[str] = ""
    #: ``"testbed"``: rendered for each testbed; ``"report"``: once, after the testbeds;
    #: ``"front"``: once, before the testbeds.
    scope: ClassVar[str] = "testbed"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        """Whether the section has data to show (it is left out otherwise)."""
        return True

    def prefetch(self, ctx: ReportContext, tb: TestbedReport | None) -> None:
        """Start the section's slow analyses in a worker (:meth:`ReportContext.prefetch`) with
        the same name, inputs and code its :meth:`render` passes to :meth:`ReportContext.memo`;
        called, when :meth:`available`, for every section before the first renders."""

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        raise NotImplementedError


_SECTIONS: dict[str, type[Section]] = {}
SCOPES = ("testbed", "report", "front")


def register_section(cls: type[Section]) -> type[Section]:
    """Class decorator: add a section to the report (in registration order)."""
    if not cls.key or cls.scope not in SCOPES:
        raise ConfigError(f"{cls.__name__}: a section needs a key and scope 'testbed', 'report' or 'front'")
    _SECTIONS[cls.key] = cls
    return cls


def list_sections() -> dict[str, type[Section]]:
    """The registered sections, in page order."""
    return dict(_SECTIONS)


def section_html(anchor: str, title: str, body: str, level: int = 3) -> str:
    return (f'<section class="sb-section" id="{esc(anchor)}"><h{level}>{esc(title)}</h{level}>'
            f"{body}</section>")


def stored_studies(ctx: ReportContext, kind: str, required: set[str]) -> pd.DataFrame:
    """Every study of ``kind`` in the report's store (``Store.read_studies``), or an empty frame
    when there is no store, the studies cannot be read, or they lack a ``required`` column - the
    test a study-backed section's ``available`` makes."""
    if ctx.store is None:
        return pd.DataFrame()
    try:
        frame = ctx.store.read_studies(kind)
    except ShiftbenchError:
        return pd.DataFrame()
    return frame if required <= set(frame.columns) else pd.DataFrame()


def small_table(frame: pd.DataFrame, numeric: dict[str, str]) -> str:
    """A static HTML table (every cell escaped); ``numeric`` maps columns to format specs."""
    head = "".join(f'<th class="{"num" if c in numeric else ""}">{esc(c)}</th>' for c in frame.columns)
    body = []
    for row in frame.itertuples(index=False):
        cells = []
        for c, v in zip(frame.columns, row):
            if c in numeric:
                text = ("" if v is None or (isinstance(v, float) and not np.isfinite(v)) else
                        format(v, numeric[c]) if isinstance(v, (int, float, np.number)) else str(v))
                cells.append(f'<td class="num">{esc(text)}</td>')
            else:
                cells.append(f"<td>{esc(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="sb-small"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def pair_html(left: str, right: str) -> str:
    """Two figures side by side on a wide page (one above the other on a narrow one)."""
    return f'<div class="sb-pair"><div>{left}</div><div>{right}</div></div>'


def side_html(table: str, figure: str) -> str:
    """A figure with a table on its right: the table takes the width it needs, the figure the
    rest. The table comes first in the page (CSS places it on the right), so that plotly draws
    the figure at its final width rather than the page's."""
    return (f'<div class="sb-side"><div class="sb-side-table">{table}</div>'
            f'<div class="sb-side-main">{figure}</div></div>')


# ---------------------------------------------------------------------------- front sections
@register_section
class YourModelsSection(Section):
    """First in the report when models are highlighted (``highlight=...``): per testbed, each
    highlighted model's accuracies, effective robustness with its 95% interval and rank on
    every shift (:func:`~shiftbench.analysis.placement.place_models`), and which models the
    trends were fitted on."""

    key, title, scope = "your-models", "Your models", "front"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return bool(ctx.highlight)

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        parts = [f"<p>Where your models sit among the models of the testbed: on each natural shift, effective "
                 f"robustness = shifted accuracy minus what the trend of the standard models predicts at the same "
                 f"in-distribution accuracy (Taori et al. 2020), in percentage points (pp) with its 95% interval, "
                 f"and its rank among every model of the testbed evaluated on both settings (1 = most effectively "
                 f"robust).</p>"]
        for t in ctx.testbeds:
            mine = [m for m in ctx.highlight if m in t.testbed.models]
            if len(ctx.testbeds) > 1:
                parts.append(f"<h4>{esc(t.testbed.name)}</h4>")
            if not mine:
                parts.append(f'<p class="sb-note">None of your models is in {esc(t.testbed.name)}.</p>')
                continue
            shifts = [a.shift for a in t.analyses if a.fit is not None]
            placed = place_models(t.testbed, mine, shifts, scale=ctx.scale, n_resamples=ctx.n_resamples,
                                  seed=ctx.seed)
            parts.append(f'<p class="sb-note">{esc(fitted_on_note(placed.attrs["fits"], t.testbed, mine))}</p>')
            unplaced = placed.attrs.get("unplaced") or []
            if unplaced:
                parts.append('<p class="sb-note">Not placed (no shift with both accuracies): '
                             + ", ".join(f"<code>{esc(m)}</code>" for m in unplaced) + ".</p>")
            unfitted = [a for a in t.analyses if a.fit is None]
            skipped = placed.attrs["skipped"] + [
                e for a in unfitted for e in skipped_without_trend(t.testbed, mine, a.shift, a.error or "")]
            if skipped:       # every (model, shift) not placed, with the setting it lacks
                parts.append('<p class="sb-note">Not placed:</p><ul class="sb-note sb-skipped">'
                             + "".join(f"<li>{esc(line)}</li>" for line in skipped_lines(skipped)) + "</ul>")
            if len(placed):
                parts.append(small_table(placement_table(placed), {
                    "in-distribution %": ".2f", "shifted %": ".2f", "trend predicts %": ".2f"}))
                parts.append(ctx.table(placed, t.dir / "your_models",
                                       f"Your models on {t.testbed.name}: effective robustness (pp) and rank"))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]


# ---------------------------------------------------------------------------- testbed sections
@register_section
class OverviewSection(Section):
    """Counts, the fitted trends of every shift, and the shifts this testbed has no data for."""

    key, title = "overview", "Overview"

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        t = tb.testbed
        types = t.model_types.value_counts()
        parts = [f"<p>{len(t)} models, {len(t.settings)} settings; model types: "
                 + ", ".join(f"{esc(k)} {v}" for k, v in types.items()) + ". "
                 f'<span class="sb-muted">Trends are fitted in {esc(ctx.scale)} space on STANDARD models '
                 "(Taori et al. 2020), each by the recipe the table names (taori2020: the authors' model selection, "
                 "ImageNet-A as two lines; standard: every STANDARD model); bands are pointwise 95% bootstrap bands "
                 f"from {ctx.n_resamples} resamples; error bars are 99.5% Clopper–Pearson intervals; effective "
                 "robustness is in percentage points "
                 "(pp).</span></p>"]
        fits = fits_table(tb.analyses)
        if len(fits):
            # short headers (the CSV keeps its column names): the setting names wrap less
            shown = fits.rename(columns={"r2": "r²", "n_models": "models", "n_skipped": "skipped",
                                         "n_excluded": "left out", "excluded": "why left out"})
            parts.append(compact(small_table(shown, {"slope": ".3f", "intercept": ".3f", "r²": ".3f",
                                                     "models": "d", "skipped": "d", "slope_below": ".3f",
                                                     "intercept_below": ".3f", "left out": "d"})))
            parts.append(file_row(ctx.table(fits, tb.dir / "fits", f"Trend fits on {t.name}", "Fits")))
        if tb.missing:
            parts.append('<p class="sb-note">Not in this testbed: ' + "; ".join(
                f"{esc(a.shift.label)} (no setting <code>{esc(_missing_setting(t, a))}</code>)"
                for a in tb.missing) + ".</p>")
        anchor = ctx.anchor(tb.anchor, self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]


def _missing_setting(t: Testbed, a: ShiftAnalysis) -> str:
    return next(s for s in (a.shift.x, a.shift.y) if s not in t.settings)


@register_section
class ShiftSections(Section):
    """Per shift: the interactive scatter with its trend, the fit, and the top models; a shift
    whose trend cannot be fitted shows why (and its points, if any). The shifts of a testbed are
    one section showing one shift at a time (:func:`choice_html`), so that a testbed with many
    shifts (ten corruptions, say) stays one figure tall; each shift keeps its anchor."""

    key, title = "shifts", "Distribution shifts"
    top = 5

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return tb is not None and bool(tb.analysed)

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        """One section for all shifts of the testbed, one scatter at a time behind a selector
        (a family of shifts, e.g. one per corruption, is one group of options); the table of
        contents links each shift (each family once), and a link selects its scatter."""
        assert tb is not None
        items, entries = [], []
        for family, members in shift_families(tb.analysed):
            for j, a in enumerate(members):
                ctx.step(f"{tb.testbed.name}: drawing {a.shift.label}")
                anchor = ctx.anchor(tb.anchor, a.shift.slug)
                head = f"<h4>{esc(a.shift.label)}: {esc(a.shift.y)} vs {esc(a.shift.x)}</h4>"
                option = a.shift.label.split(": ", 1)[1] if family else a.shift.label
                items.append((option, anchor, head + self._body(ctx, tb, a), family))
                if j == 0:
                    entries.append(Rendered(f"{family} ({len(members)})" if family else a.shift.label, anchor, ""))
        anchor = ctx.anchor(tb.anchor, self.key)
        n = len(items)
        if n == 1:
            a = tb.analysed[0]
            title = f"{a.shift.label}: {a.shift.y} vs {a.shift.x}"
            return [Rendered(a.shift.label, items[0][1],
                             section_html(items[0][1], title, items[0][2].split("</h4>", 1)[1]))]
        title = f"{self.title} ({n})"
        # beside the selector, where "(n in all)" was: one line less
        note = f"({n} in all; every fit is in the Overview, every model on every shift in All models)"
        body = choice_html("Shift", items).replace(f"({n} in all)</span>", f"{note}</span>", 1)
        return [Rendered(title, anchor, section_html(anchor, title, body)), *entries]

    def _body(self, ctx: ReportContext, tb: TestbedReport, a: ShiftAnalysis) -> str:
        t, shift = tb.testbed, a.shift
        frame, skipped = t.paired(shift.x, shift.y)
        parts = []
        marked = [m for m in ctx.highlight if m in t.models]
        if a.fit is None:
            parts.append(f'<p class="sb-reason">No trend fitted: {esc(str(a.error).rstrip("."))}.</p>')
            if len(frame):
                fig = trend_figure(frame, x=shift.x, y=shift.y, title=f"{shift.label} ({t.name})", scale=ctx.scale,
                                   highlight=marked)
                parts.append(ctx.plot(fig))
            else:
                parts.append('<p class="sb-note">No model has both accuracies.</p>')
            return "".join(parts)
        f = a.fit
        ty, tx = ("y", "x") if f.scale == "linear" else (f"{f.scale}(y)", f"{f.scale}(x)")
        if f.kind == "two-line":
            at = f"{f.pivot_model}'s" if f.pivot_model else "the pivot's"
            desc = (f"Two independent lines for an adversarially filtered set, as Taori et al. (2020) fit ImageNet-A: "
                    f"split at {esc(at)} in-distribution accuracy ({f.pivot:.2f}%), {ty} = {f.below.slope:.3f} {tx} "
                    f"{f.below.intercept:+.3f} on the models below it and {ty} = {f.above.slope:.3f} {tx} "
                    f"{f.above.intercept:+.3f} on those above it; a model at or below the pivot is measured "
                    "against the lower line")
        elif f.kind == "piecewise":
            pivot_model = next((m for m in shift.pivot if m in t.models), "the pivot")
            desc = (f"Piecewise trend for an adversarially filtered set, shiftbench's variant (hinge): a continuous "
                    f"hinge at {esc(pivot_model)}'s in-distribution accuracy ({f.pivot:.2f}%), slope "
                    f"{f.slope_below:.3f} below and {f.slope:.3f} above the pivot")
        else:
            desc = f"Fit: {ty} = {f.slope:.3f} {tx} {f.intercept:+.3f}"
        parts.append(f"<p>{desc} (r² {f.r2:.3f}; {esc(fit_note(f))}). {len(frame)} models shown"
                     + (f", {skipped} without both accuracies" if skipped else "") + ".</p>")
        parts.append(ctx.plot(trend_figure(frame, x=shift.x, y=shift.y, title=f"{shift.label} ({t.name})",
                                           fit=a.fit, band=a.band, er=a.er, highlight=marked)))
        assert a.er is not None
        best = most_effectively_robust(a.er, self.top).reset_index()
        best = best[["model", "model_type", "x_acc", "y_acc", "effective_robustness", "er_low", "er_high"]]
        if ctx.figure_formats:
            kw = dict(fit=a.fit, band=a.band, title=shift.label, highlight=marked)
            parts.append(file_row(ctx.static_figure_lazily(functools.partial(plot_trend, t, shift.x, shift.y, **kw),
                                                           tb.dir / file_slug(shift.label),
                                                           plot_trend_inputs(t, shift.x, shift.y, **kw))))
        parts.append(f'<h4 class="sb-tight">Most effectively robust (top {len(best)})</h4>')
        parts.append(compact(small_table(best.rename(columns={"effective_robustness": "ER (pp)", "er_low": "95% low",
                                                              "er_high": "95% high", "x_acc": f"{shift.x} %",
                                                              "y_acc": f"{shift.y} %"}),
                                         {f"{shift.x} %": ".2f", f"{shift.y} %": ".2f", "ER (pp)": "+.2f",
                                          "95% low": "+.2f", "95% high": "+.2f"})))
        return "".join(parts)


#: Shifts labelled ``"<family>: <member>"`` are drawn as one section with a selector when the
#: family has at least this many members (the digits testbed's ten corruptions).
MIN_FAMILY = 3


def shift_families(analyses: Sequence[ShiftAnalysis]) -> list[tuple[str | None, list[ShiftAnalysis]]]:
    """The analyses in page order, those of one family (labels ``"<family>: <member>"``, at least
    :data:`MIN_FAMILY` of them) gathered at the place of the first: ``[(family or None, members)]``."""
    def family(a: ShiftAnalysis) -> str | None:
        return a.shift.label.split(": ", 1)[0] if ": " in a.shift.label else None

    counts = pd.Series([family(a) for a in analyses], dtype=object).value_counts()
    out: list[tuple[str | None, list[ShiftAnalysis]]] = []
    seen: dict[str, list[ShiftAnalysis]] = {}
    for a in analyses:
        f = family(a)
        if f is None or counts.get(f, 0) < MIN_FAMILY:
            out.append((None, [a]))
        elif f in seen:
            seen[f].append(a)
        else:
            seen[f] = [a]
            out.append((f, seen[f]))
    return out


def choice_html(label: str, items: Sequence[tuple]) -> str:
    """One block of the page per item, shown one at a time by a ``<select>`` (``report.js``; the
    first is shown, and without JavaScript all are): ``items`` are (option text, element id, HTML)
    or (option text, element id, HTML, group): consecutive items of one group share an
    ``<optgroup>``. Keeps a family of near-identical figures (one per corruption, one per
    setting) one figure tall."""
    options, group, i = [], None, 0
    for i, item in enumerate(items):
        text, g = item[0], (item[3] if len(item) > 3 else None)
        if g != group:
            if group is not None:
                options.append("</optgroup>")
            if g is not None:
                options.append(f'<optgroup label="{esc(g)}">')
            group = g
        options.append(f'<option value="{i}">{esc(text)}</option>')
    if group is not None:
        options.append("</optgroup>")
    blocks = "".join(f'<div class="sb-choice" id="{esc(item[1])}" data-choice="{i}">{item[2]}</div>'
                     for i, item in enumerate(items))
    return (f'<div class="sb-chooser"><label class="sb-choose">{esc(label)}: <select>{"".join(options)}</select> '
            f'<span class="sb-note">({len(items)} in all)</span></label>{blocks}</div>')

def _synthetic(ctx: ReportContext, tb: TestbedReport) -> tuple[pd.DataFrame, ShiftAnalysis, str] | None:
    """Synthetic effective robustness and the natural shift it is compared with, cached per
    testbed; ``None`` when the testbed has no corruption settings or no natural reference."""
    if "synthetic" in tb.cache:
        return tb.cache["synthetic"]  # type: ignore[return-value]
    result = None
    t = tb.testbed
    x, settings = "val", corruption_settings(t, IMAGENET_C_PATTERN)
    if not settings:
        # <base>+<corruption>.<severity> settings of shiftbench eval on any dataset (e.g. the digits testbed)
        generic = corruption_settings(t, r"^(?P<base>.+)\+(?P<corruption>[a-z_]+)\.(?P<severity>\d)$")
        bases = {s.split("+")[0] for names in generic.values() for s in names}
        if len(bases) == 1 and next(iter(bases)) in t.settings:
            x, settings = next(iter(bases)), generic
    candidates = [a for a in tb.analyses if a.er is not None and a.shift.x == x]
    natural = next((a for a in candidates if a.shift.label == NATURAL_REFERENCE), candidates[0] if candidates else None)
    if settings and natural is not None and x in t.settings:
        try:
            settings, left_out = complete_severities(t, settings)
            syn = synthetic_effective_robustness(t, x, settings, ctx.scale)
            syn.attrs["left_out"] = left_out
            result = (syn, natural, x)
        except ShiftbenchError:
            result = None
    tb.cache["synthetic"] = result
    return result


#: The synthetic-vs-natural recipe of the report: the paper's (``taori2020``, Taori et al. 2020,
#: §4.2), where the testbed has what it needs; shiftbench's ``per-setting`` variant otherwise.
SYNTHETIC_RECIPE = DEFAULTS["synthetic-vs-natural"]


def _synthetic_recipe(ctx: ReportContext, tb: TestbedReport) -> tuple[SyntheticVsNatural | None, str]:
    """:func:`~shiftbench.analysis.synthetic.synthetic_vs_natural` under :data:`SYNTHETIC_RECIPE`
    against the natural shift of :func:`_synthetic` (``fallback``: settings the testbed lacks are
    named in the result's notes), cached per testbed; ``(None, why)`` when the recipe cannot run
    on the testbed (no ImageNet-C settings, too few models), and the section shows the
    ``per-setting`` variant instead."""
    if "synthetic_recipe" in tb.cache:
        return tb.cache["synthetic_recipe"]  # type: ignore[return-value]
    base = _synthetic(ctx, tb)
    result: tuple[SyntheticVsNatural | None, str] = (None, "")
    if base is not None:
        _, natural, x = base
        t = tb.testbed
        if not any(re.match(IMAGENET_C_ANY_MODE, s) for s in t.settings):
            result = (None, "it needs ImageNet-C settings (imagenet-c.<corruption>.<severity>_<mode>)")
        else:
            try:
                result = (synthetic_vs_natural(t, SYNTHETIC_RECIPE, natural.shift.y, x=x, scale=ctx.scale,
                                               fallback=True), "")
            except ShiftbenchError as exc:
                result = (None, str(exc))
    tb.cache["synthetic_recipe"] = result
    return result


@register_section
class SyntheticSection(Section):
    """Effective robustness on synthetic corruptions vs on a natural shift (Taori et al. 2020,
    §4.2, Figure 5): one point per non-standard model with Pearson r, under the paper's recipe
    (``taori2020``) where the testbed has ImageNet-C, shiftbench's ``per-setting`` variant
    otherwise (the section names the recipe used and the other one, with its r); and per
    corruption how well its effective robustness predicts the natural one."""

    key, title = "synthetic", "Synthetic vs natural robustness"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return tb is not None and _synthetic(ctx, tb) is not None

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        syn, natural, x = _synthetic(ctx, tb)  # type: ignore[misc]
        assert natural.er is not None
        label = natural.shift.label
        corr = corruption_correlations(syn, natural.er, exclude_types=STANDARD_LIKE)
        res, why_not = _synthetic_recipe(ctx, tb)
        per_setting = _per_setting_summary(ctx, syn, corr, x)
        if res is not None:
            recipe, r, table = res.recipe, res.r, res.to_csv_frame()
            frame = res.table.loc[res.table["in_correlation"], ["model_type", "synthetic_er", "natural_er"]]
            parts = _paper_recipe_text(ctx, res, label, per_setting)
            corr = corr[corr["corruption"] != SYNTHETIC]      # that row is per-setting's r, named in the note
        else:
            recipe, r = "per-setting", per_setting[2]
            frame = pd.DataFrame({"model_type": syn["model_type"], "synthetic_er": syn[SYNTHETIC],
                                  "natural_er": natural.er["effective_robustness"].reindex(syn.index)})
            frame = frame[~frame["model_type"].isin(STANDARD_LIKE)].dropna()
            parts = _per_setting_text(label, len(frame), per_setting, why_not)
            table = frame.reset_index().rename(columns={"natural_er": f"{label}_er"})
            table["recipe"] = "per-setting"
        left_out = syn.attrs.get("left_out") or []
        if left_out:
            parts.append(f'<details class="sb-note"><summary>Left out as gaps in the data ({len(left_out)} '
                         f'setting{"s" if len(left_out) > 1 else ""})</summary><p class="sb-note">Left out of the '
                         "per-setting averages: a model has every other severity of the corruption but not these, so "
                         "averaging over them would drop it: " + ", ".join(f"<code>{esc(s)}</code>" for s in left_out)
                         + ".</p></details>")
        axis = ("effective robustness of the mean synthetic accuracy (pp)" if res is not None
                else "effective robustness, mean over corruptions (pp)")
        # each figure's files and table under it, so the links take one line beside each other
        left = [ctx.plot(synthetic_figure(frame, natural_label=label, r=r, title=f"Synthetic vs natural ({recipe})",
                                          synthetic_label=axis), half=True),
                file_row(ctx.static_plot(tb.dir / "synthetic_vs_natural", plot_synthetic_vs_natural, frame,
                                         natural_label=label, r=r, synthetic_label=axis,
                                         title=f"Synthetic vs natural effective robustness (recipe {recipe})"),
                         ctx.table(table, tb.dir / "synthetic_vs_natural",
                                   f"Synthetic and {label} effective robustness (pp) on {tb.testbed.name}, "
                                   f"recipe {recipe}"))]
        right = [ctx.plot(correlation_bars(corr, natural_label=label, title=f"Per corruption: Pearson r with {label}"),
                          half=True),
                 file_row(ctx.static_plot(tb.dir / "corruption_correlation", plot_corruption_correlation, corr,
                                          natural_label=label),
                          ctx.table(corr, tb.dir / "corruption_correlation",
                                    f"Correlation of per-corruption and {label} effective robustness on "
                                    f"{tb.testbed.name}", "Per-corruption table"))]
        parts.append(pair_html("".join(left), "".join(right)))
        anchor = ctx.anchor(tb.anchor, self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts)))]


def _per_setting_summary(ctx: ReportContext, syn: pd.DataFrame, corr: pd.DataFrame,
                         x: str) -> tuple[str, str, float | None]:
    """What shiftbench's ``per-setting`` variant averages, its result ("Pearson r = ...") and r,
    from :func:`corruption_correlations`' first row (the mean over every setting)."""
    ps = corr.iloc[0]
    r = float(ps["pearson_r"]) if np.isfinite(ps["pearson_r"]) else None
    result = (f"Pearson r = {r:.2f} (p = {ps['pearson_p']:.2g}, {int(ps['n_models'])} models)" if r is not None
              else f"no correlation: {esc(ps['note'])}")
    n_settings = sum(len(v) for v in syn.attrs["settings"].values())
    what = (f"the mean over {n_settings} corruption settings ({len(syn.attrs['settings'])} corruptions × their "
            f"severities) of each setting's effective robustness against <code>{esc(x)}</code>, one "
            f"{esc(ctx.scale)} trend per setting fitted on the standard models")
    return what, result, r


def _right_panel(label: str) -> str:
    return (f" Right: per corruption (mean over its severities of each setting's effective robustness, as in "
            f"<code>per-setting</code>), Pearson r with {esc(label)}'s effective robustness from this report's "
            f"trend, over the models of every type but {esc(', '.join(STANDARD_LIKE))}.</p>")


def _paper_recipe_text(ctx: ReportContext, res: SyntheticVsNatural, label: str,
                       per_setting: tuple[str, str, float | None]) -> list[str]:
    """The section's text under the paper's recipe: what it computed, r (and the PGD r), the
    ``per-setting`` alternative with its r, and what the recipe adapted to the testbed."""
    adv, x = res.adversarial, res.x
    text = (f"<p>Recipe <code>{esc(res.recipe)}</code> ({esc(res.paper)}), the paper's: synthetic effective "
            f"robustness is that of each model's <em>average accuracy</em> over {len(res.settings)} synthetic "
            "settings (each ImageNet-C corruption in each mode averaged over its severities, and Stylized ImageNet "
            f"and greyscale where present), against one {esc(ctx.scale)} trend on <code>{esc(x)}</code>; "
            f"{esc(label)}'s likewise; both trends fitted on the {int(res.table['in_fit'].sum())} standard models "
            f"with <code>{esc(x)}</code> ≥ {TAORI_MIN_X:g}% whose names contain none of "
            f"{esc(', '.join(TAORI_FIT_EXCLUDE))}. Left: one point per model of every type but "
            f"{esc(', '.join(STANDARD_LIKE))}, subsample variants left out ({res.n} models), against its effective "
            f"robustness on {esc(label)}; Pearson r = {res.r:.2f} (p = {res.p:.2g}).")
    if adv is not None:
        text += (f" The same for the mean accuracy over the {len(adv.settings)} PGD settings: r = {adv.r:.2f} "
                 f"({adv.n} models).")
    what, result, _ = per_setting
    parts = [text + _right_panel(label),
             (f'<p class="sb-note">The alternative, shiftbench\'s <code>per-setting</code> variant, takes {what}; '
              f"here it gives {result}: <code>shiftbench synthetic-vs-natural --recipe per-setting</code> "
              "(docs/methods.md has both recipes).</p>")]
    if res.notes:
        parts.append(f'<details class="sb-note"><summary>What the recipe adapted to this testbed ({len(res.notes)} '
                     f'note{"s" if len(res.notes) > 1 else ""})</summary>'
                     + "".join(f'<p class="sb-note">{esc(n)}</p>' for n in res.notes) + "</details>")
    return parts


def _per_setting_text(label: str, n_models: int, per_setting: tuple[str, str, float | None],
                      why_not: str) -> list[str]:
    """The section's text when the paper's recipe cannot run on the testbed (and why not)."""
    what, result, _ = per_setting
    return [(f"<p>Recipe <code>per-setting</code> ({esc(RECIPES['per-setting'][1])}): synthetic effective "
             f"robustness is {what}. Left: one point per model of every type but {esc(', '.join(STANDARD_LIKE))} "
             f"({n_models} models) against its effective robustness on {esc(label)}; {result}." + _right_panel(label)),
            (f'<p class="sb-note">Not the paper\'s recipe: <code>{esc(SYNTHETIC_RECIPE)}</code> (Taori et al.\'s, '
             f"the default of <code>shiftbench synthetic-vs-natural</code>) cannot run on this testbed: "
             f"{esc(why_not)}.</p>")]


#: Model metadata shown in the "All models" table when the testbed has it: column, label, kind, tooltip.
MODEL_FACTS = (
    ("arch", "architecture", "text", "Architecture"),
    ("param_count", "params (M)", "num", "Parameters, millions"),
    ("pretrain", "training data", "text", "Training data beyond ImageNet-1k, where the testbed records it"),
)


def training_data(value: object) -> str:
    """A short training-data label from the testbed's ``pretrain`` text (``"tag names extra data:
    in22k"`` -> ``"in22k"``, ``"ImageNet-1k only"`` -> ``"ImageNet-1k"``)."""
    text = "" if value is None or (isinstance(value, float) and not np.isfinite(value)) else str(value)
    text = re.sub(r"^tag names extra data:\s*", "", text)
    return re.sub(r"\s+only$", "", text)


def model_table(ctx: ReportContext, tb: TestbedReport) -> tuple[pd.DataFrame, list[dict[str, object]]]:
    """Every model of the testbed with its metadata (type, architecture, parameters, training data
    where known), in-distribution accuracy, and per analysed shift its shifted accuracy and
    effective robustness; and the column specs of ``report.js``."""
    t = tb.testbed
    id_setting = "val" if "val" in t.settings else next((a.shift.x for a in tb.analysed), None)
    table = pd.DataFrame({"model": t.models, "model_type": list(t.model_types)}, index=t.models)
    cols: list[dict[str, object]] = [{"key": "model", "label": "model", "kind": "text"},
                                     {"key": "model_type", "label": "type", "kind": "text", "filter": "select"}]
    meta = t.metadata
    for key, label, kind, title in MODEL_FACTS:
        if key not in meta or meta[key].isna().all():
            continue
        values = meta[key].reindex(t.models)
        if kind == "num":
            values = pd.to_numeric(values, errors="coerce")
            if not np.isfinite(values).any():
                continue
        else:
            values = values.map(training_data) if key == "pretrain" else values.fillna("").astype(str)
            if (values == "").all():
                continue
        table[key] = values
        col = {"key": key, "label": label, "kind": kind, "title": title}
        if kind == "num":
            col["digits"] = 1
        elif key == "pretrain":
            col["filter"] = "select"
        cols.append(col)
    if id_setting is not None:
        table[f"{id_setting}_acc"] = t.accuracies[id_setting]
        cols.append({"key": f"{id_setting}_acc", "label": f"{id_setting} %", "kind": "num", "digits": 2,
                     "title": f"In-distribution accuracy on {id_setting} (%)"})
    shown_y: set[str] = set()
    for a in tb.analysed:
        if a.er is None:
            continue
        if a.shift.y not in shown_y and a.shift.y != id_setting:
            shown_y.add(a.shift.y)
            key = _new_column(table, f"acc_{a.shift.slug}")      # two labels may share a slug
            table[key] = t.accuracies[a.shift.y]
            cols.append({"key": key, "label": f"{a.shift.label} %", "kind": "num", "digits": 2, "group": a.shift.label,
                         "title": f"Accuracy on {a.shift.y} (%)"})
        key = _new_column(table, f"er_{a.shift.slug}")
        table[key] = a.er["effective_robustness"].reindex(t.models)
        cols.append({"key": key, "label": f"ER {a.shift.label}", "kind": "num", "digits": 2, "signed": True,
                     "group": a.shift.label, "title": f"Effective robustness (pp) on {a.shift.y} vs {a.shift.x}"})
    syn = _synthetic(ctx, tb)
    if syn is not None:
        res, _ = _synthetic_recipe(ctx, tb)      # the synthetic section's recipe: the paper's where it runs
        if res is not None:
            table["er_synthetic"] = res.table["synthetic_er"].reindex(t.models)
            what = f"Effective robustness of the mean accuracy over the synthetic settings (pp; recipe {res.recipe})"
        else:
            table["er_synthetic"] = syn[0][SYNTHETIC].reindex(t.models)
            what = "Mean effective robustness over the corruption settings (pp; recipe per-setting)"
        cols.append({"key": "er_synthetic", "label": "ER synthetic", "kind": "num", "digits": 2, "signed": True,
                     "title": what})
    return table, cols


def _new_column(table: pd.DataFrame, key: str) -> str:
    """``key``, or ``key-2``, ``key-3``, ... when ``table`` has that column already."""
    name, i = key, 2
    while name in table.columns:
        name, i = f"{key}-{i}", i + 1
    return name


def table_rows(table: pd.DataFrame, cols: Sequence[dict[str, object]]) -> list[list[object]]:
    """The rows of ``table`` as JSON-ready lists: numbers rounded to each column's digits, gaps ``None``."""
    out = []
    for rec in table[[c["key"] for c in cols]].itertuples(index=False):
        out.append([(None if v is None or not np.isfinite(v) else round(float(v), int(c.get("digits", 2))))
                    if c["kind"] == "num" else str(v) for c, v in zip(cols, rec)])
    return out


@register_section
class ModelTableSection(Section):
    """Every model with its type, architecture, parameters and training data (where the testbed
    knows them), in-distribution accuracy, and accuracy and effective robustness on every shift:
    sortable and filterable in the page (sticky header and model column, scrolling inside its
    box), and written as CSV, Markdown and LaTeX."""

    key, title = "models", "All models"

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        assert tb is not None
        t = tb.testbed
        table, cols = model_table(ctx, tb)
        data_id = ctx.anchor(tb.anchor, "models-data")
        n_er = sum(1 for c in cols if str(c["key"]).startswith("er_"))
        files = ctx.table(table.reset_index(drop=True), tb.dir / "models",
                          f"Models of {t.name}: metadata, accuracy (%) and effective robustness (pp)")
        # the note and the table's files share a line above the table
        body = (file_row(f'<p class="sb-note">Per shift: accuracy (%) and ER, effective robustness (pp) against its '
                         f"trend ({n_er} ER columns). Click a column to sort.</p>", files)
                # about ten rows tall: the rest scrolls inside the box, under a sticky header and model column
                + f'<div class="sb-table sb-table-short" data-source="{esc(data_id)}"></div>'
                f'<script type="application/json" id="{esc(data_id)}">'
                f'{json_for_script({"columns": cols, "rows": table_rows(table, cols)})}</script>')
        anchor = ctx.anchor(tb.anchor, self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, body))]


def compact(html_text: str) -> str:
    """A static table (:func:`small_table`) with smaller rows, so that it wraps and grows less."""
    return f'<div class="sb-compact">{html_text}</div>'


def file_row(*parts: str) -> str:
    """Links to written files (:meth:`ReportContext.static_plot`, :meth:`ReportContext.table`) on one
    line, each block beside the last (wrapping on a narrow page) rather than one paragraph each."""
    return f'<div class="sb-filerow">{"".join(p for p in parts if p)}</div>'


# ---------------------------------------------------------------------------- report sections
def calibration_rows(results: pd.DataFrame | None) -> pd.DataFrame:
    """Rows of a results store with finite ECE, NLL and Brier score."""
    cols = ["model", "setting", "accuracy", "ece", "nll", "brier", "n_examples"]
    if results is None or results.empty or not {"ece", "nll", "brier"} <= set(results.columns):
        return pd.DataFrame(columns=cols)
    frame = results.copy()
    for c in ("accuracy", "ece", "nll", "brier", "n_examples"):
        frame[c] = pd.to_numeric(frame[c], errors="coerce")
    frame = frame[np.isfinite(frame["ece"]) & np.isfinite(frame["accuracy"])]
    frame["model"] = frame["model"].astype(str)
    frame["setting"] = frame["setting"].astype(str)
    return frame[cols].sort_values(["setting", "model"]).reset_index(drop=True)


def group_legend(fig: go.Figure, max_entries: int = MAX_LEGEND) -> go.Figure:
    """With more than ``max_entries`` traces, one legend entry per shift family: the traces of
    ``<base>+<family>.<severity>`` settings share a legend group (a click hides or shows the whole
    family), its colour and one entry ``"<family> (k severities)"``, darker at higher severity
    (:func:`~shiftbench.report.figures.family_looks`, the static figures' rule too). The legend
    moves to the right of the plot. The figure is changed in place and returned."""
    if len(fig.data) <= max_entries:
        return fig
    looks = family_looks(str(t.name) for t in fig.data)
    if looks is None:   # nothing to group
        return fig
    # the family's legend entry is its darkest (most severe) trace
    entry = {f: max((i for i, lk in enumerate(looks) if lk.family == f), key=lambda i: looks[i].strength or 0)
             for f in dict.fromkeys(lk.family for lk in looks)}
    for i, (trace, lk) in enumerate(zip(fig.data, looks)):
        trace.update(legendgroup=lk.family, showlegend=entry[lk.family] == i, legendrank=lk.rank + 1,
                     marker=dict(color=lk.colour, opacity=0.95 if lk.strength is None else lk.strength))
        if entry[lk.family] == i:
            trace.update(name=plotly_text(lk.label))
    fig.update_layout(legend=dict(x=1.02, xanchor="left", y=1, yanchor="top", groupclick="togglegroup",
                                  title=dict(text="setting family"), tracegroupgap=0, font=dict(size=10)),
                      margin=dict(r=200), height=max(int(fig.layout.height or 480), 150 + 21 * len(entry)))
    return fig


@register_section
class CalibrationSection(Section):
    """Calibration of the models in a results store (``--store``): expected calibration error
    (Guo et al. 2017), NLL and Brier score per model and setting."""

    key, title, scope = "calibration", "Calibration (results store)", "report"

    def available(self, ctx: ReportContext, tb: TestbedReport | None) -> bool:
        return len(calibration_rows(ctx.store_results)) > 0

    def render(self, ctx: ReportContext, tb: TestbedReport | None) -> list[Rendered]:
        """The scatter (legend grouped by shift family), then every (model, setting) result in a
        sortable, filterable table folded under a summary that gives its size."""
        rows = calibration_rows(ctx.store_results)
        fig = group_legend(calibration_figure(rows, title="Expected calibration error against accuracy"))
        grouped = any(t.legendgroup for t in fig.data)
        parts = [f"<p>{rows['model'].nunique()} models on {rows['setting'].nunique()} settings from the results "
                 "store. ECE: expected calibration error over 15 equal-width confidence bins, in percent; NLL: "
                 "negative log-likelihood of the true class; Brier: multi-class Brier score."
                 + (' <span class="sb-note">The settings of one shift family (a corruption at each severity) share '
                    "a colour and one legend entry, darker at higher severity; click an entry to hide or show the "
                    "family, hover a point for its setting.</span>" if grouped else "") + "</p>"]
        parts.append(ctx.plot(fig))
        cols = [{"key": "model", "label": "model", "kind": "text"},
                {"key": "setting", "label": "setting", "kind": "text", "filter": "select"},
                {"key": "accuracy", "label": "accuracy %", "kind": "num", "digits": 2},
                {"key": "ece", "label": "ECE %", "kind": "num", "digits": 2},
                {"key": "nll", "label": "NLL", "kind": "num", "digits": 3},
                {"key": "brier", "label": "Brier", "kind": "num", "digits": 4}]
        data = [[r.model, r.setting, *(round(float(v), 4) if np.isfinite(v) else None
                                       for v in (r.accuracy, r.ece, r.nll, r.brier))]
                for r in rows.itertuples(index=False)]
        data_id = ctx.anchor("calibration-data")
        # folded: a table of every (model, setting) is thousands of rows; the scatter is the reading
        parts.append(f'<details class="sb-fold"><summary>Every result: {len(rows):,} rows (model, setting, '
                     "accuracy, ECE, NLL, Brier), sortable and filterable by model or setting</summary>"
                     f'<div class="sb-table sb-table-short" data-source="{esc(data_id)}" data-noun="results" '
                     'data-placeholder="Filter by model or setting…"></div>'
                     f'<script type="application/json" id="{esc(data_id)}">'
                     f'{json_for_script({"columns": cols, "rows": data})}</script></details>')
        parts.append(file_row(ctx.static_plot(ctx.out_dir / "calibration", plot_calibration, rows),
                              ctx.table(rows, ctx.out_dir / "calibration",
                                        "Calibration of the models in the results store")))
        anchor = ctx.anchor(self.key)
        return [Rendered(self.title, anchor, section_html(anchor, self.title, "".join(parts), level=2))]


def prefetch_sections(ctx: ReportContext, scope: str, tb: TestbedReport | None) -> None:
    """:meth:`Section.prefetch` of every registered section of ``scope`` that overrides it and has data."""
    for cls in _SECTIONS.values():
        if cls.scope == scope and cls.prefetch is not Section.prefetch:
            section = cls()
            if section.available(ctx, tb):
                section.prefetch(ctx, tb)


def render_sections(ctx: ReportContext, scope: str, tb: TestbedReport | None,
                    keys: Iterable[str] | None = None) -> list[Rendered]:
    """Render every registered section of ``scope`` that has data, in registry order."""
    out: list[Rendered] = []
    for key, cls in _SECTIONS.items():
        if cls.scope != scope or (keys is not None and key not in keys):
            continue
        section = cls()
        if section.available(ctx, tb):
            out.extend(section.render(ctx, tb))
    return out
