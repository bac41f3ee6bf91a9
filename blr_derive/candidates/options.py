"""The command line's inputs (``blr-derive NAME_OR_FILE ...``): catalog recipe names and built-in family names
wherever a path goes, and the design card's command ``blr-derive FAMILY.yaml --loss ... --approx ...``, whose
options are written as a recipe one option per line, so that every error names the option it comes from."""
from __future__ import annotations

import os
import re
import shlex
from contextlib import contextmanager
from pathlib import Path

import yaml

from blr_derive.candidates.load import recipe_from_spec
from blr_derive.core.errors import SpecError
from blr_derive.core.text import did_you_mean
from blr_derive.core.io import command_label
from blr_derive.core.resources import catalog_dir, families_dir
from blr_derive.core.yamlio import load_yaml_file, load_yaml_text
from blr_derive.families.library import load_family
from blr_derive.spec.vocabulary import FAMILY_KEYS


#: the recipe keys the command line sets with its own options (``--set`` takes the others)
_OPTION_KEYS = {"name": "--name", "family": "the family file", "loss": "--loss", "approximations": "--approx",
                "hyperparameters": "--hyper"}


def is_family_spec(spec) -> bool:
    """Whether a parsed YAML file declares a family (not a recipe): a mapping that names no ``family`` and no
    ``blocks`` and has a family's keys."""
    return (isinstance(spec, dict) and "family" not in spec and "blocks" not in spec
            and bool(set(spec) & (FAMILY_KEYS - {"name", "description", "sizes"})))


def resolve_input(ref: str) -> tuple[Path, str]:
    """(path, kind) of what the command line names: an existing file (``kind`` "family" or "recipe" by its
    keys), else a catalog recipe name (``adam``) or a built-in family name (``gaussian_diag``).  A name that is
    neither is the usual ``file not found``, with the names it could have been."""
    path = Path(ref)
    # anything at the path (a directory, a FIFO, a device, a dangling link) is read as the file it claims to be,
    # and refused as what it is, not looked up as a catalog name and reported missing
    if os.path.lexists(path) or ref.endswith((".yaml", ".yml")) or "/" in ref or not ref.isidentifier():
        spec = load_yaml_file(path, "recipe or family file")
        return path, ("family" if is_family_spec(spec) else "recipe")
    for folder, kind in ((catalog_dir(), "recipe"), (families_dir(), "family")):
        if os.path.isfile(folder / f"{ref}.yaml"):       # False (not OSError) for a name too long to be a file
            return folder / f"{ref}.yaml", kind
    known = [p.stem for folder in (catalog_dir(), families_dir()) for p in folder.glob("*.yaml")]
    raise SpecError("file not found, and not the name of a catalog recipe or built-in family (`blr-derive list` "
                    "lists them)" + did_you_mean(ref, known), ref, None)


def _one_line_yaml(value, option: str) -> str:
    """``value`` as one line of YAML flow text (what :func:`recipe_from_options` writes, one option per line)."""
    text = yaml.safe_dump([_builtin(value)], default_flow_style=True, width=1 << 30, allow_unicode=False).strip()
    if "\n" in text or not (text.startswith("[") and text.endswith("]")):
        raise SpecError(f"{option}: the value must be one line of text", COMMAND_LINE)
    return text[1:-1]


def _builtin(v):
    """A parsed (located) YAML value as plain Python data, for the YAML dumper."""
    if isinstance(v, dict):
        return {_builtin(k): _builtin(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_builtin(x) for x in v]
    for t in (bool, int, float, str):
        if isinstance(v, t):
            return t(v)
    return v


def _option_value(text: str, option: str):
    """The value of a ``NAME=VALUE`` option's VALUE or of ``--approx``: safe YAML (a number, a name, a list or a
    mapping in flow style), located at the command line."""
    try:
        return load_yaml_text(text, COMMAND_LINE)
    except SpecError as exc:
        raise SpecError(f"{option}: {exc.message}", COMMAND_LINE) from None


def _name_value(item: str, option: str) -> tuple[str, object]:
    name, eq, value = item.partition("=")
    name = name.strip()
    if not eq or not name.isidentifier():
        raise SpecError(f"{option} takes NAME=VALUE, got '{item}'", COMMAND_LINE)
    return name, _option_value(value, f"{option} {name}")


COMMAND_LINE = "<command line>"


def recipe_from_options(family_ref, *, loss=None, approximations=(), hyperparameters=(), settings=(),
                        name=None, data=()):
    """The recipe that ``blr-derive FAMILY.yaml --loss ... --approx ... [--hyper NAME=VALUE] [--set KEY=VALUE]``
    declares (the design card's command).  ``loss`` is ``abstract`` or an expression of the family's variable and
    the hyperparameters; each approximation is a rule name or one flow mapping (``"ema_momentum: {rate: beta1,
    state: u}"``); ``hyperparameters`` and ``settings`` (any other recipe key) are ``NAME=VALUE`` texts.  The
    recipe is written one option per line, so that every error names the option it comes from:
    ``<command line>: --approx ...: problem``."""
    if loss is None:
        raise SpecError("--loss is missing: 'abstract' (gradient and Hessian oracles) or an expression of the "
                        "family's variable", COMMAND_LINE)
    fam = load_family(str(family_ref))
    lines, origin = [], {}

    def put(text, option):
        lines.append(text)
        origin[len(lines)] = option
    put("family: __FAMILY__", "")                 # line 1: where the recipe as a whole is located
    put(f"name: {_one_line_yaml(name or fam.name, '--name')}", "--name")
    if loss.strip() == "abstract":
        if data:
            raise SpecError("--data declares the data of an explicit --loss expression, not of 'abstract'",
                            COMMAND_LINE)
        put("loss: abstract", f"--loss {shlex.quote(loss)}")
    else:
        put("loss: {", f"--loss {shlex.quote(loss)}")
        put(f"  expression: {_one_line_yaml(loss, '--loss')},", f"--loss {shlex.quote(loss)}")
        if data:
            put("  data: {", "--data")
            for item in data:
                key, value = _name_value(item if "=" in item else item + "={shape: []}", "--data")
                put(f"    {key}: {_one_line_yaml(value, '--data ' + key)},", f"--data {shlex.quote(item)}")
            put("  },", "--data")
        put("}", f"--loss {shlex.quote(loss)}")
    seen = {}
    for item in settings:
        key, value = _name_value(item, "--set")
        if key in _OPTION_KEYS:
            raise SpecError(f"--set {key}: set it with {_OPTION_KEYS[key]} instead", COMMAND_LINE)
        if key in seen:
            raise SpecError(f"--set {key} is given twice", COMMAND_LINE)
        seen[key] = True
        put(f"{key}: {_one_line_yaml(value, '--set ' + key)}", f"--set {shlex.quote(item)}")
    put("hyperparameters: {", "--hyper")
    declared = set()
    for item in hyperparameters:
        key, value = _name_value(item, "--hyper")
        if key in declared:
            raise SpecError(f"--hyper {key} is given twice", COMMAND_LINE)
        declared.add(key)
        put(f"  {key}: {_one_line_yaml(value, '--hyper ' + key)},", f"--hyper {shlex.quote(item)}")
    put("}", "--hyper")
    put("approximations: [", "--approx")
    for item in approximations:
        put(f"  {_one_line_yaml(_option_value(item, '--approx'), '--approx')},", f"--approx {shlex.quote(item)}")
    put("]", "--approx")
    with options_located(origin):
        spec = load_yaml_text("\n".join(lines) + "\n", COMMAND_LINE)
        # over a run-time axis (--set components=...) the family is read from its file (its size is the state's
        # length), so it stays a reference there; elsewhere the family loaded above
        spec["family"] = str(family_ref) if "components" in spec else fam
        r = recipe_from_spec(spec, COMMAND_LINE, Path.cwd())
    r.option_lines = origin                            # derivation and code generation errors name the option too
    return r


@contextmanager
def options_located(origin: dict):
    """Errors located in a recipe written by :func:`recipe_from_options` (``<command line>:LINE``) as errors of
    the option on that line; an unknown symbol gets the option that declares it."""
    try:
        yield
    except SpecError as exc:
        if not origin or exc.file != COMMAND_LINE or exc.line not in origin:
            raise
        message = exc.message
        symbol = re.search(r"unknown symbol '([A-Za-z_][A-Za-z_0-9]*)'", message)
        if symbol:
            message += f" (declare it: --hyper {symbol.group(1)}=VALUE)"
        where = origin[exc.line]
        raise SpecError(f"{where}: {message}" if where else message, COMMAND_LINE) from None


def options_label(family_path, loss, approximations, hyperparameters, settings, name, data=()) -> str:
    """The command that regenerates a module derived from a family file (the header of generated code): a
    built-in family by its name, a file by its path as the command line gave it (relative to the directory the
    command ran in, or absolute), so that the command regenerates the module from there."""
    words = [command_label(family_path)]
    words += [f"--name {shlex.quote(name)}"] if name else []
    words += [f"--loss {shlex.quote(loss)}"] + [f"--data {shlex.quote(d)}" for d in data]
    words += [f"--approx {shlex.quote(a)}" for a in approximations]
    words += [f"--hyper {shlex.quote(h)}" for h in hyperparameters] + [f"--set {shlex.quote(s)}" for s in settings]
    return " ".join(words)
