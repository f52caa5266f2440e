"""The evaluation engine: one :class:`EvalRequest`, run by an executor (local or Ray) that owns
the loop over models × datasets; the runner streams each dataset once for every model (one
decode, one shift per pixel pipeline, every view of each model's forward pass)."""
from shiftbench.engine.executor import Executor, LocalExecutor
from shiftbench.engine.request import EvalRequest
from shiftbench.engine.runner import evaluate

__all__ = ["evaluate", "EvalRequest", "Executor", "LocalExecutor", "RayExecutor"]

TYPE_CHECKING = False
if TYPE_CHECKING:  # type checkers and the API reference see it; at run time it is imported on first use
    from shiftbench.engine.ray_executor import RayExecutor


def __getattr__(name: str):
    """``RayExecutor`` is imported on first use."""
    if name == "RayExecutor":
        from shiftbench.engine.ray_executor import RayExecutor  # deferred: loads Pillow, loads pyarrow

        return RayExecutor
    raise AttributeError(f"module 'shiftbench.engine' has no attribute {name!r}")
