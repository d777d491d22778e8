"""The contributor's loop and CI's sessions, with nox's uv backend (see CONTRIBUTING.md).

    nox -s tests -- tests/test_split.py    # the 2-minute loop: fast local build, one file
    nox -s lint rust                       # ruff, cargo fmt/clippy; the Rust core's tests
    nox -s suite                           # the release wheel users install, and the whole suite
    nox -s "compat(torch='2.12.1', python='3.11')"   # one row of the supported table
    nox -l                                 # every session

``./scripts/test.sh`` (what CI runs) runs every session. Venvs live outside the clone, in
``$KINETRACE_CACHE/nox`` (default ``~/.cache/kinetrace/nox``), and are reused by later runs and
other clones (a run beside another one takes a slot of its own, ``nox.N``: ``_claim_slot``);
uv installs from one cache (``$KINETRACE_CACHE/uv``) by hard links, so the ~3 GB
of NVIDIA libraries each torch version pulls is stored once however many venvs use it.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("KINETRACE_CACHE", "~/.cache/kinetrace")).expanduser()


#: nox's options that only print (the sessions, help, the version): they make no venv, so
#: they take no slot.
_PRINT_ONLY = {"-l", "--list", "--list-sessions", "--json", "-h", "--help", "--version", "--usage"}


def _claim_slot() -> int:
    """The slot of venvs this run uses (see ``claim_slot`` in scripts/env.sh): the one
    ``KINETRACE_SLOT`` names (``scripts/test.sh`` holds its lock), else the first whose lock
    this process can take, held until it exits. Its sessions' scripts inherit it. A run that
    only prints (``nox -l``) claims none: it reports slot 0's folder and creates nothing.

    Claimed when this file is imported, because nox fixes every venv's folder (its
    ``envdir``) from ``nox.options`` before the first session runs."""
    given = os.environ.get("KINETRACE_SLOT")
    if given is not None:
        return int(given)
    if _PRINT_ONLY & set(sys.argv[1:]):
        return 0
    import fcntl

    CACHE.mkdir(parents=True, exist_ok=True)
    for slot in range(8):
        lock = open(CACHE / f"slot-{slot}.lock", "w")  # held until this process exits
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        _HELD_LOCKS.append(lock)
        os.environ["KINETRACE_SLOT"] = str(slot)
        return slot
    raise RuntimeError(f"all 8 venv slots in {CACHE} are held by other runs")


_HELD_LOCKS: list[object] = []
SLOT = _claim_slot()

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv"
nox.options.envdir = str(CACHE / ("nox" if SLOT == 0 else f"nox.{SLOT}"))
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
#: What a bare ``nox`` runs: the quick checks of the inner loop.
nox.options.sessions = ["lint", "rust", "tests"]

os.environ.setdefault("UV_CACHE_DIR", str(CACHE / "uv"))
os.environ.setdefault("UV_LINK_MODE", "hardlink")
os.environ["UV_PYTHON_DOWNLOADS"] = "never"  # the machine's own interpreters only
# Bytecode is written, in a tree of its own under the cache (no __pycache__ in the clone, the
# venvs or the tests' folders). uv installs no .pyc, and where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine's image does) every fresh process compiles torch's
# source again: a process that imports torch and starts a profile took 17.7 s of CPU so and
# 6.7 s reading bytecode (import 7.5 -> 2.8 s, the profiler's first start 8.7 -> 2.5 s), and
# the suite, the slow set, compat and the gate start hundreds of them.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
os.environ.setdefault("PYTHONPYCACHEPREFIX", str(CACHE / "pycache"))


def _interpreters_first() -> None:
    """pyenv's shims answer ``python3.X`` for every installed version but fail for all but the
    selected one, and uv looks interpreters up on PATH: put each installed version's own bin
    folder first so uv finds every one of them."""
    root = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser()
    found = sorted(glob.glob(str(root / "versions" / "3.*" / "bin")))
    if found:
        os.environ["PATH"] = os.pathsep.join([*found, os.environ.get("PATH", "")])


_interpreters_first()

#: The interpreter of the main suite, and the torch of requirements-dev.txt.
MAIN_PYTHON = "3.11"

#: The rows of docs/supported.md CI tests besides the main suite (torch 2.15.0 on 3.11):
#: (torch, Python). torch 2.15 has no wheel for Python 3.10, so 3.10 is tested with 2.14.
COMPAT = [
    ("2.11.0", "3.11"),
    ("2.12.1", "3.11"),
    ("2.13.0", "3.11"),
    ("2.14.1", "3.11"),
    ("2.14.1", "3.10"),
    ("2.15.0", "3.13"),
]

DEV = ("-r", "requirements-dev.txt", "-r", "requirements-consumers-deps.txt")
BUILD = ("-r", "requirements-build.txt")


#: Debian packages the Catapult tests load traces with (tests/support/catapult.py):
#: headless Chromium and the Web Components v0 polyfill its trace viewer's Polymer code needs.
BROWSER_PACKAGES = ("chromium-headless-shell", "libjs-webcomponentsjs-custom-element-v0")
_POLYFILL = Path("/usr/lib/javascript/webcomponentsjs-custom-element-v0/CustomElements.js")

#: The Java runtime Spark's local mode runs on (tests/test_parquet_sql.py, pyspark).
JAVA_PACKAGES = ("openjdk-17-jre-headless",)

#: What counts instructions for the count gate (benches/counts.py) and its tests.
VALGRIND_PACKAGES = ("valgrind",)


#: What turns the tests' skips for a missing tool into failures (the suite, the slow tests).
REQUIRE_EVERYTHING = {"KINETRACE_REQUIRE_CATAPULT": "1", "KINETRACE_REQUIRE_CONSUMERS": "1"}


#: Test tools PyPI ships only as source: built into a wheel once, in ``$KINETRACE_CACHE/wheels``,
#: and installed from there (``--find-links``). Left to uv, pyspark's 450 MB source is fetched
#: and built again for every new venv wherever the index's answers carry no validators (uv
#: revalidates, hears "modified"): 37 s and a new 1.4 GB cache entry each time, which filled
#: this machine's disk after ~30 runs.
SOURCE_ONLY = ("pyspark",)


def _dev_specs() -> list[str]:
    """The lines of requirements-dev.txt without their comments."""
    return [line.split("#", 1)[0].strip() for line in (ROOT / "requirements-dev.txt").open()]


def _requirement(name: str) -> str:
    """The line of requirements-dev.txt that pins ``name`` exactly (without its comment):
    ``torch==`` is the one torch pin of the main suite."""
    for spec in _dev_specs():
        if spec.startswith(f"{name}=="):
            return spec
    raise RuntimeError(f"requirements-dev.txt pins no {name} (a line {name}==X.Y.Z)")


def _requirements(*names: str) -> list[str]:
    """The lines of requirements-dev.txt (without their comments) that name ``names``, in
    their order: a session that needs a few test tools installs them as the suite does."""
    specs = _dev_specs()
    found = [next((s for s in specs if re.match(rf"{n}\s*[=<>~!]", s)), "") for n in names]
    if not all(found):
        raise RuntimeError(f"requirements-dev.txt lacks one of {names}")
    return found


def _source_only_wheels(session: nox.Session) -> Path:
    """The folder holding a wheel for each :data:`SOURCE_ONLY` pin, built where missing (by
    pip, in nox's own environment: uv has no command that builds a requirement)."""
    wheels = CACHE / "wheels"
    for name in SOURCE_ONLY:
        version = _requirement(name).split("==", 1)[1]
        if any(wheels.glob(f"{name}-{version}-*.whl")):
            continue
        # Built aside and moved in whole: a run beside this one never sees half a wheel.
        building = CACHE / f"wheels.building.{os.getpid()}"
        shutil.rmtree(building, ignore_errors=True)
        session.log(f"building a wheel of {name}=={version} once, into {wheels}")
        session.run(
            sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir",
            "-w", str(building), f"{name}=={version}", external=True,
        )  # fmt: skip
        wheels.mkdir(parents=True, exist_ok=True)
        for built in building.glob("*.whl"):
            os.replace(built, wheels / built.name)
        shutil.rmtree(building, ignore_errors=True)
    return wheels


def _install_dev(session: nox.Session) -> None:
    """torch and the test tools; the trace consumers with --no-deps (their own pins would
    move torch). Never system packages: the browser is the ``suite`` session's alone."""
    session.install("--find-links", str(_source_only_wheels(session)), *DEV)
    session.install("--no-deps", "-r", "requirements-consumers.txt")


def _has_browser() -> bool:
    return bool(shutil.which("chromium-headless-shell")) and _POLYFILL.is_file()


def _missing_packages() -> tuple[str, ...]:
    """The Debian packages of the suite's outside tools that are not installed."""
    missing = () if _has_browser() else BROWSER_PACKAGES
    missing += () if shutil.which("valgrind") else VALGRIND_PACKAGES
    return missing + (() if shutil.which("java") else JAVA_PACKAGES)


def _say_browser(session: nox.Session) -> None:
    """Where the Catapult tests will skip, says why and what would install the browser (the
    contributor's loop installs nothing system-wide)."""
    if missing := _missing_packages():
        session.log(
            "no browser for the Catapult tests or no Java for Spark's: they skip. To run "
            f"them: apt-get install {' '.join(missing)} (Debian/Ubuntu, as root)"
        )


def _ensure_browser(session: nox.Session) -> None:
    """CI's suite (run as root): installs :data:`BROWSER_PACKAGES`, :data:`JAVA_PACKAGES` and
    :data:`VALGRIND_PACKAGES` when missing (:func:`_ensure_packages`); elsewhere the Catapult
    and Spark tests fail the suite (``KINETRACE_REQUIRE_CATAPULT``,
    ``KINETRACE_REQUIRE_CONSUMERS``), naming what to install."""
    _ensure_packages(session, _missing_packages())


def _ensure_valgrind(session: nox.Session) -> None:
    """The count gate's Valgrind, installed as root when missing (:func:`_ensure_packages`)."""
    _ensure_packages(session, () if shutil.which("valgrind") else VALGRIND_PACKAGES)


def _ensure_packages(session: nox.Session, missing: tuple[str, ...]) -> None:
    """Installs the Debian packages ``missing`` as root, waiting for another package
    manager's dpkg lock rather than failing on it; elsewhere only says what is missing."""
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        session.log(f"not installed: {' '.join(missing)} (apt-get install them as root)")
        return
    # One apt-get at a time among the lanes, another program's lock waited out.
    apt_get = ("bash", str(ROOT / "scripts" / "apt-get.sh"))
    session.run(*apt_get, "update", "-qq", external=True)
    session.run(
        *apt_get,
        "install",
        "-y",
        "-qq",
        *missing,
        external=True,
        env={"DEBIAN_FRONTEND": "noninteractive"},
    )


@nox.session(python=False, default=False)
def packages(session: nox.Session) -> None:
    """The Debian packages the suite's outside tools need (the browser, Java), installed as
    root when missing: ``scripts/prefetch.sh`` runs it early in CI, beside the builds."""
    _ensure_browser(session)


def _tree_stamp() -> str:
    """What identifies this work tree's state (``scripts/tree-stamp.sh``)."""
    import subprocess

    return subprocess.run(
        [str(ROOT / "scripts" / "tree-stamp.sh")], check=True, capture_output=True, text=True
    ).stdout


def _suite_wheel() -> Path | None:
    """The x86_64/aarch64 manylinux_2_28 wheel ``scripts/build-wheels.sh`` built in dist/ for
    this machine from this very tree (its ``.source`` stamp), or None: a wheel of another
    commit or of other uncommitted changes is never tested as this one."""
    machine = os.uname().machine
    wheels = sorted(ROOT.glob(f"dist/kinetrace-*-manylinux_2_28_{machine}.whl"))
    if len(wheels) != 1:
        return None
    stamp = wheels[0].with_name(wheels[0].name + ".source")
    if not stamp.is_file() or stamp.read_text() != _tree_stamp():
        return None
    return wheels[0]


def _install_suite_wheel(session: nox.Session) -> None:
    """The release wheel of this tree (``nox -s wheel`` builds it once; every session that
    tests the wheel reuses it)."""
    wheel = _suite_wheel()
    if wheel is None:
        session.error(
            f"no manylinux_2_28_{os.uname().machine} wheel of this tree in dist/: run "
            "nox -s wheel first (scripts/test.sh does)"
        )
    session.install("--reinstall", "--no-deps", str(wheel))


def _pytest(session: nox.Session, *args: str, **kwargs: object) -> None:
    """pytest, where collecting no test at all (exit status 5) is a failure too."""
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, **kwargs)


# --------------------------------------------------------------------------------------
# the inner loop
# --------------------------------------------------------------------------------------


@nox.session(python=MAIN_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (lint and format) over python/tests/benches, cargo fmt and clippy."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", "python", "tests", "benches", "noxfile.py")
    session.run("ruff", "format", "--check", "python", "tests", "benches", "noxfile.py")
    session.run("cargo", "fmt", "--all", "--", "--check", external=True)
    session.run(
        "cargo",
        "clippy",
        "--all-targets",
        "--all-features",
        "--quiet",
        "--",
        "-D",
        "warnings",
        external=True,
    )


@nox.session(python=False)
def rust(session: nox.Session) -> None:
    """The Rust core's tests, without Python: ``cargo test`` in the fast profile (optimised,
    no whole-program LTO: no test needs LTO, and the release profile's single codegen unit
    costs minutes of build), or with the arguments given (``-- --release``)."""
    args = session.posargs or ["--profile", "fast"]
    session.run("cargo", "test", "--quiet", *args, external=True)


@nox.session(python=MAIN_PYTHON, venv_params=["--seed"])  # maturin develop installs with pip
def tests(session: nox.Session) -> None:
    """The suite against a fast local build (``maturin develop --profile fast``: optimised,
    no whole-program LTO, incremental), with the type checks: the contributor's loop. Give
    test files or pytest options after ``--``; without them, the whole suite."""
    _install_dev(session)
    _say_browser(session)
    session.run("maturin", "develop", "--quiet", "--profile", "fast")
    session.run("python", "-m", "mypy")
    session.run("python", "-m", "mypy.stubtest", "kinetrace._kinetrace")
    _pytest(session, *session.posargs)


# --------------------------------------------------------------------------------------
# what users install
# --------------------------------------------------------------------------------------


@nox.session(python=MAIN_PYTHON)
def wheel(session: nox.Session) -> None:
    """The release wheel for this machine (abi3, manylinux_2_28, checked), into dist/, once per
    state of the tree: a wheel this tree built already is kept (``scripts/tree-stamp.sh``).
    The sessions below test that wheel: ``nox -s wheel suite``."""
    session.install(*BUILD)
    session.run("scripts/build-wheels.sh", os.uname().machine, external=True)


@nox.session(python=MAIN_PYTHON)
def suite(session: nox.Session) -> None:
    """CI's main suite: the release wheel installed, mypy (strict), the stub check, every test
    but the slow ones (pytest arguments after ``--``). The Catapult and consumer tests fail
    instead of skipping when the browser, Java, HTA or TensorBoard's plugin is missing."""
    _install_dev(session)
    _ensure_browser(session)
    _install_suite_wheel(session)
    session.run("python", "-m", "mypy")
    session.run("python", "-m", "mypy.stubtest", "kinetrace._kinetrace")
    _pytest(
        session,
        "-m",
        "not slow",
        "--durations=25",
        # The hooks session runs these against a test-hooks build (the count gate's, the
        # counts program built with count-hooks); the release wheel has none.
        "--ignore=tests/test_panics.py",
        "--ignore=tests/test_bench_gate.py",
        "--ignore=tests/test_count_gate.py",
        *session.posargs,
        env=REQUIRE_EVERYTHING,
    )


@nox.session(python=MAIN_PYTHON)
def hooks(session: nox.Session) -> None:
    """The tests that need a build with hooks (never a release wheel): the extension built
    with the cargo feature ``test-hooks``, unpacked and put first on the path for
    tests/test_panics.py (panics become errors) and tests/test_bench_gate.py (a kinetrace
    slowed on purpose turns the benchmark gate red). ``KINETRACE_REQUIRE_TEST_HOOKS`` makes
    a build without the hooks fail those files instead of skipping them. (The count gate's
    hooks are the counts program's: ``count_hooks``.) ``-- --build-only`` builds the
    extension and stops (CI builds it in the background lane, beside the suite; the tests'
    build then finds it built: cargo's freshness, one venv)."""
    build_only = session.posargs == ["--build-only"]
    _install_dev(session)
    if not build_only:  # benches/gate.py's peers: the same torch, the wheel's code
        _install_suite_wheel(session)
    hooks = Path(session.create_tmp()) / "test-hooks"
    shutil.rmtree(hooks, ignore_errors=True)
    session.run(
        "maturin",
        "build",
        "--quiet",
        "--profile",
        "fast",
        "--features",
        "test-hooks",
        "--out",
        str(hooks / "wheel"),
    )
    if build_only:
        return
    (built,) = (hooks / "wheel").glob("kinetrace-*.whl")
    session.run("python", "-m", "zipfile", "-e", str(built), str(hooks / "site"))
    _pytest(
        session,
        "tests/test_panics.py",
        "tests/test_bench_gate.py",
        *session.posargs,
        env={"PYTHONPATH": str(hooks / "site"), "KINETRACE_REQUIRE_TEST_HOOKS": "1"},
    )


@nox.session(python=MAIN_PYTHON)
def count_hooks(session: nox.Session) -> None:
    """tests/test_count_gate.py: the counts program built with the cargo feature
    ``count-hooks`` (never a wheel) turns the count gate red on a few percent more work in a
    hot path, and an unchanged build stays green. In CI's background lane after ``counts``,
    whose program shares its fast-profile build (no extension is built here, no torch).
    ``KINETRACE_REQUIRE_TEST_HOOKS`` makes a missing Valgrind fail the file, not skip it."""
    _ensure_valgrind(session)
    session.install(*_requirements("pytest", "pytest-timeout", "hypothesis"))
    _install_suite_wheel(session)  # tests/support reads kinetrace's time base; no torch
    _pytest(
        session,
        "tests/test_count_gate.py",
        *session.posargs,
        env={"KINETRACE_REQUIRE_TEST_HOOKS": "1"},
    )


@nox.session(python=MAIN_PYTHON)
def counts(session: nox.Session) -> None:
    """The instruction-count gate (``benches/counts.py``): the native work of every tool and
    ``import kinetrace`` (the release wheel) counted under Valgrind, red on a count more than
    1% above the committed baseline. Arguments after ``--`` go to the gate: ``-- --update``
    writes the baseline (``scripts/counts.sh --update`` is the same)."""
    _ensure_valgrind(session)
    _install_suite_wheel(session)
    session.run("python", "benches/counts.py", *session.posargs)


@nox.session(python=MAIN_PYTHON)
def slow(session: nox.Session) -> None:
    """The slow set (``@pytest.mark.slow``: the tools on a >1 GB trace and their memory in a
    fresh process, workers' memory at 510k activities) against the release wheel; about 8
    minutes on 2 busy cores. A test that cannot run here fails or says why it skipped."""
    _install_dev(session)
    _install_suite_wheel(session)
    _pytest(
        session,
        "-m",
        "slow",
        "--run-slow",
        "--timeout=2400",  # one test on a 1 GB trace takes minutes on 2 busy cores
        "--durations=10",
        "tests",
        *session.posargs,
        env=REQUIRE_EVERYTHING,
    )


@nox.session(python=MAIN_PYTHON)
def install(session: nox.Session) -> None:
    """Both manylinux wheels and the sdist, built and checked (a wheel this tree built already
    is kept), then installed as users do: a clean venv without Rust (x86_64) and qemu-user in
    an arm64 root filesystem (aarch64)."""
    session.install(*BUILD)
    session.run("scripts/test-install.sh", external=True)


@nox.session(python=MAIN_PYTHON)
def workflows(session: nox.Session) -> None:
    """.github/workflows, and the workflow docs/ci.md shows (written out by
    scripts/doc-files.py), against GitHub's schema and zizmor's audits, offline."""
    session.install("check-jsonschema==0.39.0", "zizmor==1.32.0")
    shown = Path(session.create_tmp()) / "docs-ci"
    shutil.rmtree(shown, ignore_errors=True)
    session.run("python", "scripts/doc-files.py", "docs/ci.md", str(shown), silent=True)
    documented = sorted(glob.glob(str(shown / ".github" / "workflows" / "*.yml")))
    if not documented:
        session.error("docs/ci.md shows no workflow (a ```yaml block starting '# file: ')")
    workflows = sorted(glob.glob(str(ROOT / ".github" / "workflows" / "*.yml")))
    session.run(
        "check-jsonschema",
        "--builtin-schema",
        "vendor.github-workflows",
        *workflows,
        *documented,
    )
    session.run(
        "zizmor",
        "--offline",
        "--min-severity",
        "medium",
        "--no-progress",
        ".github/workflows/",
        *documented,
    )


@nox.session
@nox.parametrize(("torch", "python"), COMPAT)
def compat(session: nox.Session, torch: str) -> None:
    """One row of the supported table: the release wheel on that torch and Python, every
    entry point (tests/compat). Its timings against torch's own export are a benchmark, not a
    check: ``python benches/compat_timing.py`` in such a venv (docs/supported.md)."""
    session.install(f"torch=={torch}", "-r", "requirements-compat.txt")
    _install_suite_wheel(session)
    _pytest(session, "tests/compat", *session.posargs)


# --------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------


@nox.session(python=MAIN_PYTHON)
def bench(session: nox.Session) -> None:
    """The benchmark gate (``benches/gate.py``): kinetrace against stock torch, torch's Python
    exporter and HTA in the same run, failing when a ratio falls below its floor; then the
    short training benchmark's table."""
    _install_dev(session)
    _install_suite_wheel(session)
    session.run("python", "benches/gate.py", *session.posargs)
    session.run("python", "benches/bench_training.py", "--quick")


@nox.session(python=MAIN_PYTHON, requires=["wheel"], default=False)
def demo(session: nox.Session) -> None:
    """The main job: a built-in workload profiled, exported by kinetrace and by torch's two
    exporters, and the comparison printed (arguments after ``--`` go to ``kinetrace demo``).
    It needs what it shows and nothing more: torch and the release wheel of this tree (the
    ``wheel`` session builds it unless dist/ has it already), and numpy, whose absence torch
    warns about on import."""
    session.install(_requirement("torch"), "numpy")
    _install_suite_wheel(session)
    session.run("python", "-m", "kinetrace", "demo", *session.posargs)
