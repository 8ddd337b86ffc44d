"""--call-stack=python inside PyTorch operators. While an operator (or the
autograd engine's range for a node) runs, the frame that called it waits in
that call, and the frame reader (bindings/src/py_frames.cpp) answers every
allocation made while that frame is still the innermost with the stack it
read at the operator's first allocation, comparing one frame instead of the
chain. Python that runs inside the operator -- a custom Function's
backward, a tensor hook, one helper called after another at the same depth
(likely the same frame address), an operator called from there -- has its
own frames and must be named by them; what the engine allocates between
them is backward()'s; what follows backward() is the program's next line.
Both readers (the interpreter's frames, the default, and the profile
function's shadow stacks) give the same text, tensor for tensor."""
import textwrap

import pytest

from conftest import dump_files, process_dirs, pta_mallocs_of, read_dump, run_cli

torch = pytest.importorskip("torch")
PY = "/usr/bin/python3"
ROUNDS = 3
N = 1000  # elements of x
FN_SIZE, DEEP_SIZE, HOOK_A, HOOK_B, AFTER = 71111, 72222, 73333, 74444, 75555
DEEP_NUMEL = 1234  # a tensor made one frame deeper, inside the engine's range

PROGRAM = f"""
    import torch

    torch.set_num_threads(1)
    keep = []


    def deeper(g):
        keep.append(bytearray({DEEP_SIZE}))  # DEEP LINE
        keep.append(torch.zeros({DEEP_NUMEL}))  # DEEP TENSOR
        return g * 2  # DEEP MUL


    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            keep.append(bytearray({FN_SIZE}))  # FN LINE
            return deeper(g)  # FN CALL


    def hook_a(g):
        keep.append(bytearray({HOOK_A}))  # HOOK A


    def hook_b(g):
        keep.append(bytearray({HOOK_B}))  # HOOK B


    x = torch.ones({N}, requires_grad=True)
    for r in range({ROUNDS}):
        y = Twice.apply(x)
        y.register_hook(hook_a)
        z = y * 3
        z.register_hook(hook_b)
        z.sum().backward()  # BACKWARD LINE
        keep.append(bytearray({AFTER}))  # AFTER LINE
    print("grad", float(x.grad[0]))
"""


def line_of(marker):
    for i, line in enumerate(textwrap.dedent(PROGRAM).splitlines(), 1):
        if marker in line:
            return i
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for mode in ("frames", "shadow"):
        work = tmp_path_factory.mktemp(mode)
        (work / "prog.py").write_text(textwrap.dedent(PROGRAM))
        p = run_cli(["--device=cpu", "--call-stack=python", "--analysis=", "--output=out", "--", PY, "prog.py"],
                    work, env={"MSMEMSCOPE_PY_STACKS": mode}, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"grad {6.0 * ROUNDS}" in p.stdout, p.stdout
        (procdir,) = process_dirs(work / "out")
        prog = str(work / "prog.py")
        rows = read_dump(dump_files(procdir)[0])
        out[mode] = {"prog": prog, "rows": rows, "pta": pta_mallocs_of(procdir)}
    return out


def stack(r, prog):
    return r["Call Stack(Python)"].replace(prog, "PROG").splitlines()


def frame(marker, func):
    return f"PROG({line_of(marker)}): {func}"


@pytest.mark.parametrize("mode", ["frames", "shadow"])
def test_python_inside_an_operator_names_its_own_frames(runs, mode):
    run = runs[mode]
    prog = run["prog"]
    host = [r for r in run["rows"] if r["Event"] == "MALLOC" and r["Event Type"] == "HOST"]

    def host_stacks(size):
        return [stack(r, prog) for r in host if r["attr"].get("size") == str(size + 1)]

    backward = frame("BACKWARD LINE", "<module>")
    fn = [frame("FN LINE", "backward")]
    deep = [frame("DEEP LINE", "deeper"), frame("FN CALL", "backward")]
    for size, top in ((FN_SIZE, fn), (DEEP_SIZE, deep), (HOOK_A, [frame("HOOK A", "hook_a")]),
                      (HOOK_B, [frame("HOOK B", "hook_b")])):
        got = host_stacks(size)
        assert len(got) == ROUNDS, (size, got)
        for s in got:
            # the engine calls the Python from inside backward(): the program's line is the outermost
            assert s[:len(top)] == top and s[-1] == backward, (size, s)
    assert host_stacks(AFTER) == [[frame("AFTER LINE", "<module>")]] * ROUNDS


@pytest.mark.parametrize("mode", ["frames", "shadow"])
def test_what_the_engine_allocates_between_them_is_backwards(runs, mode):
    run = runs[mode]
    prog = run["prog"]
    backward = frame("BACKWARD LINE", "<module>")
    deep = [stack(r, run["prog"]) for r in run["pta"] if r["attr"].get("size") == str(DEEP_NUMEL * 4)]
    assert deep == [[frame("DEEP TENSOR", "deeper"), frame("FN CALL", "backward")] + deep[0][2:]] * ROUNDS, deep
    assert deep[0][-1] == backward, deep[0]
    # every block of x's size made inside backward(): by the engine (its stack ends in
    # torch's backward() over the program's line) or by the Python it called (the Function's mul)
    inside = [stack(r, prog) for r in run["pta"] if r["attr"].get("size") == str(N * 4) and
              stack(r, prog)[-1] == backward]
    engine = [s for s in inside if s[0].startswith("/") and "torch/autograd/__init__.py" in s[0]]
    assert engine and all(s == engine[0] for s in engine), inside
    assert any("torch/_tensor.py" in f for f in engine[0]), engine[0]
    mul = [s for s in inside if s[0] == frame("DEEP MUL", "deeper")]
    assert len(mul) == ROUNDS, inside
    assert len(engine) + len(mul) == len(inside), inside


def test_both_readers_give_the_same_stacks(runs):
    # the loop's tensors (the host heap's blocks differ: a profile function changes what the
    # interpreter allocates; and so do the imports before the loop)
    loop = {frame(m, "<module>") for m in ("BACKWARD LINE", "AFTER LINE")}
    loop |= {f"PROG({k}): <module>" for k in range(line_of("for r in range"), line_of("BACKWARD LINE"))}

    def key(run):
        return [(r["Event"], r["Event Type"], r["attr"].get("size"), stack(r, run["prog"]))
                for r in run["pta"] if stack(r, run["prog"]) and stack(r, run["prog"])[-1] in loop]
    a, b = key(runs["frames"]), key(runs["shadow"])
    assert len(a) > 5 * ROUNDS, a
    assert a == b
