"""``shiftbench deepaugment``: a statically augmented copy of an image dataset made with DeepAugment
(Hendrycks et al. 2021, *The Many Faces of Robustness*, §4).

One call into :func:`shiftbench.datasets.deepaugment.deepaugment`, with a progress bar.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from shiftbench.cli_options import JsonOpt, SeedOpt
from shiftbench.cli_support import check_count, out, progress


def register(app: typer.Typer) -> None:
    """Add ``deepaugment`` to the ``shiftbench`` app."""

    @app.command("deepaugment")
    def deepaugment_cmd(
        input: Annotated[Path, typer.Option("--input", help="Class-folder dataset (DIR/<class>/<image>) or CSV/Parquet "
                                            "manifest (path,label) to augment.")],
        output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write (DIR/<class>/<image>.<k>.png, "
                                             "read as folder:DIR); a partly written one resumes.")],
        network: Annotated[str, typer.Option("--network", help="Image-to-image network: cae (convolutional "
                                             "autoencoder) or edsr (EDSR super-resolution).")] = "cae",
        checkpoint: Annotated[Path | None, typer.Option(
            "--checkpoint", help="State dict of the network (the authors' CAE_Weights/model_final.state or "
            "EDSR_Weights/edsr_baseline_x4.pt).")] = None,
        train_on: Annotated[Path | None, typer.Option(
            "--train-on", help="Instead of --checkpoint: train the network briefly (self-supervised) on the images "
            "under this folder.")] = None,
        copies: Annotated[int, typer.Option("--copies", help="Augmented versions of every image.")] = 1,
        seed: SeedOpt = 0,
        width: Annotated[float, typer.Option("--width", help="Channel multiplier of the network (1: the authors'; "
                                             "smaller trains and runs faster).")] = 1.0,
        steps: Annotated[int, typer.Option("--steps", help="Training steps with --train-on.")] = 200,
        threads: Annotated[int, typer.Option("--threads", help="torch CPU threads (1: fastest for small images on a "
                                             "busy machine; the bytes written do not depend on the core count).")] = 1,
        as_json: JsonOpt = False,
    ) -> None:
        """Write K DeepAugment copies of a dataset: images through a CAE or EDSR network with randomly
        distorted weights and forward pass (Hendrycks et al. 2021)."""
        check_count(copies, "--copies")
        check_count(steps, "--steps")
        check_count(threads, "--threads")
        from shiftbench.datasets.deepaugment import deepaugment  # deferred: loads pandas

        with progress() if not as_json else _Quiet() as bar:
            tasks: dict[str, int] = {}

            def on_progress(stage: str, done: int, total: int) -> None:
                if bar is None:
                    return
                if stage not in tasks:
                    tasks[stage] = bar.add_task("training" if stage == "train" else "writing images", total=total)
                bar.update(tasks[stage], completed=done, total=total)

            res = deepaugment(input, output, network=network, checkpoint=checkpoint, train_on=train_on,
                              copies=copies, seed=seed, width=width, train_steps=steps, threads=threads,
                              on_progress=on_progress)
        if as_json:
            print(json.dumps(res.to_dict()))
            return
        if res.train_loss is not None:
            out.print(f"{res.network} (width {res.width:g}) {res.weights}: final loss {res.train_loss:.4f}",
                      markup=False, highlight=False)
        else:
            out.print(f"{res.network} (width {res.width:g}) from {res.weights}", markup=False, highlight=False)
        out.print(f"wrote {res.written} images ({res.copies} cop{'y' if res.copies == 1 else 'ies'} of {res.images} "
                  f"in {res.classes} classes) to {res.output} in {res.seconds:.1f} s; {res.already} already there",
                  markup=False, highlight=False)
        out.print(f"read it as: folder:{res.output}", markup=False, highlight=False)


class _Quiet:
    """No progress bar (``--json``)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
