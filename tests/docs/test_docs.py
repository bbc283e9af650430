"""The documentation stays true: every docs page a file names exists, the site builds in strict
mode (broken links fail), the code samples marked to run do run, and installs carry only the
mission's top-level packages."""

from __future__ import annotations

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


def _marked_python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for match in re.finditer(rf"{re.escape(RUN_MARK)}\n```python\n(.*?)```", page.read_text(), flags=re.S):
            blocks.append((page.name, match.group(1)))
    return blocks


@pytest.mark.parametrize("page,source", _marked_python_blocks(), ids=lambda v: v if v.endswith(".md") else "")
def test_marked_code_samples_run(page, source):
    exec(compile(source, f"docs/{page}", "exec"), {"__name__": f"docs_{page}"})


def test_there_are_runnable_samples():
    assert len(_marked_python_blocks()) >= 2


def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs")
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
