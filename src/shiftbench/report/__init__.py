"""Figures, tables and written reports over a testbed (matplotlib; no torch)."""
from shiftbench.report.figures import plot_trend, save_figure
from shiftbench.report.shifts import NATURAL_SHIFTS, ShiftPair, analyse_shift, write_report

__all__ = ["plot_trend", "save_figure", "NATURAL_SHIFTS", "ShiftPair", "analyse_shift", "write_report"]
