"""The generated header's 'regenerate with' command reproduces the module byte for byte when run from the
directory the first command ran in (issue 40 item 4): a relative path stays relative to that directory, an
absolute one stays absolute, a name stays a name.  (It recorded the file's base name: from where it ran it said
'file not found'.)"""
import re
import shlex
import shutil

import pytest

from conftest import ROOT, run_cli_in_process

from test_cli import run_cli

CATALOG = ROOT / "catalog"


def _regenerate(text):
    command = re.search(r"^# DO NOT EDIT: regenerate with `(.*)`\.$", text, re.M).group(1)
    words = shlex.split(command)
    assert words[0] == "blr-derive"
    return words[1:]


@pytest.mark.slow
def test_the_header_command_regenerates_from_where_it_ran(tmp_path):
    work = tmp_path / "work"
    (work / "recipes" / "mine").mkdir(parents=True)
    (work / "families").mkdir()
    shutil.copy(CATALOG / "rmsprop.yaml", work / "recipes" / "mine" / "my rms.yaml")
    shutil.copy(ROOT / "families" / "gaussian_diag.yaml", work / "families" / "fam.yaml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    runs = [
        (work, ["recipes/mine/my rms.yaml", "--target", "torch"], ["recipes/mine/my rms.yaml", "--target", "torch"]),
        (work / "recipes", ["./mine/../mine/my rms.yaml"], ["mine/my rms.yaml", "--target", "numpy"]),
        (elsewhere, [str(work / "recipes" / "mine" / "my rms.yaml"), "--target", "jax"],
         [str(work / "recipes" / "mine" / "my rms.yaml"), "--target", "jax"]),
        (elsewhere, ["../work/families/fam.yaml", "--loss", "abstract", "--approx", "delta", "--approx",
                     "squared_gradient_hessian", "--set", "state_init={s: 1.0}"],
         ["../work/families/fam.yaml", "--loss", "abstract", "--approx", "delta", "--approx",
          "squared_gradient_hessian", "--set", "state_init={s: 1.0}", "--target", "numpy"]),
    ]
    for i, (cwd, args, recorded) in enumerate(runs):
        # the command line's main in this process, in the directory each command runs in (the first case's header
        # command also in a real process)
        first = run_cli_in_process(*args, cwd=cwd)
        assert first.returncode == 0, (args, first.stderr)
        words = _regenerate(first.stdout)
        assert words == recorded, (args, words)
        for run in (run_cli_in_process, run_cli) if i == 0 else (run_cli_in_process,):
            again = run(*words, cwd=cwd)                # the header's command, where the first one ran
            assert again.returncode == 0, (words, again.stderr)
            assert again.stdout == first.stdout, words


@pytest.mark.slow
def test_catalog_artifacts_keep_the_catalog_label(tmp_path):
    """A catalog recipe, by name or by any path, records `catalog/NAME.yaml`: the output does not depend on the
    machine, and equals the committed artifact (whose header's command runs from the repository root)."""
    for cwd, ref, run in ((tmp_path, "adam", run_cli), (ROOT, "catalog/adam.yaml", run_cli_in_process),
                          (tmp_path, str(CATALOG / "adam.yaml"), run_cli_in_process)):
        res = run(ref, "--target", "torch", cwd=cwd)
        assert res.returncode == 0, res.stderr
        assert _regenerate(res.stdout) == ["catalog/adam.yaml", "--target", "torch"]
        assert res.stdout == (CATALOG / "generated" / "torch" / "adam.py").read_text(encoding="utf-8")
