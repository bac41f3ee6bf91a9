"""``blr-derive verify`` on optimizers written by people who had not seen the tests (a fuzzing pass): runs that
compared nothing were reported as equal, a user's failing import or sys.exit() as a pass or an engine bug, and a
slow optimizer's time limit was blamed on the recipe."""
import sys

import pytest

from blr_derive.cli import main

USER = '''
import sys
import time
import torch


class AcceptsAnyLr(torch.optim.Adam):
    """torch's Adam, but a negative learning rate is accepted (ascends)."""

    def __init__(self, params, lr=1e-3, **kw):
        super().__init__(params, lr=abs(lr), **kw)


class Exits(torch.optim.Adam):
    def step(self, closure=None):
        sys.exit(0)


class HardBetas(torch.optim.Adam):
    """torch's Adam with its betas fixed at the defaults whatever the caller passes."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), **kw):
        super().__init__(params, lr=lr, betas=(0.9, 0.999), **kw)


class Slow(torch.optim.Adam):
    def step(self, closure=None):
        time.sleep(60)
'''


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "user_opts.py").write_text(USER)
    (tmp_path / "broken_opts.py").write_text("def f(:\n")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("user_opts", "broken_opts"):
        sys.modules.pop(name, None)


def test_nothing_compared_is_not_a_pass(user_dir, capsys):
    """Both optimizers refuse lr = −1: 0 runs, and 'equals' with exit status 0 before."""
    assert main(["verify", "adam", "--against", "torch.optim:Adam", "--value", "lr=-1"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Adam was NOT compared with the BLR derivation of recipe 'adam': no setting ran")
    assert "both optimizers refuse it: Invalid learning rate: -1" in out


def test_a_setting_only_one_of_them_refuses_is_a_difference(user_dir, capsys):
    assert main(["verify", "adam", "--against", "user_opts:AcceptsAnyLr", "--value", "lr=-0.001"]) == 1
    out = capsys.readouterr().out
    assert "is NOT the BLR derivation" in out and "'constructor'" in out
    assert "yours:   accepts these hyperparameters" in out and "derived: raises ValueError: Invalid learning rate" in out


@pytest.mark.parametrize("against, message", [
    ("broken_opts:f", "--against: cannot import 'broken_opts' (SyntaxError: invalid syntax"),
    ("user_opts:Exits", "--against: your optimizer called sys.exit(0) during the comparison"),
])
def test_a_user_module_that_fails_is_a_located_error(user_dir, capsys, against, message):
    """A SyntaxError on import was 'internal error ... a bug in blr-derive' (exit 3); sys.exit(0) in step() exited
    0 with no output, which a CI job reads as a pass."""
    assert main(["verify", "adam", "--against", against]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("blr-derive: error: <command line>: " + message) and "\n" not in err


def test_a_slow_optimizer_is_not_blamed_on_the_recipe(user_dir, capsys):
    assert main(["verify", "adam", "--against", "user_opts:Slow", "--time-limit", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("blr-derive: error: <command line>: --against: the comparison did not finish within the time "
                   "limit of 3 s (your optimizer's steps; a larger --time-limit allows more)")


def test_defaults_other_than_zero_are_varied(user_dir, capsys):
    """Only zero and tiny defaults were switched on, so an Adam that ignores its betas passed; every float default
    is now also halved in one setting, and SGD's Nesterov (refused with the active setting's dampening by both)
    is retried with one change undone at a time."""
    assert main(["verify", "adam", "--against", "user_opts:HardBetas"]) == 1
    out = capsys.readouterr().out
    assert "is NOT the BLR derivation" in out and "betas=(0.45, 0.4995)" in out
    assert main(["verify", "sgd", "--against", "torch.optim:SGD"]) == 0
    assert "not exercised" not in capsys.readouterr().out
