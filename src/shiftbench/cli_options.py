"""The command-line options shared by shiftbench's commands, declared once.

Each is a typer ``Annotated`` type: a command takes ``store: StoreOpt = DEFAULT_STORE`` (or no
default, for a required option) and gets the same flag, short name and help as every other
command. :mod:`shiftbench.cli` and the modules of :mod:`shiftbench.commands` import them from
here (this module imports nothing of shiftbench but the standard-library
:mod:`shiftbench.setting_names`, so there is no import cycle).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from shiftbench.setting_names import canonical_setting_name, setting_alias

#: where ``shiftbench eval`` (and the studies) write results unless told otherwise
DEFAULT_STORE = Path("shiftbench-results")


def canonical_settings(value):
    """A typer callback for options naming settings: an alias spelling read as the reference name
    (``imagenetv2`` -> ``imagenetv2-matched-frequency-format-val``,
    :data:`shiftbench.setting_names.SETTING_ALIASES`, as the testbeds read CSV columns) and
    ``folder:<path>`` names made canonical (the absolute path from the working directory,
    :func:`shiftbench.setting_names.canonical_setting_name`), as ``shiftbench eval`` stored them;
    other names unchanged. Takes one name or a list."""
    if value is None:
        return None
    if isinstance(value, list):
        return [canonical_setting_name(setting_alias(v)) for v in value]
    return canonical_setting_name(setting_alias(value))



def setting_aliases(value):
    """A typer callback for ``shiftbench eval --setting``: alias spellings read as the reference
    names (:func:`canonical_settings` without the folder paths, which ``eval`` resolves against
    ``--data-root`` itself). Takes one name or a list."""
    if value is None:
        return None
    return [setting_alias(v) for v in value] if isinstance(value, list) else setting_alias(value)

# ---------------------------------------------------------------------------- stores and testbeds
def store_location(value):
    """A typer parser for ``--store``: a URI (``s3://bucket/prefix``, ``gs://...``, ``file:///...``:
    ``scheme://`` in it) kept as the string it is, anything else a local ``Path``."""
    if value is None or isinstance(value, Path):
        return value
    text = str(value)
    return text if "://" in text else Path(text)


StoreOpt = Annotated[Optional[Path], typer.Option(
    "--store", metavar="DIR|URI", parser=store_location,
    help="Results store: a directory, or a URI such as s3://bucket/prefix (what `shiftbench eval` and the "
    "studies write; docs/store.md).")]
StoreAddOpt = Annotated[Optional[Path], typer.Option(
    "--store", metavar="DIR|URI", parser=store_location,
    help="A results store, a directory or a URI such as s3://bucket/prefix (`shiftbench eval`): its models join "
    "the testbed, as with another --testbed.")]
TestbedOpt = Annotated[Optional[list[str]], typer.Option(
    "--testbed", "-t", help="Reference name (imagenet-reference, timm-reference), a CSV/Parquet table or a results "
    "store. Repeat (or join with +) to merge left to right, e.g. -t imagenet-reference -t mine.csv.")]
ListTestbedOpt = Annotated[Optional[list[str]], typer.Option(
    "--testbed", "-t", help="A testbed (reference name, table path or results store; repeat to merge); without it, "
    "what shiftbench can evaluate.")]
OneTestbedOpt = Annotated[Optional[str], typer.Option(
    "--testbed", "-t", help="A testbed: reference name, CSV/Parquet table or results store directory.")]
FractionsOpt = Annotated[Optional[bool], typer.Option(
    "--fractions/--percent", show_default=False, help="The unit of your table files' accuracies (-t FILE): "
    "--fractions: fractions (0-1), multiplied by 100; --percent: percentages, even all below 1%. Without either, "
    "a table whose accuracies all lie in [0, 1] is refused (shiftbench reads percentages).")]

# ---------------------------------------------------------------------------- models and settings
ModelOpt = Annotated[str, typer.Option(
    "--model", "-m", help="A model: a spec where the command runs it (timm:resnet50.a1_in1k, torchvision:resnet50, "
    "checkpoint:FILE --arch ..., python:mod:fn, efficientnet-lite0), a name where it reads a testbed.")]
ModelsOpt = Annotated[Optional[list[str]], typer.Option(
    "--model", "-m", help="Models: specs where the command runs them (timm:resnet50.a1_in1k, torchvision:resnet50, "
    "checkpoint:FILE --arch ..., python:mod:fn), names where it reads a testbed or a store. Repeatable.")]
SettingOpt = Annotated[str, typer.Option("--setting", "-s", help="One setting (shiftbench list settings), e.g. val.",
                                         callback=canonical_settings)]
XOpt = Annotated[str, typer.Option("--x", help="In-distribution setting (x axis), e.g. val.", callback=canonical_settings)]
YOpt = Annotated[str, typer.Option("--y", help="Shifted setting (y axis), e.g. imagenetv2-matched-frequency-format-val.",
                                   callback=canonical_settings)]

# ---------------------------------------------------------------------------- analysis
ScaleOpt = Annotated[str, typer.Option("--scale", help="Axis scaling: logit, probit or linear.")]
FitOnOpt = Annotated[Optional[list[str]], typer.Option(
    "--fit-on", help="Fit the trend on these model types, tags or model names (repeat or comma-separate; "
    "default STANDARD; 'all' for every model).")]
PivotOpt = Annotated[Optional[str], typer.Option(
    "--pivot", help="Fit a piecewise trend around this model's x accuracy (or a percentage), e.g. resnet50 "
    "for ImageNet-A.")]
ResamplesOpt = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples per band.")]
FigureFormatsOpt = Annotated[str, typer.Option(
    "--figure-formats", help="Static figure formats, comma-separated: png, svg, pdf (none: no static figures).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every random draw (same seed, same result).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON only.")]
LongOpt = Annotated[bool, typer.Option("--long", "-l", help="Show a table with more columns.")]

# ---------------------------------------------------------------------------- running models
DataRootOpt = Annotated[Path, typer.Option(
    "--data-root", help="Folder holding the datasets in their default folders (relative paths resolve here).")]
BatchSizeOpt = Annotated[int, typer.Option("--batch-size", help="Images per forward pass.")]
LimitOpt = Annotated[Optional[int], typer.Option("--limit", help="Only the first N examples of each dataset.")]
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="cuda, cuda:1 or cpu (default: cuda if present).")]
PartialOpt = Annotated[bool, typer.Option(
    "--partial", help="Accept a partial copy of a dataset (missing class folders) instead of failing.")]

# ---------------------------------------------------------------------------- list
PatternArg = Annotated[Optional[str], typer.Argument(
    help="Only the names matching this pattern, with fnmatch wildcards as in timm.list_models: * (anything), "
    "? (one character), [seq]; quote it, e.g. 'imagenet-c.fog.*' or '*resnet*'. A name without wildcards "
    "must match exactly. When nothing matches, a one-line message goes to stderr and the exit status is 1.",
    show_default=False)]
