"""Issue 38's measures of the code generators' templates at any git revision (default HEAD): the templates' lines
and ``{% if %}``/``{% elif %}`` branches (total and largest), the identical lines the torch and Triton templates
share and those the numpy and jax templates share, and the files that hold one piece of text each target prints
(the files one small change must touch).

    python benchmarks/count_template_measures.py [REV ...]

Read from git (``git show REV:path``), so any revision of the checkout can be measured without checking it out."""
from __future__ import annotations

import collections
import re
import subprocess
import sys

BRANCH = re.compile(r"\{%-?\s*(if|elif)\b")

#: text each target prints, and what a change of it means (the files that hold it are the files to touch)
PROBES = [
    ("the provenance header (every target)", "# DO NOT EDIT: regenerate with"),
    ("set_data()'s unknown-data message (torch, Triton)", "set_data(): unknown data"),
    ("the step closure's incomplete-sample message (torch, Triton)", "a sample is incomplete"),
    ("an oracle read's missing-gradient message (torch, Triton)", "this optimizer needs p."),
    ("an entry point's missing-hyperparameter message (numpy, jax)", "this step needs the hyperparameter"),
    ("an array's shape message (numpy, jax)", "got an array of shape"),
    ("a domain check's call (numpy, jax)", "_check_domain({{"),
    ("a constructor's validation message (optimizer targets)", "must be 1-element"),
]


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def files(rev: str) -> dict[str, str]:
    names = git("ls-tree", "-r", "--name-only", rev, "codegen").split()
    return {n: git("show", f"{rev}:{n}") for n in names if n.endswith((".py", ".j2"))}


def backend_templates(tree: dict[str, str], target: str) -> list[str]:
    return [t for n, t in tree.items() if n.startswith(f"codegen/backends/{target}/templates/") and n.endswith(".j2")]


#: a line that is a Jinja statement or comment alone ({% endif %}, {% endfor %}...): not counted as shared text
TAG_ONLY = re.compile(r"^\s*(\{%.*?%\}|\{#.*?#\})\s*$")


def shared_lines(a: list[str], b: list[str]) -> int:
    """Identical lines (indentation included) of the templates ``a`` and ``b``, counted as a multiset: lines of at
    least 8 characters besides spaces that are not a Jinja tag alone (``{% endfor %}`` or a closing bracket is no copy)."""
    def count(texts: list[str]) -> collections.Counter:
        return collections.Counter(l.rstrip() for t in texts for l in t.splitlines()
                                   if len(l.strip()) >= 8 and not TAG_ONLY.match(l))
    return sum((count(a) & count(b)).values())


def measure(rev: str) -> None:
    tree = files(rev)
    templates = {n: t for n, t in tree.items() if n.endswith(".j2")}
    sizes = {n: (len(t.splitlines()), len(BRANCH.findall(t))) for n, t in templates.items()}
    big_l = max(sizes, key=lambda n: sizes[n][0])
    big_b = max(sizes, key=lambda n: sizes[n][1])
    print(f"{rev} ({git('rev-parse', '--short', rev).strip()})")
    print(f"  templates: {len(templates)}, {sum(l for l, _ in sizes.values())} lines, "
          f"{sum(b for _, b in sizes.values())} if/elif branches")
    print(f"  largest: {big_l} {sizes[big_l][0]} lines; most branches: {big_b} {sizes[big_b][1]}")
    over = [n for n, (l, b) in sizes.items() if l > 250 or b > 40]
    print(f"  above 250 lines or 40 branches: {len(over)} {over}")
    shared = [n for n in templates if n.startswith("codegen/templates/")]
    print(f"  shared templates (codegen/templates/): {len(shared)}, {sum(sizes[n][0] for n in shared)} lines")
    print(f"  identical lines torch/Triton templates: "
          f"{shared_lines(backend_templates(tree, 'torch'), backend_templates(tree, 'triton'))}; "
          f"numpy/jax: {shared_lines(backend_templates(tree, 'numpy'), backend_templates(tree, 'jax'))}")
    for what, text in PROBES:
        holders = sorted(n for n, t in tree.items() if text in t)
        print(f"  {what}: {len(holders)} file(s) {holders}")


if __name__ == "__main__":
    for rev in sys.argv[1:] or ["HEAD"]:
        measure(rev)
