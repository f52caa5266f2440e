"""Tables for papers and notebooks: one DataFrame written as CSV, Markdown and LaTeX.

CSV keeps full precision; Markdown (GitHub tables) and LaTeX (``booktabs``, via pandas'
``to_latex``, which needs jinja2) round floats to ``digits`` places and escape the cells, so a
model name such as ``vit_b_32`` or ``a|b`` comes out as text in both.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from shiftbench.errors import ConfigError
from shiftbench.store.files import name_slug

TABLE_FORMATS = (".csv", ".md", ".tex")


def file_slug(name: object) -> str:
    """The file-name stem the report gives a setting, dataset, shift or model name: a lowercase
    readable slug plus a hash of the full name (:func:`~shiftbench.store.files.name_slug`), so two
    names never share a file (``folder:/data/med`` -> ``folder-data-med-<hash>``, ``folder:/data-med``
    -> ``folder-data-med-<another hash>``)."""
    return name_slug(name, lower=True)


def trajectory_stem(x: str, y: str) -> str:
    """The file-name stem of the fine-tuning trajectories of ``y`` against ``x``:
    ``trajectory_<y slug>_vs_<x slug>`` with each slug a :func:`file_slug` (which never holds
    ``_``, so the two settings are read back apart and two pairs never share a stem)."""
    return f"trajectory_{file_slug(y)}_vs_{file_slug(x)}"


_LATEX_SPECIAL = {"&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{", "}": r"\}",
                  "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}",
                  "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}"}


_LATEX_TABLE = str.maketrans(_LATEX_SPECIAL)


def latex_escape(text: str) -> str:
    """Escape LaTeX's special characters in running text (e.g. a caption): one ``str.translate``
    pass (every character replaced at once, so no replacement is escaped again)."""
    return str(text).translate(_LATEX_TABLE)


def _cell(value: object, digits: int) -> str:
    """A Markdown cell: floats rounded, ``|`` escaped, ``<``/``>`` as entities (so a renderer
    that allows inline HTML still shows a name like ``<img ...>`` as text)."""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)):
        value = ";".join(map(str, value))
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def markdown_table(frame: pd.DataFrame, digits: int = 2) -> str:
    """``frame`` as a GitHub Markdown table (floats to ``digits`` places, ``|`` escaped)."""
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(_cell(c, digits) for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v, digits) for v in row) + " |")
    return "\n".join(lines) + "\n"


def latex_table(frame: pd.DataFrame, digits: int = 2, caption: str | None = None, label: str | None = None) -> str:
    """``frame`` as a LaTeX ``table`` with a booktabs ``tabular``; every text cell, header and
    the caption are escaped with :func:`latex_escape` (``<``, ``>``, ``|`` included, which the
    default OT1 font encoding would otherwise print as other glyphs)."""
    frame = frame.copy()
    for c in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[c]) or pd.api.types.is_bool_dtype(frame[c]):
            frame[c] = frame[c].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else
                                    latex_escape(";".join(map(str, v)) if isinstance(v, (list, tuple)) else v))
    # written directly in the layout pandas' ``to_latex(index=False)`` gives (its Styler path took
    # ~0.6 s a table, a tenth of the similarity section): numeric columns right-aligned, floats to
    # ``digits`` places, missing values blank
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
               for c in frame.columns]

    def cell(v: object) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if isinstance(v, float):
            return f"{v:.{digits}f}"
        return str(v)

    lines = [r"\begin{tabular}{" + "".join("r" if n else "l" for n in numeric) + "}", r"\toprule",
             " & ".join(latex_escape(c) for c in frame.columns) + r" \\", r"\midrule"]
    lines += [" & ".join(cell(v) for v in row) + r" \\" for row in frame.itertuples(index=False)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption is not None or label is not None:
        head = [r"\begin{table}"] + ([r"\caption{" + latex_escape(caption) + "}"] if caption is not None else []) \
            + ([r"\label{" + label + "}"] if label is not None else [])
        lines = head + lines + [r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_table(frame: pd.DataFrame, stem: str | Path, *, caption: str | None = None, digits: int = 2,
                formats: Sequence[str] = TABLE_FORMATS) -> list[Path]:
    """Write ``frame`` to ``stem.csv``, ``stem.md`` and ``stem.tex`` (or the given ``formats``);
    returns the paths written."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in formats:
        path = stem.with_name(stem.name + ext)
        if ext == ".csv":
            frame.to_csv(path, index=False)
        elif ext == ".md":
            path.write_text((f"{_cell(caption, digits)}\n\n" if caption else "") + markdown_table(frame, digits))
        elif ext == ".tex":
            path.write_text(latex_table(frame, digits, caption=caption))
        else:
            raise ConfigError(f"unknown table format {ext!r}; use one of {', '.join(TABLE_FORMATS)}")
        paths.append(path)
    return paths


def signed_interval(er: float, low: float, high: float, digits: int = 1) -> str:
    """Effective robustness with its interval, e.g. ``+3.2 [+1.0, +5.1] pp``."""
    return f"{er:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}] pp"


def placement_table(placed: pd.DataFrame) -> pd.DataFrame:
    """:func:`~shiftbench.analysis.placement.place_models` output as the report shows it."""
    return pd.DataFrame({
        "model": placed["model"], "shift": placed["shift"],
        "in-distribution %": placed["x_acc"], "shifted %": placed["y_acc"],
        "trend predicts %": placed["predicted_y_acc"],
        "effective robustness (95% interval)": [signed_interval(*v) for v in zip(
            placed["effective_robustness"], placed["er_low"], placed["er_high"])],
        "rank": [f"{r} of {n}" for r, n in zip(placed["rank"], placed["n_ranked"])],
        "note": ["" if ok else "outside the fitted models' accuracies (extrapolated)" for ok in placed["in_fit_range"]],
    })
