"""``shiftbench carve``: attribute-controlled shifts from a manifest with metadata columns
(Hendrycks et al. 2021, *The Many Faces of Robustness*).

One call into :func:`shiftbench.studies.attributes.attribute_splits`, then ``AttributeSplits.write``.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.cli_options import JsonOpt, SeedOpt
from shiftbench.cli_support import Table, out

MAX_LABELS = 12   # per-label columns shown in the table unless --per-label


def _pairs(values: list[str] | None, option: str, example: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in values or []:
        key, sep, value = text.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise typer.BadParameter(f"{text!r}: use ATTRIBUTE=VALUE, e.g. {example}", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def _train(values: list[str] | None) -> dict[str, list[str]]:
    pairs: dict[str, list[str]] = {}
    for text in values or []:
        key, value = next(iter(_pairs([text], "--train", "thickness=medium").items()))
        pairs.setdefault(key, []).extend(v.strip() for v in value.split(",") if v.strip())
    return pairs


def _id_test(text: str) -> float | int:
    try:
        value = float(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r}: a fraction (0.2) or a number of rows (500)",
                                 param_hint="--id-test") from None
    return int(value) if value.is_integer() and value >= 1 else value


def register(app: typer.Typer) -> None:
    """Add ``carve`` to the ``shiftbench`` app."""

    @app.command("carve")
    def carve_cmd(
        manifest: Annotated[Path, typer.Option("--manifest", help="CSV/Parquet manifest: path,label[,group] plus "
                                               "attribute columns; paths relative to its folder.")],
        output: Annotated[Path, typer.Option("--output", "-o", help="Folder for train.csv, id-test.csv, "
                                             "ood-<attr>=<value>-<hash>.csv (one per value) and splits.json.")],
        train: Annotated[Optional[list[str]], typer.Option(
            "--train", help="ATTRIBUTE=VALUE[,VALUE...] of the training distribution; repeat per attribute.")] = None,
        bins: Annotated[Optional[list[str]], typer.Option(
            "--bin", help="Bin a numeric attribute: ATTR=K (quantile bins low/medium/high...), "
            "ATTR=thin,medium,thick (quantile bins so named) or ATTR=left,upright,right@-10,10 (fixed edges).")] = None,
        id_test: Annotated[str, typer.Option("--id-test", help="Share (0.2) or size (500) of the ID pool held out "
                                             "as id-test.")] = "0.2",
        max_per_split: Annotated[Optional[int], typer.Option("--max-per-split", help="Cap every split at N rows "
                                                             "(stratified by label).")] = None,
        balance: Annotated[bool, typer.Option("--balance", help="Cut every split to equal counts per label.")] = False,
        seed: SeedOpt = 0,
        images: Annotated[str, typer.Option("--images", help="auto (relative paths if the images are inside the "
                                            "output folder, else link), link (hard links, copies across file "
                                            "systems) or copy.")] = "auto",
        per_label: Annotated[bool, typer.Option("--per-label", help=f"Show every label's count (default: at most "
                                                f"{MAX_LABELS} labels).")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Carve a training set, an in-distribution test set and one OOD test set per changed attribute value."""
        from shiftbench.studies.attributes import attribute_splits  # deferred: loads Pillow, loads pyarrow

        splits = attribute_splits(manifest, train=_train(train), bins=_pairs(bins, "--bin", "thickness=3"),
                                  id_test=_id_test(id_test), max_per_split=max_per_split, balance=balance, seed=seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            files = splits.write(output, images=images)
        summary = json.loads((output / "splits.json").read_text())
        if as_json:
            print(json.dumps(summary))
            return
        sizes = splits.sizes
        labels = [c for c in sizes.columns if c not in ("split", "kind", "attribute", "value", "n")]
        shown = labels if per_label else labels[:MAX_LABELS]
        held = ", ".join(f"{a}={'|'.join(v)}" for a, v in splits.train.items())
        table = Table("split", "file", "n", *shown, title=f"{manifest}: train on {held} ({splits.n_rows} rows, "
                      f"seed {splits.seed})")
        for r in sizes.to_dict("records"):
            table.add_row(r["split"], files[r["split"]].name, str(r["n"]), *(str(r[c]) for c in shown))
        out.print(table)
        if len(labels) > len(shown):
            out.print(f"... {len(labels) - len(shown)} more labels (--per-label shows all)")
        for attr, info in splits.bins.items():
            out.print(f"bins of {attr} ({info['method']}): " + ", ".join(info["labels"]) + " at edges "
                      + ", ".join(f"{e:.4g}" for e in info["edges"]))
        dropped = {a: k for a, k in splits.n_missing.items() if k}
        if dropped:
            out.print("rows without a value (in no split): " + ", ".join(f"{a} {k}" for a, k in dropped.items()))
        for w in caught:
            out.print(f"note: {w.message}")
        typer.echo(f"wrote {len(set(files.values()))} manifests and splits.json to {output} (images: {summary['images']}); "
                   f"evaluate with: shiftbench eval -m MODEL -s manifest:{files['id-test']} -s ...")
