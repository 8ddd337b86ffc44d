"""`pip install .` from a checkout (pyproject.toml names setuptools as the
build backend; Debian: python3-setuptools, python3-wheel, python3-pip).

The package is built with the project's own CMake build, then laid out as
    site-packages/msmemscope/            the Python package (+ _msmemscope*.so)
    site-packages/msmemscope/_prefix/    bin/msmemscope, lib/msmemscope/ (agent, plugins)
    site-packages/mstx/                  the mstx marker module
    <env>/bin/msmemscope                 the command (bindings/pip/msmemscope: a Python
                                         script the shell can source for --load-api-env)
so that the environment is self-contained and relocatable.

The package also carries the plugin SDK (#29 item 8), so that a plugin team
can build against a pip install:
    site-packages/msmemscope/_prefix/include/msmemscope/    the SDK headers
    site-packages/msmemscope/_prefix/lib/cmake/msmemscope/  the CMake package
    site-packages/msmemscope/_prefix/share/msmemscope/      the SDK examples
    <env>/bin/msmemscope-conformance                        the conformance tool
                                                            (bindings/pip/msmemscope-conformance;
                                                            --cmake-prefix-path prints the prefix
                                                            for CMAKE_PREFIX_PATH)

MSMEMSCOPE_BUILD_DIR=<cmake build tree> takes the binaries of an existing
build of this checkout (built for this interpreter) instead of building anew;
otherwise a build tree is configured for the interpreter running pip in a
temporary folder (ccache is used when it is installed). Nothing is written
into the source tree: the CMake build tree, setuptools' build folder and its
egg-info all live in one temporary folder, removed when setup.py ends; a
given build tree is left as it was (CMake's install step rewrites its
install_manifest.txt, which gets its old bytes and times back).
"""
import os
import re
import shutil
import subprocess
import sys
import atexit
import sysconfig
import tempfile

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
# Everything setup.py or setuptools writes while building (never inside the
# checkout: a read-only or shared source tree stays as it was). Each of pip's
# calls into setup.py (metadata, wheel) gets its own, removed at exit.
SCRATCH = tempfile.mkdtemp(prefix="msmemscope_pip_")
atexit.register(shutil.rmtree, SCRATCH, True)


def _version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(msmemscope VERSION ([0-9.]+)", f.read()).group(1)


def _run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    subprocess.check_call(cmd, cwd=ROOT)


class _Binary(Distribution):
    """The wheel holds native code: tag it for this interpreter and platform."""

    def has_ext_modules(self):
        return True


def _install_leaving_tree_as_it_was(tree, stage):
    """`cmake --install` into stage. CMake also (re)writes the tree's
    install_manifest.txt; a tree given by MSMEMSCOPE_BUILD_DIR (the
    checkout's build/, often) gets its own back, or none as before."""
    manifest = os.path.join(tree, "install_manifest.txt")
    try:
        with open(manifest, "rb") as f:
            before = f.read()
        times = os.stat(manifest)
    except FileNotFoundError:
        before = None
    try:
        _run(["cmake", "--install", tree, "--prefix", stage])
    finally:
        if before is None:
            try:
                os.unlink(manifest)
            except FileNotFoundError:
                pass
        else:
            with open(manifest, "wb") as f:
                f.write(before)
            os.utime(manifest, ns=(times.st_atime_ns, times.st_mtime_ns))


class BuildWithCMake(build_py):
    def _build_tree(self):
        given = os.environ.get("MSMEMSCOPE_BUILD_DIR")
        if given:
            given = os.path.abspath(given)
            if not os.path.exists(os.path.join(given, "CMakeCache.txt")):
                sys.exit(f"msmemscope: MSMEMSCOPE_BUILD_DIR={given} is not a CMake build tree of this project")
            return given
        tree = os.path.join(SCRATCH, "cmake")
        cfg = ["cmake", "-S", ROOT, "-B", tree, f"-DPython3_EXECUTABLE={sys.executable}",
               "-DMSMEMSCOPE_BUILD_TESTS=OFF", "-DMSMEMSCOPE_BUILD_BENCH=OFF"]
        if shutil.which("ccache"):
            cfg += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        _run(cfg)
        _run(["cmake", "--build", tree, "-j", os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))])
        return tree

    def run(self):
        tree = self._build_tree()
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        ext = os.path.join(tree, "python", "msmemscope", "_msmemscope" + suffix)
        if not os.path.exists(ext):
            sys.exit(f"msmemscope: {ext} is missing: the build tree {tree} was not built for this Python "
                     f"({sys.executable}); configure it with -DPython3_EXECUTABLE={sys.executable}")
        stage = tempfile.mkdtemp(prefix="msmemscope_stage_")
        try:
            _install_leaving_tree_as_it_was(tree, stage)
            out = os.path.abspath(self.build_lib)
            pkg = os.path.join(out, "msmemscope")
            for name in ("msmemscope", "mstx"):
                shutil.rmtree(os.path.join(out, name), ignore_errors=True)
                src = os.path.join(stage, "python", name)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(out, name), symlinks=False)
            prefix = os.path.join(pkg, "_prefix")
            shutil.copytree(os.path.join(stage, "bin"), os.path.join(prefix, "bin"))
            shutil.copytree(os.path.join(stage, "lib", "msmemscope"), os.path.join(prefix, "lib", "msmemscope"))
            # The SDK: headers, the CMake package (relocatable: found from its
            # own folder), the examples and the SDK guide.
            for rel in (("include", "msmemscope"), ("lib", "cmake", "msmemscope"), ("share", "msmemscope"),
                        ("share", "doc", "msmemscope")):
                src = os.path.join(stage, *rel)
                if os.path.isdir(src):
                    shutil.copytree(src, os.path.join(prefix, *rel))
                elif rel[0] != "share":
                    sys.exit(f"msmemscope: the CMake install has no {'/'.join(rel)} (the SDK is incomplete)")
            # The prefix lives inside the package: found from the package's own
            # (real) folder. The same _paths.py as CMake's, configured here.
            with open(os.path.join(ROOT, "bindings", "msmemscope", "_paths.py.in")) as f:
                text = f.read()
            text = text.replace("@MSMEMSCOPE_PREFIX_FROM_PACKAGE@", "_prefix").replace("@PROJECT_VERSION@", _version())
            with open(os.path.join(pkg, "_paths.py"), "w") as f:
                f.write(text)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


setup(
    version=_version(),
    # Declared so that setuptools runs build_py (which the CMake build
    # replaces); the files come from the CMake install, not from these folders.
    packages=["msmemscope", "mstx"],
    package_dir={"msmemscope": "bindings/msmemscope", "mstx": "bindings/mstx/mstx"},
    py_modules=[],
    # Not a console entry point: `source msmemscope --load-api-env` needs a file
    # the shell can read (bindings/pip/msmemscope, shell and Python at once).
    # msmemscope-conformance: a Python script that execs the package's
    # _prefix/bin/msmemscope-conformance (a binary is not a valid pip script).
    scripts=["bindings/pip/msmemscope", "bindings/pip/msmemscope-conformance"],
    distclass=_Binary,
    cmdclass={"build_py": BuildWithCMake},
    options={"build": {"build_base": os.path.join(SCRATCH, "setuptools")},
             "egg_info": {"egg_base": SCRATCH}},
    zip_safe=False,
)
