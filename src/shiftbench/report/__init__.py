"""Figures, tables and written reports over a testbed (matplotlib, plotly; no torch)."""
from shiftbench.report.figures import plot_trend, save_figure
from shiftbench.report.html import write_html_report
from shiftbench.report.shifts import NATURAL_SHIFTS, ShiftPair, analyse_shift, write_report

__all__ = ["plot_trend", "save_figure", "NATURAL_SHIFTS", "ShiftPair", "analyse_shift", "write_report",
           "write_html_report"]
