"""Every generated module (catalog/generated/<target>/*.py) is free of undefined names: a name that only a dead
path reads today (a helper a template defines for some recipes only) is a NameError the day a recipe takes that
path.  Checked with pyflakes (in the test extra), whose other findings in generated code — unused imports and
locals that a recipe's template binds but its update does not read — are not errors."""
from pyflakes import api as flakes_api
from pyflakes import messages, reporter

from conftest import GENERATED


class _Collect(reporter.Reporter):
    def __init__(self):
        self.found = []

    def flake(self, message):
        self.found.append(message)

    def unexpectedError(self, filename, msg):
        self.found.append(f"{filename}: {msg}")

    def syntaxError(self, filename, msg, lineno, offset, text):
        self.found.append(f"{filename}:{lineno}: {msg}")


def test_no_generated_module_reads_an_undefined_name():
    files = sorted(GENERATED.glob("*/*.py"))
    assert len(files) > 100
    bad = []
    for path in files:
        rep = _Collect()
        flakes_api.checkPath(str(path), rep)
        bad += [str(m) for m in rep.found if isinstance(m, str) or isinstance(m, (messages.UndefinedName,
                                                                                   messages.UndefinedLocal,
                                                                                   messages.UndefinedExport))]
    assert not bad, "\n".join(bad)
