"""A griffe extension for the API reference (mkdocs.yml): shiftbench's docstrings, read as Markdown.

The docstrings are written for ``help()`` and doctest: Sphinx roles (``:class:`Testbed```) and bare
doctest lines (``>>> fit.slope``). Markdown knows neither (a ``>>>`` line is a triple blockquote),
so before mkdocstrings renders a docstring this extension

* fences every doctest (a run of lines from a ``>>>`` line to the next blank line) as ``pycon``;
* turns a role into a code span linked to the object's page when the name resolves in the
  docstring's scope (``~`` shows the last component only, as Sphinx does), and a plain code span
  when it does not: such links are optional, so a name outside the reference is never an error.

Packages that import their public names on first use (a ``_LAZY`` dict of name -> module and a
module ``__getattr__``, PEP 562) build ``__all__`` at run time, which static analysis cannot
follow; for those the extension imports the package (cheap: nothing heavy is loaded until a
name is used) and gives griffe its real ``__all__``, each lazy name an alias to where it lives.

The sources stay as they are; ``help()`` and doctest read them unchanged.
"""
from __future__ import annotations

import importlib
import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|term):`(?P<text>[^`]+)`")
FENCE = re.compile(r"^\s*(```|~~~)")


def fence_doctests(text: str) -> str:
    """Wrap each run of doctest lines (``>>>`` to the next blank line) in a ``pycon`` fence."""
    out: list[str] = []
    lines = text.split("\n")
    i, in_fence = 0, False
    while i < len(lines):
        line = lines[i]
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence or not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


def _target(obj: griffe.Object, name: str) -> str | None:
    """The full path of ``name`` as seen from ``obj``'s scope, or None."""
    head, _, rest = name.lstrip(".").partition(".")
    for scope in (obj, obj.module):
        try:
            full = scope.resolve(head)
        except Exception:  # griffe's NameResolutionError, or an alias it cannot follow
            continue
        return f"{full}.{rest}" if rest else full
    return name if "." in name and name.startswith("shiftbench.") else None


def link_roles(text: str, obj: griffe.Object) -> str:
    """``:class:`~a.b.C``` -> an optional cross-reference titled ``C`` (a code span if unresolved)."""

    def sub(m: re.Match) -> str:
        raw = m["text"].strip()
        shown = raw
        if "<" in raw and raw.endswith(">"):          # :class:`title <target>`
            shown, raw = raw[: raw.index("<")].strip(), raw[raw.index("<") + 1:-1].strip()
        short = raw.startswith("~")
        raw = raw.lstrip("~")
        if shown.lstrip("~") == raw:
            shown = raw.rsplit(".", 1)[-1] if short else raw
        target = _target(obj, raw)
        code = f"`{shown}`"
        return f'<autoref identifier="{target}" optional>{code}</autoref>' if target else code

    return ROLE.sub(sub, text)


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


def export_lazy_names(module: griffe.Module) -> None:
    """Give a lazily importing package its run-time ``__all__``, each lazy name an alias."""
    runtime = importlib.import_module(module.path)
    for name, where in runtime._LAZY.items():
        if name not in module.members:                  # else already seen under `if TYPE_CHECKING:`
            module.set_member(name, griffe.Alias(name, f"{where}.{name}", parent=module))
    module.exports = list(runtime.__all__)


class ShiftbenchDocstrings(griffe.Extension):
    """Rewrites every docstring of the loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        for obj in [o for o in _walk(pkg) if o.is_module and "_LAZY" in o.members]:
            export_lazy_names(obj)
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = link_roles(fence_doctests(obj.docstring.value), obj)
