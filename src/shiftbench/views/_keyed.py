"""Value semantics for views that carry class maps (private)."""
from __future__ import annotations

from typing import Any

from shiftbench.views.base import View


class KeyedView(View):
    """A frozen :class:`View` whose identity is ``_key()`` (name, convention and its class map).

    The parametrised views set their attributes once in ``__init__`` (through
    ``object.__setattr__``, as frozen dataclasses do) and never change them afterwards, so
    two views built from the same map compare and hash equal and can key a settings table.
    """

    def _set(self, **attrs: Any) -> None:
        for k, v in attrs.items():
            object.__setattr__(self, k, v)

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, convention={self.convention!r}, {self._summary()})"

    def _summary(self) -> str:
        return ""
