"""CLI commands beyond the core ones in :mod:`shiftbench.cli`, one module per command group.

Each module defines ``register(app)`` adding its typer commands to the ``shiftbench`` app; the
CLI imports every module here. Commands stay thin: one call into the public API each, errors
raised as :class:`~shiftbench.errors.ShiftbenchError` (printed as one line by the CLI), helpers
for tables and progress bars imported from :mod:`shiftbench.cli` inside the command bodies.
"""
