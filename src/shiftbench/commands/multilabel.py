"""``shiftbench multilabel``: the DeepFashion Remixed table of a results store - per model the IID
mAP, the mAP on each OOD set and the OOD average, and the fit of OOD on IID mAP per OOD set.

One call into :func:`shiftbench.analysis.multilabel.dfr_table` / :func:`~shiftbench.analysis.multilabel.dfr_trends`
over the stored results' ``map`` (multi-label manifests, :mod:`shiftbench.views.multilabel`).
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import DEFAULT_STORE, JsonOpt, StoreOpt
from shiftbench.cli_support import Table, out
from shiftbench.errors import ConfigError, DataError


def split_label(setting: str) -> str:
    """A short name for a setting: a carved split's name as the ``splits.json`` beside its manifest
    records it (``manifest:/d/ood-zoom=large-<hash>.csv`` -> ``zoom=large``), else the manifest's file
    stem without ``ood-`` and a trailing hash, else the setting's name."""
    if setting.startswith("manifest:"):
        path = Path(setting.split(":", 1)[1].split("?", 1)[0])
        recorded = _carved_split_names(path.parent).get(path.name)
        if recorded is not None:
            return recorded
        stem = re.sub(r"-[0-9a-f]{10}$", "", path.stem)
        return stem[4:] if stem.startswith("ood-") else stem
    return setting


def _carved_split_names(folder: Path) -> dict[str, str]:
    """``{file name: split name}`` from the ``splits.json`` that ``shiftbench carve`` wrote in
    ``folder`` (empty when there is none or it cannot be read)."""
    try:
        splits = json.loads((folder / "splits.json").read_text()).get("splits", {})
        return {str(v["file"]): str(k) for k, v in splits.items() if isinstance(v, dict) and v.get("file")}
    except (OSError, ValueError, AttributeError):
        return {}


def map_rows(store: Path, id_setting: str, ood: list[str] | None):
    """The long table (model, setting, split, map) of ``store``'s multi-label results."""
    from shiftbench.store import Store  # deferred: loads pyarrow

    res = Store.existing(store).results()
    if "map" not in res or res["map"].isna().all():
        raise DataError(f"{store}: no multi-label results (mAP); evaluate a manifest with a 'labels' column first")
    res = res[res["map"].notna()].sort_values("finished").drop_duplicates(["model", "setting"], keep="last")
    known = sorted(set(res["setting"]))

    labels = {s: split_label(s) for s in known}

    def resolve(name: str) -> str:  # a setting's name, or a carved split's short name (id-test, zoom=large)
        if name in known:
            return name
        short = [s for s in known if labels[s] == name]
        if len(short) == 1:
            return short[0]
        raise ConfigError(f"setting {name!r} has no multi-label results in {store} (splits with mAP: "
                          f"{', '.join(sorted(labels.values())[:10])}{' ...' if len(known) > 10 else ''})")

    id_setting = resolve(id_setting)
    wanted = [id_setting, *([resolve(s) for s in ood] if ood else [s for s in known if s != id_setting])]
    res = res[res["setting"].isin(wanted)].copy()
    res["split"] = [("id-test" if s == id_setting else labels[s]) for s in res["setting"]]
    return res[["model", "setting", "split", "map", "map_low", "map_high"]]


def _num(v: object) -> float | None:
    return None if v is None or not math.isfinite(float(v)) else round(float(v), 4)


def register(app: typer.Typer) -> None:
    """Add ``multilabel`` to the ``shiftbench`` app."""

    @app.command("multilabel")
    def multilabel_cmd(
        id_setting: Annotated[str, typer.Option("--x", help="The in-distribution (IID) multi-label setting (or a "
                                                "carved split's name, e.g. id-test).")],
        store: StoreOpt = DEFAULT_STORE,
        ood: Annotated[Optional[list[str]], typer.Option("--y", help="OOD settings (repeat); default: every "
                                                         "other setting with mAP in the store.")] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """IID mAP, each OOD set's mAP and the OOD average per model (the DeepFashion Remixed table), with
        the fit of OOD on IID mAP per OOD set (logit scale)."""
        from shiftbench.analysis.multilabel import dfr_table, dfr_trends  # deferred: loads scipy

        rows = map_rows(store, id_setting, ood)
        table, trends = dfr_table(rows), dfr_trends(rows)
        if as_json:
            print(json.dumps({"table": [{"model": m, **{k: _num(v) for k, v in r.items()}}
                                        for m, r in table.to_dict("index").items()],
                              "trends": [{k: (v if isinstance(v, str) else _num(v)) for k, v in r.items()}
                                         for r in trends.to_dict("records")]}))
            return
        t = Table("model", *table.columns, title=f"mAP (%) on {len(table.columns) - 2} OOD sets, IID = {split_label(id_setting)}")
        for model, r in table.iterrows():
            t.add_row(str(model), *(f"{v:.1f}" for v in r))
        out.print(t)
        f = Table("OOD set", "models", "slope", "r²", "Pearson r", "mean drop", title="OOD mAP on IID mAP (logit fit)")
        for r in trends.itertuples():
            f.add_row(r.split, str(r.n_models), f"{r.slope:.2f}", f"{r.r2:.3f}", f"{r.r:.3f}", f"{r.mean_drop:+.1f}")
        out.print(f)
