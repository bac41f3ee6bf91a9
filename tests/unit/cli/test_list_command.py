"""``blr-derive list`` and "did you mean" for misspelt recipe and family names (issue 40 item 4): the names a
newcomer needs are found through the command line, not by reading the folders."""
import re

import yaml
from conftest import ROOT

from test_cli import run_cli
from test_family_command import one_error_line

CATALOG = ROOT / "catalog"
FAMILIES = ROOT / "families"


def _rows(stdout):
    return [re.match(r"^(recipe|family)  (\S+)(?:\s+(.*))?$", line).groups() for line in stdout.splitlines()]


def test_list_shows_every_recipe_and_family_once_with_its_title(tmp_path):
    res = run_cli("list", cwd=tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    rows = _rows(res.stdout)
    recipes = sorted(p.stem for p in CATALOG.glob("*.yaml"))
    families = sorted(p.stem for p in FAMILIES.glob("*.yaml"))
    assert [n for k, n, _ in rows if k == "recipe"] == recipes
    assert [n for k, n, _ in rows if k == "family"] == families
    assert len(rows) == len(recipes) + len(families) > 90
    text = {n: t for _, n, t in rows}
    # the text is the recipe's title / the family's description, read from the files themselves
    newton = yaml.safe_load((CATALOG / "newton.yaml").read_text(encoding="utf-8"))
    assert text["newton"] == " ".join(newton["title"].split())
    gamma = yaml.safe_load((FAMILIES / "gamma.yaml").read_text(encoding="utf-8"))
    assert text["gamma"] == " ".join(gamma["description"].split())


def test_list_filters_by_words_and_kind(tmp_path):
    res = run_cli("list", "adam", cwd=tmp_path)
    names = [n for _, n, _ in _rows(res.stdout)]
    assert res.returncode == 0 and {"adam", "adamw", "adamax", "nadam", "dropout_adam"} <= set(names)
    assert all("adam" in line.lower() for line in res.stdout.splitlines())
    res = run_cli("list", "--kind", "family", "GAUSSIAN", "diag", cwd=tmp_path)
    rows = _rows(res.stdout)
    assert rows and all(k == "family" and "gaussian" in (n + t).lower() and "diag" in (n + t).lower()
                        for k, n, t in rows)
    assert "gaussian_diag" in [n for _, n, _ in rows] and "gaussian_full" not in [n for _, n, _ in rows]
    res = run_cli("list", "no-such-word-anywhere", cwd=tmp_path)
    assert res.returncode == 1 and res.stdout == "" and "nothing matches" in res.stderr
    one_error_line(run_cli("list", "--kind", "optimizer", cwd=tmp_path), "<command line>: ", "--kind")


def test_every_listed_name_resolves_to_its_kind(tmp_path, monkeypatch):
    """Every name in the list is accepted where a recipe or a family is: it resolves (from any directory) to the
    bundled file of the kind the list says."""
    from blr_derive.api import resolve_input
    from blr_derive.cli.names import entries
    monkeypatch.chdir(tmp_path)
    rows = entries()
    shadowed = []
    for kind, name, text in rows:
        path, resolved = resolve_input(name)
        if (resolved, kind) == ("recipe", "family"):   # a family named like a recipe: the line gives its path
            given = re.search(r"give this family as (\S+)\]$", text).group(1)
            assert resolve_input(given)[1] == "family", name
            shadowed.append(name)
            continue
        assert (resolved, path.name) == (kind, f"{name}.yaml"), name
    assert sorted(shadowed) == ["laplace", "normal_gamma", "normal_wishart"]
    assert {k for k, _, _ in rows} == {"recipe", "family"}


def _main(capsys, *args):
    from blr_derive.cli import main
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_misspelt_names_get_a_suggestion(tmp_path, capsys, monkeypatch):
    one_error_line(run_cli("adamm", cwd=tmp_path), "adamm: file not found", "did you mean 'adam'?")
    monkeypatch.chdir(tmp_path)
    for args, needles in [(("newtn", "--target", "torch"), ("newtn: file not found", "did you mean 'newton'?")),
                          (("gausian_diag", "--loss", "abstract", "--approx", "delta"),
                           ("gausian_diag: file not found", "did you mean 'gaussian_diag'?")),
                          (("explain", "ivn"), ("ivn: file not found", "did you mean 'ivon'?")),
                          (("compare", "ogn", "vgn"), ("vgn: file not found", "did you mean 'vogn'?"))]:
        rc, out, err = _main(capsys, *args)
        assert rc == 2 and out == "" and len(err.splitlines()) == 1, (args, err)
        assert all(n in err for n in needles), (args, err)
    rc, out, err = _main(capsys, "qwertyuiop")
    assert rc == 2 and "qwertyuiop: file not found" in err and "blr-derive list" in err and "did you mean" not in err
    assert list(tmp_path.iterdir()) == []


def test_misspelt_commands_get_a_suggestion_through_the_command_line(tmp_path):
    """``blr-derive chek adam``: one located line naming the command it could have been, exit 2, nothing written
    (before: 'unrecognized arguments: adam', which sent the reader looking for a recipe named chek)."""
    line = one_error_line(run_cli("chek", "adam", cwd=tmp_path), "<command line>: ", "'chek' is not a command",
                          "did you mean 'check'?")
    assert "blr-derive list" in line
    assert list(tmp_path.iterdir()) == []
    for args, meant in [(("explian", "newton"), "explain"), (("lst", "adam"), "list"), (("catalgo", "--check"), "catalog"),
                        (("verfy", "adam", "--against", "x:Y"), "verify"), (("famlies",), "families"),
                        (("compair", "ogn", "vogn"), "compare"), (("sugest", "--loss", "x**2"), "suggest"),
                        (("checks", "adam", "-o", str(tmp_path / "out.txt")), "check")]:
        one_error_line(run_cli(*args, cwd=tmp_path), f"'{args[0]}' is not a command", f"did you mean '{meant}'?")
    assert list(tmp_path.iterdir()) == []


def test_a_word_near_a_command_that_names_a_file_or_recipe_is_not_refused(tmp_path, capsys, monkeypatch):
    """The suggestion is for words that are nothing else: a file of that name in the working directory is read as
    the file (its own error if it is not a recipe), a catalog name as the recipe (no catalog or family name is near
    a command today: the file case is the one that exercises the guard), and a word near no command keeps the
    recipe-name suggestion."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "chek").write_text("name: [\n", encoding="utf-8")
    rc, out, err = _main(capsys, "chek")
    assert rc == 2 and err.startswith("blr-derive: error: chek:") and "not a command" not in err, err
    rc, out, err = _main(capsys, "sam", "--target", "numpy")
    assert rc == 0 and "def step" in out and err == ""
    rc, out, err = _main(capsys, "adamm")
    assert rc == 2 and "did you mean 'adam'?" in err and "not a command" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chek"]
