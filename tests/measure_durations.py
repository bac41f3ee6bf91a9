"""Regenerate tests/durations.json (the per-test durations that put a test in the slow tier, tests/conftest.py)
from the JUnit XML of a full run:

    python -m pytest -q -n 2 --junitxml=/tmp/full.xml
    python tests/measure_durations.py /tmp/full.xml
"""
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import FAST_TIER_SECONDS  # noqa: E402


def node_id(classname: str, name: str) -> str:
    """pytest's node id of a JUnit test case (its classname is the module's dotted path, then any classes)."""
    parts = classname.split(".")
    for k in range(len(parts), 0, -1):
        path = "/".join(parts[:k]) + ".py"
        if (ROOT / path).exists():
            # a test of an xdist group (tests/conftest.py: the module's path) has the id NODEID@GROUP, which JUnit
            # writes test[params]@GROUP] for a parametrized test (it parses the params up to the last "]")
            for suffix in (f"@{path}]", f"@{path}"):
                if name.endswith(suffix):
                    name = name[:-len(suffix)]
                    break
            return "::".join([path, *parts[k:], name])
    raise SystemExit(f"{classname}: no such test module")


def main(xml_path: str) -> None:
    out = {}
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        seconds = float(case.get("time"))
        if seconds > FAST_TIER_SECONDS:
            out[node_id(case.get("classname"), case.get("name"))] = round(seconds, 2)
    text = json.dumps(dict(sorted(out.items())), indent=0, ensure_ascii=False) + "\n"
    (ROOT / "tests" / "durations.json").write_text(text, encoding="utf-8")
    print(f"{len(out)} tests over {FAST_TIER_SECONDS} s")


if __name__ == "__main__":
    main(sys.argv[1])
