"""shiftbench: measure how image classifiers hold up under distribution shift."""
__version__ = "0.1.0"
