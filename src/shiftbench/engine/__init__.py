"""The evaluation engine: runner (local) and executors (Ray)."""
from shiftbench.engine.runner import evaluate

__all__ = ["evaluate"]
