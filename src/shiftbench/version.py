"""The shiftbench version (part of every results key: ``major.minor``)."""
__version__ = "0.1.0"
