"""Run the examples of the README and the documentation pages (issue 40 item 3), so that the docs cannot go stale.

A page's fenced blocks run in order, in one temporary folder per page that holds links to the repository's
``catalog``, ``families``, ``examples``, ``tests`` and ``benchmarks`` (so paths read as from the repository
root, and nothing is written into the checkout); ``blr-derive`` and ``python`` are this checkout's.

* ``console``: lines ``$ COMMAND`` (a trailing ``\\`` continues it), each followed by the output it prints
  (stdout and stderr together), compared line by line; a line ``...`` stands for any number of lines.
* ``bash``: the block runs as one script (``set -euo pipefail``).
* ``python``: the block runs as a script.

HTML comments on the lines just above a fence change that:

* ``<!-- norun: REASON -->``: not run (installing packages, the test suite itself); the reason is required;
* ``<!-- file: NAME -->``: the block is written to NAME in the folder (a family or recipe file the next blocks use);
* ``<!-- exit: N -->``: the expected exit status of a console block's commands (default 0);
* ``<!-- before: COMMAND -->``: a shell command run first (for a block that needs a file an inline command writes);
* ``<!-- prelude: CODE -->``: Python prepended to a python block (names the page leaves to the reader);
* ``<!-- excerpt: COMMAND -->``: the block is an excerpt of what COMMAND prints: its lines other than ``...`` occur
  in the output, in order.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = ("console", "bash", "python")
LINKS = ("catalog", "families", "examples", "tests", "benchmarks")
MARKER = re.compile(r"^<!-- (norun|file|exit|before|prelude|excerpt): ?(.*?) -->$")


@dataclass
class Block:
    page: str
    line: int                       # of the opening fence
    language: str
    text: str
    markers: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return "norun" not in self.markers and (self.language in RUN_LANGUAGES or "file" in self.markers
                                                or "excerpt" in self.markers)


def pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            i += 1
        markers, j = {}, start - 1
        while j >= 0 and MARKER.match(lines[j]):
            k, v = MARKER.match(lines[j]).groups()
            markers[k] = v
            j -= 1
        out.append(Block(str(path.relative_to(ROOT)), start + 1, m.group(1), "\n".join(body) + "\n", markers))
        i += 1
    return out


def console_commands(text: str) -> list[tuple[str, list[str]]]:
    """[(command, expected output lines)] of a console block."""
    out, lines = [], text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("$ "):
            raise ValueError(f"console block: output before a command: {line!r}")
        cmd = line[2:]
        while cmd.endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd = cmd[:-1] + "\n" + lines[i]
        i += 1
        expected = []
        while i < len(lines) and not lines[i].startswith("$ "):
            expected.append(lines[i])
            i += 1
        out.append((cmd, expected))
    return out


def matches(expected: list[str], got: list[str]) -> bool:
    """Line-by-line equality (trailing spaces ignored), ``...`` standing for any number of lines."""
    expected = [e.rstrip() for e in expected]
    got = [g.rstrip() for g in got]

    def rec(i, j):
        if i == len(expected):
            return j == len(got)
        if expected[i] == "...":
            return any(rec(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and got[j] == expected[i] and rec(i + 1, j + 1)
    return rec(0, 0)


def is_excerpt(block_lines: list[str], output: str) -> bool:
    """The block's lines other than ``...`` occur in ``output``'s lines, in order."""
    got = [g.rstrip() for g in output.split("\n")]
    j = 0
    for line in (b.rstrip() for b in block_lines):
        if line.strip() == "...":
            continue
        while j < len(got) and got[j] != line:
            j += 1
        if j == len(got):
            return False
        j += 1
    return True


def folder(tmp: Path) -> dict:
    """Prepare ``tmp`` (links to the repository's folders, this checkout's commands) and return the environment."""
    for name in LINKS:
        (tmp / name).symlink_to(ROOT / name, target_is_directory=True)
    bin_ = tmp / ".bin"
    bin_.mkdir()
    for name, body in (("blr-derive", f'exec "{sys.executable}" -m blr_derive "$@"\n'),
                       ("python", f'exec "{sys.executable}" "$@"\n')):
        (bin_ / name).write_text("#!/bin/sh\n" + body)
        (bin_ / name).chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(COLUMNS="80", PYTHONIOENCODING="utf-8", MPLBACKEND="Agg")
    if not env.get("PYTHONPYCACHEPREFIX"):       # tests/conftest.py keeps the .pyc files outside every tree
        env["PYTHONDONTWRITEBYTECODE"] = "1"     # else none is written next to a page's files
    env.pop("PYTHONSTARTUP", None)
    return env


def _shell(cmd: str, cwd: Path, env: dict, timeout=600):
    return subprocess.run(["bash", "-c", "set -euo pipefail\n" + cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, encoding="utf-8", timeout=timeout)


def run_block(b: Block, tmp: Path, env: dict) -> None:
    """Run one block in ``tmp``; an AssertionError names the block and what differs."""
    if "file" in b.markers:
        (tmp / b.markers["file"]).write_text(b.text, encoding="utf-8")
        return
    if "before" in b.markers:
        r = _shell(b.markers["before"], tmp, env)
        assert r.returncode == 0, f"{b.where}: before: {b.markers['before']}: {r.stderr}"
    if "excerpt" in b.markers:
        r = _shell(b.markers["excerpt"], tmp, env)
        assert r.returncode == 0, f"{b.where}: {b.markers['excerpt']}: {r.stderr}"
        assert is_excerpt(b.text.rstrip("\n").split("\n"), r.stdout), \
            f"{b.where}: the block is not an excerpt of what `{b.markers['excerpt']}` prints:\n{r.stdout}"
        return
    if b.language == "console":
        status = int(b.markers.get("exit", "0"))
        for cmd, expected in console_commands(b.text):
            r = subprocess.run(["bash", "-c", cmd], cwd=tmp, env=env, capture_output=True, text=True,
                               encoding="utf-8", timeout=600)
            out = (r.stdout + r.stderr).rstrip("\n")
            assert r.returncode == status, f"{b.where}: `{cmd}` exited {r.returncode}, not {status}:\n{out}"
            if expected:
                assert matches(expected, out.split("\n")), \
                    f"{b.where}: `{cmd}` printed\n{out}\n--- the page shows\n" + "\n".join(expected)
    elif b.language == "bash":
        r = _shell(b.text, tmp, env)
        assert r.returncode == 0, f"{b.where}: exited {r.returncode}:\n{r.stdout}{r.stderr}"
    elif b.language == "python":
        script = tmp / f"_block_{b.line}.py"
        script.write_text(b.markers.get("prelude", "") + "\n" + b.text, encoding="utf-8")
        r = subprocess.run([sys.executable, script.name], cwd=tmp, env=env, capture_output=True, text=True,
                           encoding="utf-8", timeout=600)
        assert r.returncode == 0, f"{b.where}: exited {r.returncode}:\n{r.stdout}{r.stderr}"
