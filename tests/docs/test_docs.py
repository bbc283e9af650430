"""The documentation stays true: every docs page a file names exists, the site builds in strict
mode (broken links fail; `make docs`, marked `docs`), the code samples marked to run do run, and
installs carry only the mission's top-level packages.

A sample runs when the line before its fence is ``<!-- run -->`` (invisible on the site)::

    <!-- run -->
    ```python
    from forge_kernels.metrics import Reduce
    ```
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS_REF = re.compile(r"\bdocs/[\w./-]+\.md\b")
RUN_MARK = "<!-- run -->"


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / p for p in out.splitlines() if p.endswith((".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt"))
            or p in ("Makefile",)]


def test_every_named_docs_page_exists():
    missing = {}
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        for ref in DOCS_REF.findall(path.read_text(errors="replace")):
            if not (ROOT / ref).is_file():
                missing.setdefault(str(path.relative_to(ROOT)), []).append(ref)
    assert not missing, f"files name docs pages that do not exist: {missing}"


def test_the_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_every_docs_page_is_in_the_navigation():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, str):
            listed.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(nav)
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == listed, f"not in nav: {sorted(pages - listed)}; in nav, missing: {sorted(listed - pages)}"


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _marked_python_blocks() -> list[tuple[str, str]]:
    """(page:line, source) of every fenced python block right after a run mark."""
    blocks = []
    for page in _pages():
        text = page.read_text()
        for match in re.finditer(rf"^{re.escape(RUN_MARK)}\n```python\n(.*?)\n```", text, flags=re.S | re.M):
            line = text.count("\n", 0, match.start()) + 3  # the sample's first line
            blocks.append((f"{page.relative_to(ROOT)}:{line}", match.group(1) + "\n"))
    return blocks


@pytest.mark.parametrize("where,source", _marked_python_blocks(), ids=lambda v: v if ".md:" in v else "")
def test_marked_code_samples_run(where, source, tmp_path, monkeypatch):
    """Each sample runs alone, in a fresh namespace, in a temp cwd (so it can write files), with
    no metric left over from an earlier test in this process."""
    from forge_kernels.metrics import get_collector

    get_collector().drain()
    monkeypatch.chdir(tmp_path)
    path, line = where.rsplit(":", 1)
    # dont_inherit: not this module's `from __future__ import annotations`; tracebacks name the page line
    code = compile("\n" * (int(line) - 1) + source, str(ROOT / path), "exec", dont_inherit=True)
    exec(code, {"__name__": "docs_sample"})


def test_every_run_mark_precedes_a_python_block():
    """A mark followed by anything else (a typo, a yaml block) would silently run nothing."""
    marks = sum(len(re.findall(rf"^{re.escape(RUN_MARK)}[ \t]*$", page.read_text(), flags=re.M)) for page in _pages())
    assert marks == len(_marked_python_blocks())
    assert len(_marked_python_blocks()) >= 6


@pytest.mark.docs
def test_site_builds_in_strict_mode(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1",
                                                                            "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "api" / "index.html").read_text().count("token_logprobs") > 0


def test_installs_carry_only_the_mission_packages():
    """``pip install .`` must not put generic top-level ``apps`` or ``bench`` packages into
    site-packages (they are in-repo entry points, run from the repository root)."""
    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ()))
    assert {p.split(".")[0] for p in packages} == {"forge_kernels", "actors", "losses"}


def test_installed_code_imports_no_in_repo_entry_point():
    """What ``pip install .`` ships must not import ``apps``, ``bench``, ``examples`` or ``tests``:
    they are not installed, so such an import works in the repository and fails everywhere else."""
    in_repo_only = {"apps", "bench", "examples", "tests"}
    offenders = []
    for package in ("forge_kernels", "actors", "losses"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
                      == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
                      and isinstance(node.args[0].value, str)):
                    names = [node.args[0].value]
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                              if n.split(".")[0] in in_repo_only]
    assert not offenders, offenders
