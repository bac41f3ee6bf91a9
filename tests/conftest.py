import importlib.util
import os
import sys
from pathlib import Path

# Triton reads TRITON_INTERPRET when a kernel is decorated; torch.compile (the fused tests) imports triton too, so
# the variable is set here, before any test module runs: the Triton tests run the generated kernels on CPU
# tensors whichever test a worker happens to run first (nothing else in the suite launches a Triton kernel).
# Only under pytest: test_kernels_compile_for_a_gpu imports this module in a plain process that compiles for real
if "_pytest" in sys.modules:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# JAX's persistent compilation cache, for this test process and the commands it starts (the environment is
# inherited): a jitted function whose XLA program was compiled before (the same generated module, shapes and dtypes
# in another test, worker or run) is loaded instead of compiled again; the key is the program itself with jax's
# version and compile options, so a changed module is compiled afresh.  Every compilation is kept (the default
# threshold keeps only those over 1 s; the tests' take 0.05-0.5 s each).  A JAX_COMPILATION_CACHE_DIR already set
# is used as it is.  tests/peers/optax/test_optax_peers.py: 89.6 s of CPU without the cache (or with an empty
# one), 28.7 s with the cache its previous run left.
if "_pytest" in sys.modules and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _jax_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "blr-derive-tests" / "jax"
    try:
        _jax_cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        pass
    else:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = str(_jax_cache)
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# Python's bytecode cache, for this test process and the commands it starts, kept outside every tree
# (PYTHONPYCACHEPREFIX: ~/.cache/blr-derive-tests/pycache, mirroring the source paths; nothing is written next to a
# source, in the checkout or in a test's temporary folder).  Where the environment says PYTHONDONTWRITEBYTECODE,
# every process compiled the ~200 modules of the package from source at start-up: ~0.3 s of CPU per command-line
# process on a loaded 2-core machine (`blr-derive catalog/adam.yaml --target numpy`: 1.2-1.6 s user without,
# 1.1-1.2 s with), and pytest rewrote and compiled every test module in every worker.  A .pyc is used only while
# its source's modification time and size match, so an edited file is compiled afresh.  A PYTHONPYCACHEPREFIX
# already set is used as it is.
_pycache = None
if "_pytest" in sys.modules and "PYTHONPYCACHEPREFIX" not in os.environ:
    _pycache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "blr-derive-tests" / "pycache"
    try:
        _pycache.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        _pycache = None
    else:
        os.environ["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix = str(_pycache)
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        sys.dont_write_bytecode = False
# Under pytest-xdist every core already runs a worker: one BLAS/OpenMP thread per worker instead of one per core
# each (oversubscribed threads made small dense solves ~300x slower: scipy's solve_triangular on 3x3 matrices took
# 1 ms per call).  OMP_NUM_THREADS is read by torch when it is imported; OpenBLAS is limited through threadpoolctl
# because numpy may be imported already.
if "_pytest" in sys.modules and os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import threadpoolctl
    threadpoolctl.threadpool_limits(1)

import pytest

from blr_derive.codegen import TARGET_NAMES

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "catalog"
GENERATED = CATALOG / "generated"


def target_config(name):
    """A target's declared configuration (``codegen/backends/<name>/config.py``), without loading its renderer."""
    return importlib.import_module(f"blr_derive.codegen.backends.{name}.config").CONFIG


#: the targets whose module is a ``torch.optim.Optimizer`` subclass: those whose configuration lets the module
#: import torch (a test of an optimizer's constructor, closure or parameter attributes runs over these)
OPTIMIZER_TARGETS = tuple(n for n in TARGET_NAMES if "torch" in target_config(n).modules)
#: the targets that render every IR kind (their configuration lists the ``product`` structure): plain ``init``/
#: ``step`` functions and family maps called with numpy arrays, for any recipe
FUNCTION_TARGETS = tuple(n for n in TARGET_NAMES if "product" in target_config(n).structures)


def load_module_from_path(path, name=None):
    name = name or f"_blr_gen_{Path(path).stem}_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_generated(recipe, target="numpy"):
    return load_module_from_path(GENERATED / target / f"{recipe}.py")


@pytest.fixture
def generated():
    return load_generated


@pytest.fixture
def x64():
    """jax in float64 for the test (its default is float32, the numpy modules' is float64), restored afterwards."""
    import jax
    old = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", old)


# ------------------------------------------------------------------------------------------------ the fast tier
#: tests measured over this many seconds (setup, call and teardown, on 2 cores under pytest -n 2) are in the slow
#: tier as well as those marked ``@pytest.mark.slow`` in their module; ``pytest -m "not slow"`` is the fast tier
FAST_TIER_SECONDS = 0.12
#: per-test durations of a full run (``tests/durations.json``: the tests over FAST_TIER_SECONDS only), regenerated
#: with ``python tests/measure_durations.py`` after a full run with ``--junitxml``; a test not listed (a new one)
#: counts as fast until the next measure, so a test of more than ~3 s is still marked slow where it is written
_DURATIONS = Path(__file__).with_name("durations.json")


def pytest_configure(config):
    """``pytest -n N`` schedules with ``--dist loadgroup`` (pytest-xdist's default is ``load``, which it sets
    when -n is given): the ``xdist_group`` marks of :func:`pytest_collection_modifyitems` then keep a slow module
    fixture's tests on one worker.  Tests without the mark are handed out one by one as under ``load``."""
    if getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"
        # hand the work out in the order of pytest_collection_modifyitems (longest modules first), not xdist's
        # default for scopes (the groups with the most tests first, whatever their time)
        config.option.loadscopereorder = False
    # a worker parses the command line again (``-n 2`` alone gives it dist "no", so xdist's own loadgroup flag is
    # off there and it would not append the group to the tests' ids: the controller's LoadGroupScheduling would then
    # see no group and hand a group's tests to both workers); the controller tells it its mode (below)
    if getattr(config, "workerinput", {}).get("blr_dist") == "loadgroup":
        config.option.loadgroup = True
    # the .pyc files of modules imported from temporary folders (generated modules in tmp_path, the docs pages'
    # folders) would pile up in the bytecode cache run after run: the main process removes them before the run
    if _pycache is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        import shutil
        import tempfile
        tmp = Path(tempfile.gettempdir()).resolve()
        shutil.rmtree(_pycache / tmp.relative_to(tmp.anchor), ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's controller, for each worker it starts: the worker learns the distribution mode (see
    :func:`pytest_configure`)."""
    node.workerinput["blr_dist"] = node.config.getoption("dist", "no")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Marks slow the tests measured over FAST_TIER_SECONDS, then every test that shares a module-scoped fixture
    of its own module with a slow test: the fixture's cost is measured on the first test that set it up, so the
    others, fast alone, would set it up again in the fast tier.  Groups such tests on one xdist worker and puts
    the longest modules first (below)."""
    import json
    measured = json.loads(_DURATIONS.read_text(encoding="utf-8"))
    slow = [item for item in items if measured.get(item.nodeid, 0.0) > FAST_TIER_SECONDS
            or item.get_closest_marker("slow") is not None]

    def shared(item):
        info = getattr(item, "_fixtureinfo", None)
        for name in item.fixturenames:
            for fixdef in (info.name2fixturedefs.get(name, ()) if info is not None else ()):
                if fixdef.scope != "function" and fixdef.baseid == item.nodeid.split("::")[0]:
                    yield fixdef.baseid, name

    heavy = {key for item in slow for key in shared(item)}
    for item in items:
        if item in slow or any(key in heavy for key in shared(item)):
            item.add_marker(pytest.mark.slow)
        # under pytest-xdist (``--dist loadgroup``, :func:`pytest_configure`) the tests of a module-scoped fixture
        # measured slow go to one worker, which sets the fixture up once (another worker would pay it again)
        group = next((base for base, name in shared(item) if (base, name) in heavy), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if getattr(config.option, "loadgroup", False):
                _append_group(item, group)
    # the longest modules first (by their measured total; a module's tests keep their order, so its module
    # fixtures are still set up once per worker): pytest-xdist hands tests out in this order, so the last ones a
    # worker gets are short and both workers finish together, instead of one running a long test alone at the end
    total = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        total[module] = total.get(module, 0.0) + measured.get(item.nodeid, 0.0)
    items.sort(key=lambda item: -total[item.nodeid.split("::")[0]])


def _append_group(item, group):
    """The worker's id of a grouped test, ``NODEID@GROUP``, which xdist's LoadGroupScheduling reads the group from.
    pytest-xdist 3.8 appends it by assigning ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is its
    ``_id``, a NodeId): the groups were silently lost and a slow module fixture was set up on both workers
    (test_check's shipped families: two 90 s runs of ``blr-derive check``).  Here the id itself is set; on a pytest
    whose nodes still read ``_nodeid`` xdist's own hook appends the group, after this one."""
    if not hasattr(item, "_id"):
        return
    from _pytest.nodeid import NodeId
    item._id = NodeId.parse(f"{item.nodeid}@{group}")


# ------------------------------------------------------------------------------- the command line in this process
def run_cli_in_process(*args, cwd):
    """``blr-derive ARGS`` run by :func:`blr_derive.cli.main` in this process, in the working directory ``cwd``,
    as a ``subprocess.CompletedProcess`` (returncode, stdout, stderr) like ``subprocess.run(..., text=True)`` gives
    (universal newlines: ``\\r\\n`` and ``\\r`` read as ``\\n``).  ``main`` turns every failure into its exit status
    and one line on stderr itself (an exception that escaped it fails the test), so a test of what a command prints,
    writes and exits with needs no new interpreter, which costs ~2 s of imports each (sympy, scipy, the rules).
    What only a real process shows stays tested through one: the console entry's memory limit and terminal
    encoding, a traceback printed by the interpreter, the tool found from any working directory by a fresh import,
    time bounds of a whole process."""
    import contextlib
    import io
    import subprocess
    from blr_derive import cli
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(str(cwd))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main([str(a) for a in args])
    finally:
        os.chdir(old)

    def text(s):
        return s.getvalue().replace("\r\n", "\n").replace("\r", "\n")
    return subprocess.CompletedProcess(["blr-derive", *map(str, args)], rc, text(out), text(err))
