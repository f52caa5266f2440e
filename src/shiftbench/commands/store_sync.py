"""``shiftbench store sync SRC DST``: copy a whole results store between a folder and a bucket
(:func:`shiftbench.store.sync.sync_store`: resumable, each file verified by size and SHA-256)."""
from __future__ import annotations

import json
from typing import Annotated

import typer

from shiftbench.cli_help import PlainHelpGroup
from shiftbench.cli_options import JsonOpt, store_location
from shiftbench.cli_support import jsonable, out, progress

store_app = typer.Typer(no_args_is_help=True, cls=PlainHelpGroup,
                        help="Copy a results store between a folder and a bucket (s3://, gs://, az://).")

_WHERE = "a folder, or a URI such as s3://bucket/prefix (credentials and endpoint from the environment: " \
         "AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_PROFILE...)"


def register(app: typer.Typer) -> None:
    """Add ``store sync`` to the ``shiftbench`` app."""
    app.add_typer(store_app, name="store")


@store_app.command("sync")
def sync_cmd(
    src: Annotated[str, typer.Argument(help=f"The store to copy: {_WHERE}.")],
    dst: Annotated[str, typer.Argument(help=f"Where to: {_WHERE}; missing, empty, or a store.")],
    as_json: JsonOpt = False,
) -> None:
    """Copy every file of the store SRC to DST, verifying each (size and SHA-256).

    Run it again after an interruption: files already at DST with the same size and hash are
    skipped. Finished results are copied last, so a half-copied store is a valid store with fewer
    finished results; files at DST that SRC lacks are left alone."""
    from shiftbench.store.sync import sync_store  # deferred: loads pyarrow

    bar = progress()
    tasks: list = []

    def start(n_files: int) -> None:           # both stores checked: a wrong one is one line, no bar
        bar.start()
        tasks.append(bar.add_task(f"sync {src} -> {dst}", total=n_files))

    try:
        report = sync_store(store_location(src), store_location(dst), on_start=start,
                            on_file=lambda rel, size: bar.advance(tasks[0]))
    finally:
        bar.stop()
    if as_json:
        print(json.dumps(jsonable(report.to_dict())))
        return
    out.print(f"{report.files} files in {report.src}: {report.copied} copied ({report.bytes_copied} bytes), "
              f"{report.skipped} already in {report.dst} (same size and hash)")
