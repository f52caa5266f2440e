"""What a user installing shiftbench gets besides the code: a wheel with ``py.typed``, the licence
and the project's URLs; a README whose links work on PyPI; every public name in ``dir()``,
``help()`` and a type checker's eyes; and an API reference site that builds strictly, offline."""
from __future__ import annotations

import ast
import email
import importlib
import pydoc
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

import shiftbench

ROOT = Path(__file__).resolve().parents[1]
DOCS_SITE = "https://shiftbench.github.io/shiftbench/"
URLS = {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}


# ------------------------------------------------------------------------------------ the wheel
@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel built from a copy of the sources (a build in the work tree would share its
    build/ folder with anyone else building there), without network or build isolation."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src-copy"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-q", "-w", str(tmp / "dist"), str(src)], check=True, capture_output=True, text=True)
    (path,) = (tmp / "dist").glob("shiftbench-*.whl")
    return zipfile.ZipFile(path)


def _metadata(whl: zipfile.ZipFile) -> email.message.Message:
    (name,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(whl.read(name))


def test_wheel_carries_py_typed_and_the_licence(wheel):
    names = wheel.namelist()
    assert "shiftbench/py.typed" in names                       # PEP 561: type checkers read the package
    licence = [n for n in names if re.fullmatch(r"shiftbench-[^/]+\.dist-info/licenses/LICENSE", n)]
    assert licence and "MIT License" in wheel.read(licence[0]).decode()
    meta = _metadata(wheel)
    assert meta["License-Expression"] == "MIT" and meta["License-File"] == "LICENSE"


def test_wheel_metadata_names_the_project_urls(wheel):
    urls = dict(v.split(", ", 1) for v in _metadata(wheel).get_all("Project-URL"))
    assert set(urls) == URLS
    assert urls["Documentation"] == DOCS_SITE
    assert all(u.startswith("https://") for u in urls.values())


def test_long_description_has_no_relative_links(wheel):
    """PyPI shows the README without the repository around it: a link to docs/x.md is dead there."""
    readme = _metadata(wheel).get_payload()
    assert "# shiftbench" in readme
    assert not re.search(r"\]\((?!https?://|#)", readme), "a relative Markdown link in the long description"
    assert "](docs/" not in readme and 'href="docs/' not in readme


# ------------------------------------------------------------------------------------ README links
def _links(text: str) -> list[str]:
    from markdown_it import MarkdownIt

    out = []
    for tok in MarkdownIt("commonmark").parse(text):
        for child in tok.children or ():
            if child.type == "link_open":
                out.append(child.attrs["href"])
    return out


def _anchors(text: str) -> set[str]:
    """The ids MkDocs gives the headings of a Markdown page (toc's default slugify)."""
    from markdown.extensions.toc import slugify

    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in headings}


def test_readme_links_are_absolute_or_in_page_and_reach_a_real_page():
    readme = (ROOT / "README.md").read_text()
    links = _links(readme)
    assert links, "no links found: the parser changed?"
    for href in links:
        assert href.startswith(("https://", "http://", "#")), f"relative link in README.md: {href}"
        if href.startswith("#"):
            assert href[1:] in _anchors(readme), f"README.md links to a missing heading: {href}"
        elif href.startswith(DOCS_SITE) and href != DOCS_SITE:
            page, _, anchor = href.removeprefix(DOCS_SITE).partition("#")
            md = ROOT / "docs" / f"{page.strip('/')}.md"
            assert md.exists(), f"README.md links to {href}, but docs/{md.name} does not exist"
            assert not anchor or anchor in _anchors(md.read_text()), f"no heading #{anchor} in {md.name}"


# ------------------------------------------------------------------------------------ dir, help
def test_dir_lists_every_public_name():
    assert set(shiftbench.__all__) <= set(dir(shiftbench))
    assert {"evaluate", "place_models", "load_model", "fit_trend"} <= set(dir(shiftbench))


def test_help_lists_the_lazily_imported_names():
    text = pydoc.render_doc(shiftbench, renderer=pydoc.plaintext)
    functions = text.split("\nFUNCTIONS\n", 1)[1]
    for name in ("evaluate", "place_models", "load_model", "fit_trend", "effective_robustness"):
        assert re.search(rf"^    {name}\(", functions, re.M), f"help(shiftbench) does not show {name}"
    assert re.search(r"^    class Testbed\b", text, re.M)


# ------------------------------------------------------------------------------------ typing
def _type_checking_imports() -> dict[str, str]:
    """name -> module imported under ``if TYPE_CHECKING:`` in shiftbench/__init__.py."""
    tree = ast.parse((ROOT / "src" / "shiftbench" / "__init__.py").read_text())
    seen = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom):
                    seen.update({a.asname or a.name: imp.module for a in imp.names})
    return seen


def test_every_lazy_name_is_imported_for_type_checkers():
    """``_LAZY`` names come from ``__getattr__`` at run time, which type checkers see as Any: each
    must also be imported, from the same module, under ``if TYPE_CHECKING:``."""
    seen = _type_checking_imports()
    lazy = importlib.import_module("shiftbench")._LAZY
    missing = {n: m for n, m in lazy.items() if seen.get(n) != m}
    assert not missing, f"add to the `if TYPE_CHECKING:` block of shiftbench/__init__.py: {missing}"


USER_SCRIPT = """\
import shiftbench as sb

tb = sb.load_testbed("imagenet-reference")
reveal_type(tb)
fit = sb.fit_trend(tb, "val", "imagenetv2-matched-frequency-format-val")
reveal_type(fit)
reveal_type(sb.evaluate)
reveal_type(sb.place_models)
"""


# shiftbench's own modules are followed silently (their errors are not this test's); the big
# third-party packages are not read at all (torch alone is 1,450 modules, ~13 s): their types are Any
MYPY_INI = """\
[mypy]
ignore_missing_imports = True
follow_imports = silent
[mypy-torch.*,torchvision.*,timm.*,matplotlib.*,rich.*,PIL.*,scipy.*,pandas.*,sklearn.*,plotly.*,pyarrow.*,\
duckdb.*,typer.*,ray.*,datasets.*,open_clip.*,safetensors.*,pydantic.*,skimage.*]
follow_imports = skip
"""


def test_a_type_checker_sees_the_real_types_of_the_public_api(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(USER_SCRIPT)
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    out = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
                          "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), str(script)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    revealed = re.findall(r'user\.py:(\d+): note: Revealed type is "(.*)"', out.stdout)
    assert len(revealed) == 4, out.stdout + out.stderr
    types = [t for _, t in revealed]
    assert types[0] == "shiftbench.testbed.Testbed"
    assert types[1] == "shiftbench.analysis.trend.TrendFit"
    assert all(t.startswith("def (") for t in types[2:]), types     # callables, with their real signatures
    assert "settings: " in types[2] and "store: " in types[2]
    assert "testbed: shiftbench.testbed.Testbed" in types[3]
    assert " error:" not in out.stdout, out.stdout


# ------------------------------------------------------------------------------------ docs site
NO_NETWORK_BUILD = """\
import socket, sys

def refuse(*args, **kwargs):
    raise OSError("the docs build tried to reach the network")

socket.socket.connect = socket.socket.connect_ex = refuse
socket.create_connection = socket.getaddrinfo = refuse
from mkdocs.__main__ import cli

sys.argv = ["mkdocs", "build", "--strict", "--config-file", sys.argv[1], "--site-dir", sys.argv[2]]
cli()
"""


@pytest.mark.slow          # 7-8 CPU-seconds; 15-25 s of wall time on the shared 2-core machine
def test_docs_site_builds_strictly_and_offline(tmp_path):
    """``mkdocs build --strict`` (warnings are errors: a broken cross-reference, a page missing
    from the nav, a link to a missing page or heading) with every socket refused; every name of
    a documented module's ``__all__`` is on its page, lazily imported ones too."""
    site = tmp_path / "site"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", NO_NETWORK_BUILD, str(ROOT / "mkdocs.yml"), str(site)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    took = time.perf_counter() - start
    assert out.returncode == 0, out.stderr[-4000:]
    assert "WARNING" not in out.stderr, out.stderr
    for page, module in _reference_directives():
        html = (site / "api" / page / "index.html").read_text()
        missing = [n for n in getattr(importlib.import_module(module), "__all__", ())
                   if f'id="{module}.{n}"' not in html]
        assert not missing, f"docs/api/{page}.md does not document {module}.{missing}"
    for page in (ROOT / "docs").glob("*.md"):
        if page.stem != "index":
            assert (site / page.stem / "index.html").exists(), page.name
    home = (site / "index.html").read_text()
    assert "Three shortest paths" in home                   # the README is the home page
    print(f"docs site built in {took:.1f} s")


def _reference_directives() -> list[tuple[str, str]]:
    """(page, module) for every ``::: module`` of docs/api/*.md that renders its members."""
    out = []
    for md in sorted((ROOT / "docs" / "api").glob("*.md")):
        for m in re.finditer(r"^::: (\S+)\n((?:    .*\n)*)", md.read_text(), re.M):
            if "members: false" not in m[2]:
                out.append((md.stem, m[1]))
    return out


def test_every_analysis_module_is_on_the_analysis_page():
    page = (ROOT / "docs" / "api" / "analysis.md").read_text()
    modules = {p.stem for p in (ROOT / "src" / "shiftbench" / "analysis").glob("*.py") if not p.stem.startswith("_")}
    missing = {m for m in modules if f"::: shiftbench.analysis.{m}\n" not in page + "\n"}
    assert not missing, f"add to docs/api/analysis.md: {sorted(missing)}"
