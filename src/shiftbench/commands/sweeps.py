"""``shiftbench resolution-sweep`` and ``shiftbench composite``: studies kept in the results store.

Each is one call into the API -- :func:`shiftbench.studies.resolution.resolution_sweep` and
:func:`shiftbench.studies.compositing.compositing_study` -- with the engine's progress bar on
stderr and the resulting table on stdout; ``shiftbench report --store DIR`` then shows the
"Resolution sweeps" and "Object compositing" sections.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import (
    DEFAULT_STORE,
    BatchSizeOpt,
    DataRootOpt,
    DeviceOpt,
    JsonOpt,
    LimitOpt,
    ModelOpt,
    PartialOpt,
    SettingOpt,
    StoreOpt,
)
from shiftbench.cli_support import Table, notes_to_stderr, out, print_json


def _resolutions(text: str | None) -> tuple[int, ...] | None:
    """``64,128,224`` -> (64, 128, 224); a bad value is a typer.BadParameter naming the option."""
    if text is None:
        return None
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        values = ()
    if not values or any(v < 1 for v in values):
        raise typer.BadParameter(f"{text!r}: give positive integers separated by commas, e.g. 64,128,224",
                                 param_hint="--resolutions")
    return values


def _num(value: object, spec: str) -> str:
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    return "" if v != v else format(v, spec)


def register(app: typer.Typer) -> None:
    """Add ``resolution-sweep`` and ``composite`` to the ``shiftbench`` app."""

    @app.command("resolution-sweep")
    def resolution_sweep_cmd(
        model: ModelOpt,
        setting: SettingOpt,
        resolutions: Annotated[Optional[str], typer.Option(
            "--resolutions", help="Test resolutions (crop sides), comma-separated; default "
            "64,128,224,288,320,384,512,768.")] = None,
        adjust: Annotated[bool, typer.Option("--adjust/--no-adjust", help="Keep the model's resize-to-crop ratio "
                                             "(default) or resize straight to the resolution.")] = True,
        store: StoreOpt = DEFAULT_STORE,
        data_root: DataRootOpt = Path("."),
        limit: LimitOpt = None,
        batch_size: BatchSizeOpt = 64,
        device: DeviceOpt = None,
        partial: PartialOpt = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Accuracy of one model at each test resolution (FixRes); stored as a study for the report.

        --json: {"model", "setting", "study", "store", "native_resolution", "best_resolution",
        "accuracy": {resolution: top-1 %}, "rows": [{"resolution", "resize", "accuracy", "top5",
        "n_examples", "best", "error"}]}."""
        from shiftbench.models.device import check_device  # deferred: shiftbench.models loads numpy
        from shiftbench.studies.resolution import RESOLUTIONS, resolution_sweep  # deferred: loads Pillow, loads pyarrow

        with notes_to_stderr(as_json):
            frame = resolution_sweep(model, setting, _resolutions(resolutions) or RESOLUTIONS, data_root=data_root,
                                     store=store, adjust_resize_ratio=adjust, limit=limit, batch_size=batch_size,
                                     device=check_device(device), partial=partial, progress=True)
        native = int(frame["native_resolution"].iloc[0])
        if as_json:
            best = frame.loc[frame["best"].astype(bool), "resolution"]
            print_json({"model": frame["base_model"].iloc[0], "setting": setting, "study": frame.attrs["study"],
                        "store": str(store), "native_resolution": native,
                        "best_resolution": int(best.iloc[0]) if len(best) else None,
                        "accuracy": {str(int(r)): a for r, a in zip(frame["resolution"], frame["accuracy"])},
                        "rows": frame[["resolution", "resize", "accuracy", "top5", "n_examples", "best",
                                       "error"]].to_dict("records")})
            return
        table = Table("resolution", "resize", "top-1 %", "top-5 %", "examples", "", title=(
            f"{frame['base_model'].iloc[0]} on {setting}: resolution sweep (native {native}), "
            f"study {frame.attrs['study']!r} in {store}"))
        for r in frame.to_dict("records"):
            marks = ", ".join(m for m, on in (("best", r["best"]), ("native", r["resolution"] == native)) if on)
            table.add_row(str(r["resolution"]), str(r["resize"]), _num(r["accuracy"], ".2f"), _num(r["top5"], ".2f"),
                          f"{int(r['n_examples']):,}", marks or (r["error"] or ""))
        out.print(table)

    @app.command("composite")
    def composite_cmd(
        model: ModelOpt,
        spec: Annotated[Path, typer.Option("--spec", help="Composite spec (JSON/YAML: foregrounds, backgrounds, "
                                           "sizes, locations, rotations).")],
        store: StoreOpt = DEFAULT_STORE,
        data_root: DataRootOpt = Path("."),
        limit: LimitOpt = None,
        batch_size: BatchSizeOpt = 64,
        device: DeviceOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """SI-SCORE-style compositing: accuracy per object size, rotation and location; stored as a study.

        --json: {"model", "setting", "study", "store", "accuracy", "n_examples", "factors": [{"factor",
        "value", "label", "accuracy", "n"}] (location rows included, with their "normalised" map value)}."""
        from shiftbench.models.device import check_device  # deferred: shiftbench.models loads numpy
        from shiftbench.studies.compositing import (  # deferred: loads Pillow, loads pyarrow
            compositing_study,
            heatmap_from_study,
        )

        with notes_to_stderr(as_json):
            frame = compositing_study(model, str(spec), data_root=data_root, store=store, limit=limit,
                                      batch_size=batch_size, device=check_device(device), progress=True)
        a = frame.attrs
        if as_json:
            print_json({"model": frame["model"].iloc[0], "setting": frame["setting"].iloc[0], "study": a["study"],
                        "store": str(store), "accuracy": a["accuracy"], "n_examples": a["n_examples"],
                        "factors": frame.drop(columns=[c for c in ("model", "setting") if c in frame.columns])
                        .to_dict("records")})
            return
        out.print(f"{frame['model'].iloc[0]} on {frame['setting'].iloc[0]}: top-1 {a['accuracy']:.2f}% over "
                  f"{a['n_examples']:,} images; study {a['study']!r} in {store}")
        table = Table("factor", "value", "top-1 %", "images", title="accuracy per factor value")
        for r in frame[frame["factor"] != "location"].to_dict("records"):
            table.add_row(r["factor"], r["label"], f"{r['accuracy']:.2f}", str(int(r["n"])))
        out.print(table)
        heat = heatmap_from_study(frame)
        grid = Table("y \\ x", *(f"{x:g}" for x in heat.columns),
                     title="location map: accuracy / its 95th percentile over locations")
        for y, row in heat.iterrows():
            grid.add_row(f"{y:g}", *(_num(v, ".2f") for v in row))
        out.print(grid)
