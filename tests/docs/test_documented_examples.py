"""Every command and code block of the README and of docs/ runs, as written, and prints what the page shows
(issue 40 item 3); the rules of the pages' markers are in ``doc_runner``."""
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import doc_runner as dr  # noqa: E402

ROOT = dr.ROOT
RUNNABLE_PAGES = [p for p in dr.pages() if any(b.runs for b in dr.blocks(p))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=[p.name for p in RUNNABLE_PAGES])
def test_the_page_runs_as_written(page, tmp_path):
    env = dr.folder(tmp_path)
    for b in dr.blocks(page):
        if b.runs:
            dr.run_block(b, tmp_path, env)


def test_every_shell_and_python_block_runs_or_says_why_not():
    """No command or code block is silently left out: each runs, or carries a norun marker with its reason."""
    seen = 0
    for page in dr.pages():
        for b in dr.blocks(page):
            if b.language in ("console", "bash", "sh", "shell", "python", "py"):
                assert b.language in dr.RUN_LANGUAGES, f"{b.where}: use ```console, ```bash or ```python"
                assert b.runs or len(b.markers.get("norun", "").strip()) >= 10, f"{b.where}: say why it is not run"
                seen += 1
    assert seen >= 15


def test_the_readme_and_ci_run_the_same_commands():
    """.ci/run runs the README's set-up and test commands as written (the README's ```bash blocks)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = readme.split("## Set-up", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0].strip()
    tests = readme.split("## Tests", 1)[1].split("```bash\n", 1)[1].split("\n```", 1)[0].strip()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert setup == 'python -m venv .venv && . .venv/bin/activate && pip install -e ".[test]"'
    assert tests == "python -m pytest -q -n 2" and setup in ci and tests in ci and ci.index(setup) < ci.index(tests)
    fast = readme.split("## Tests", 1)[1].split("```bash\n", 2)[2].split("\n```", 1)[0].strip()
    assert fast == 'python -m pytest -q -n 2 -m "not slow"'
    for comment in re.findall(r"# (tests/\S+\.py)", (ROOT / ".ci" / "run").read_text()):
        assert (ROOT / comment).is_file(), comment           # the paths .ci/run names exist
    assert "mkdocs build --strict" in ci[-1]


def test_the_readme_is_a_front_page_that_links_every_docs_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert page.name in nav, f"{page.name} is not in mkdocs.yml's nav"
        if page.name != "index.md":
            assert f"(docs/{page.name})" in readme, f"the README does not link docs/{page.name}"


def test_the_runner_compares_what_it_should():
    """The comparison itself: equal lines, '...' for any lines, a changed line or count fails."""
    assert dr.matches(["a", "...", "all 19 checks passed"], ["a", "x", "y", "all 19 checks passed"])
    assert dr.matches(["a", "...", "b"], ["a", "b"])
    assert not dr.matches(["a", "...", "all 10 checks passed"], ["a", "x", "all 19 checks passed"])
    assert not dr.matches(["a"], ["a", "b"])
    assert dr.is_excerpt(["x = 1", "...", "z = 3"], "x = 1\ny = 2\nz = 3\n")
    assert not dr.is_excerpt(["z = 3", "x = 1"], "x = 1\ny = 2\nz = 3\n")
    assert dr.console_commands("$ a \\\n  b\nout\n$ c\n") == [("a \n  b", ["out"]), ("c", [])]


def test_the_api_reference_covers_what_the_python_api_page_presents():
    """docs/api.md (mkdocstrings) lists every ``blr.NAME(...)`` that docs/python-api.md shows, each a public function
    of blr_derive.api, and the docs extra pins the handler that renders it."""
    import blr_derive.api as api
    shown = set(re.findall(r"\bblr\.(\w+)\(", (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")))
    reference = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    members = re.search(r"::: blr_derive\.api\n    options:\n      members:\n((?:        - \w+\n)+)", reference)
    listed = set(re.findall(r"- (\w+)", members.group(1)))
    assert shown >= {"family", "recipe", "derive", "compare", "families", "catalog"} and shown <= listed, shown - listed
    assert all(callable(getattr(api, n)) and n in api.__all__ for n in listed), listed - set(api.__all__)
    assert re.search(r'"mkdocstrings-python==[\d.]+"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "mkdocstrings" in nav and "api.md" in nav
