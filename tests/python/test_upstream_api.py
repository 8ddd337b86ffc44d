"""Upstream msMemScope's current Python API (issue #15.2, COMPAT §8): the
`msmemscope.analyzer` module (its Config classes' checks and messages, the
offline analyses' printed output and write-back), TakeSnapshot,
init_framework_hooks / cleanup_framework_hooks, enable_npu_sanitizer, the
describer's positional owner and watcher.remove(addr, length=...).

Messages are upstream's word for word where upstream has a text
(python/msmemscope/analyzer/{base,leaks,inefficient}.py,
hijacker/hijack_manager.py); ours otherwise."""
import csv
import hashlib
import os
import stat
import sys

import pytest

from conftest import BUILD, DUMP_HEADER, read_dump

sys.path.insert(0, str(BUILD / "python"))
import msmemscope  # noqa: E402
from msmemscope import analyzer  # noqa: E402
from msmemscope.analyzer import (InefficientAnalyzer, InefficientConfig, LeaksAnalyzer,  # noqa: E402
                                 LeaksConfig)


def row(i, event, etype, name="N/A", dev="0", ptr="N/A", attr="{}", pid="100"):
    return [str(i), event, etype, name, str(1000 + i), pid, "200", dev, ptr, attr, "", ""]


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(DUMP_HEADER)
        w.writerows(rows)
    return path


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def hal(i, event, addr, size=0):
    return row(i, event, "HAL", ptr=f"0x{addr:016x}", attr=f"{{allocation_id:{i},addr:0x{addr:x},size:{size}}}")


def mark(i, name="leak_check", dev="0"):
    return row(i, "MSTX", "Mark", name, dev=dev)


@pytest.fixture
def dump(tmp_path):
    return write_csv(tmp_path / "memscope_dump_1.csv", [mark(1)])


# ---------------------------------------------------------------- the module's names
def test_module_exports_upstreams_names():
    for name in ("LeaksAnalyzer", "LeaksConfig", "InefficientAnalyzer", "InefficientConfig", "check_leaks",
                 "check_inefficient", "analyze", "list_analyzers", "get_analyzer_config"):
        assert name in analyzer.__all__ and hasattr(analyzer, name), name
    for name in ("TakeSnapshot", "init_framework_hooks", "cleanup_framework_hooks", "enable_npu_sanitizer",
                 "analyzer", "check_leaks", "check_inefficient"):
        assert hasattr(msmemscope, name), name
    assert msmemscope.check_leaks is analyzer.check_leaks


# ---------------------------------------------------------------- Config checks
@pytest.mark.parametrize("make,exc,msg", [
    (lambda p: LeaksConfig(str(p / "missing.csv"), "m", 0), FileNotFoundError,
     "File not found: {p}/missing.csv or not a regular file"),
    (lambda p: LeaksConfig(str(p), "m", 0), FileNotFoundError, "File not found: {p} or not a regular file"),
    (lambda p: LeaksConfig(str(p / "d.txt"), "m", 0), ValueError,
     "Unsupported file type: .txt.Only files ending with .csv or .db are supported."),
    (lambda p: LeaksConfig(str(p / "d.db"), "m", 0), ValueError,
     "Unsupported file type: .db. Only files ending with .csv are supported."),
    (lambda p: LeaksConfig(str(p / "d.csv"), 3, 0), TypeError, "mstx_info must be a string"),
    (lambda p: LeaksConfig(str(p / "d.csv"), "  ", 0), ValueError, "mstx_info must not be empty or blank"),
    (lambda p: LeaksConfig(str(p / "d.csv"), "m", -1), ValueError, "start_index must be a non-negative integer"),
    (lambda p: LeaksConfig(str(p / "d.csv"), "m", "0"), ValueError, "start_index must be a non-negative integer"),
    (lambda p: LeaksConfig(str(p / "d.csv"), "m", True), ValueError, "start_index must be a non-negative integer"),
    (lambda p: LeaksConfig(str(p / "d.csv")), TypeError, None),  # mstx_info and start_index are required
    (lambda p: InefficientConfig(str(p / "d.csv"), mem_size=-1), ValueError,
     "Memory size must be a non-negative integer"),
    (lambda p: InefficientConfig(str(p / "d.csv"), mem_size="1"), ValueError,
     "Memory size must be a non-negative integer"),
    (lambda p: InefficientConfig(str(p / "d.csv"), inefficient_type=[]), ValueError,
     "Inefficient type must be a non-empty list or a single valid string"),
    (lambda p: InefficientConfig(str(p / "d.csv"), inefficient_type=("early_allocation",)), ValueError,
     "Inefficient type must be a non-empty list or a single valid string"),
    (lambda p: InefficientConfig(str(p / "d.csv"), inefficient_type=["late"]), ValueError,
     "Invalid inefficient type: late, valid values are ['early_allocation', 'late_deallocation', "
     "'temporary_idleness']"),
    (lambda p: InefficientConfig(str(p / "d.csv"), inefficient_type="late"), ValueError,
     "Invalid inefficient type: late, valid values are ['early_allocation', 'late_deallocation', "
     "'temporary_idleness']"),
    (lambda p: InefficientConfig(str(p / "d.csv"), idle_threshold=0), ValueError,
     "Idle threshold must be a positive integer"),
    (lambda p: InefficientConfig(str(p / "ro.csv")), PermissionError, "Write permission denied: {p}/ro.csv"),
    (lambda p: msmemscope.check_inefficient(str(p / "d.csv"), mem_size=-1), ValueError,
     "Memory size must be a non-negative integer"),
    (lambda p: msmemscope.check_leaks(str(p / "d.csv"), "", 0), ValueError,
     "mstx_info must not be empty or blank"),
    (lambda p: msmemscope.analyze(3, input_path=str(p / "d.csv")), TypeError,
     "msmemscope.analyze: 'name' must be a string, got int"),
])
def test_config_rejects(tmp_path, make, exc, msg):
    write_csv(tmp_path / "d.csv", [])
    (tmp_path / "d.txt").write_text("x\n")
    (tmp_path / "d.db").write_bytes(b"")
    write_csv(tmp_path / "ro.csv", [])
    os.chmod(tmp_path / "ro.csv", 0o444)
    if msg and "Write permission" in msg and os.access(tmp_path / "ro.csv", os.W_OK):
        return  # root may write every file: test_config_write_permission_as_another_user checks it
    with pytest.raises(exc) as e:
        make(tmp_path)
    if msg:
        assert str(e.value) == msg.format(p=tmp_path)


NOBODY = 65534


def test_config_write_permission_as_another_user(tmp_path):
    """The 'Write permission denied' refusal, also where the suite runs as root (CI):
    the check runs as user 65534 ('nobody') on a root-owned 0444 dump it may read, not write.
    Positive control: the same user accepts a dump it owns."""
    import subprocess
    import tempfile
    d = tempfile.mkdtemp(prefix="msms_wperm_")  # /tmp/msms_wperm_*: reachable by every user
    try:
        os.chmod(d, 0o755)
        ro = write_csv(os.path.join(d, "ro.csv"), [])
        os.chmod(ro, 0o444)
        own = write_csv(os.path.join(d, "own.csv"), [])
        os.chmod(own, 0o644)
        body = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                "from msmemscope.analyzer import InefficientConfig\n"
                "try:\n    InefficientConfig(sys.argv[2]); print('accepted')\n"
                "except PermissionError as e:\n    print('PermissionError:', e)\n")
        kw = {}
        pkg = BUILD / "python"
        if any(not (x.stat().st_mode & stat.S_IXOTH) for x in [pkg, *pkg.parents]):
            # a build folder other users cannot reach (a checkout under /root): a copy they can
            import shutil
            shutil.copytree(pkg / "msmemscope", os.path.join(d, "pkg", "msmemscope"))
            pkg = os.path.join(d, "pkg")
            for root, dirs, _ in os.walk(pkg):
                for x in dirs:
                    os.chmod(os.path.join(root, x), 0o755)
            os.chmod(pkg, 0o755)
        if os.geteuid() == 0:
            os.chown(own, NOBODY, NOBODY)
            kw = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        else:
            os.chown(ro, os.geteuid(), os.getegid())  # own it, mode 0444: os.access still says no
        for path, want in ((ro, f"PermissionError: Write permission denied: {ro}"), (own, "accepted")):
            p = subprocess.run([sys.executable, "-c", body, str(pkg), path],
                               capture_output=True, text=True, timeout=60, cwd=d, **kw)
            assert (p.returncode, p.stdout.strip().splitlines()[-1:]) == (0, [want]), (p.stdout, p.stderr)
    finally:
        import shutil
        shutil.rmtree(d)


def test_inefficient_config_takes_one_kind_as_a_string(dump):
    assert InefficientConfig(str(dump), inefficient_type="early_allocation").inefficient_type == ["early_allocation"]
    c = InefficientConfig(str(dump))
    assert (c.mem_size, c.inefficient_type, c.idle_threshold) == (
        0, ["early_allocation", "late_deallocation", "temporary_idleness"], 3000)


# ---------------------------------------------------------------- leaks: output, input untouched
LEAK_ROWS = [
    mark(1), hal(2, "MALLOC", 0x1000, 1 << 20), hal(3, "MALLOC", 0x2000, 512), mark(4),
    hal(5, "FREE", 0x2000), mark(6), hal(7, "FREE", 0x1000), mark(8),
    # device 1 has only two marks; N/A rows are not a device
    mark(9, dev="1"), mark(10, dev="1"), row(11, "SYSTEM", "STEP", "1", dev="N/A"),
]


def test_check_leaks_prints_upstreams_report_and_leaves_the_file_alone(tmp_path, capsys):
    f = write_csv(tmp_path / "memscope_dump_1.csv", LEAK_ROWS)
    before = digest(f), os.stat(f).st_mtime_ns
    assert msmemscope.check_leaks(str(f), "leak_check", 0) is None
    assert capsys.readouterr().out.splitlines() == [
        "INFO: Starting to analyze data for device 0...",
        "INFO: Starting to analyze data for device 1...",
        "ERROR: Device 1 has fewer than 3 data points. Please re-collect the data points.",
        "",
        "Leak Analysis Results for the Custom Range:",
        "====== ERROR: Detected memory leaks on device 0 ======",
        "Direct Hal memory leak of 1.0 Mb(s) at 0x0000000000001000 in Index 2.",
    ]
    # marks 4, 6, 8: the block is freed at 7, before C
    LeaksAnalyzer().analyze(LeaksConfig(str(f), "leak_check", 1))
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "No hal memory leaks detected on device 0.", out
    LeaksAnalyzer().analyze(LeaksConfig(str(f), "leak_check", 2))
    assert ("INFO: Start index 2 is out of bounds. Device 0 has a total of 4 MSTX events."
            in capsys.readouterr().out.splitlines())
    assert (digest(f), os.stat(f).st_mtime_ns) == before


def test_analyze_leaks_with_mstx_info_is_upstreams_check(tmp_path, capsys):
    f = write_csv(tmp_path / "memscope_dump_1.csv", LEAK_ROWS)
    assert msmemscope.analyze("leaks", input_path=str(f), mstx_info="leak_check", start_index=0) is None
    assert "Direct Hal memory leak of 1.0 Mb(s) at 0x0000000000001000 in Index 2." in capsys.readouterr().out


# ---------------------------------------------------------------- inefficient: write-back
def early_rows():
    # block 1 is allocated in API 1, API 2 frees block 2, block 1 is first
    # used in API 3: an early allocation of block 1.
    def pta(i, event, aid, addr, size=4096):
        return row(i, event, "PTA", ptr=f"0x{addr:016x}", attr=f"{{allocation_id:{aid},addr:0x{addr:x},size:{size}}}")
    return [
        pta(1, "MALLOC", 1, 0x10), pta(2, "MALLOC", 2, 0xa0), pta(3, "FREE", 2, 0xa0),
        row(4, "OP_LAUNCH", "ATEN_START", "aten::add"),
        row(5, "ACCESS", "READ", "aten::add", ptr="0x0000000000000010",
            attr="{type:PTA,dtype:torch.float32,shape:torch.Size([32, 32]),size:4096,allocation_id:1}"),
        row(6, "OP_LAUNCH", "ATEN_END", "aten::add"),
    ]


def test_check_inefficient_writes_inefficient_type_back_keeping_the_mode(tmp_path, capsys):
    f = write_csv(tmp_path / "memscope_dump_1.csv", early_rows())
    os.chmod(f, 0o640)
    assert msmemscope.check_inefficient(str(f), inefficient_type="early_allocation") is None
    assert capsys.readouterr().out.splitlines() == [
        "INFO: Connected to CSV file",
        "INFO: CSV file read successfully",
        "INFO: Connecting to csv memscope_dump_1.csv to write results",
        "INFO: All results have been successfully written to csv memscope_dump_1.csv",
    ]
    rows = read_dump(f)
    assert rows[0]["attr"]["inefficient_type"] == "early_allocation"
    assert [r["ID"] for r in rows] == ["1", "2", "3", "4", "5", "6"]
    assert stat.S_IMODE(os.stat(f).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["memscope_dump_1.csv"]  # no temporary left


def test_check_inefficient_without_the_kind_found_changes_nothing(tmp_path):
    f = write_csv(tmp_path / "memscope_dump_1.csv", early_rows())
    before = digest(f)
    InefficientAnalyzer().analyze(InefficientConfig(str(f), inefficient_type=["late_deallocation"]))
    assert digest(f) == before


def test_check_inefficient_refuses_a_symbolic_link(tmp_path):
    f = write_csv(tmp_path / "memscope_dump_1.csv", early_rows())
    link = tmp_path / "link.csv"
    link.symlink_to(f)
    before = digest(f)
    with pytest.raises(ValueError) as e:
        msmemscope.check_inefficient(str(link))
    assert str(e.value) == (f"{link} is a symbolic link; give the dump file itself (the results are written back "
                            f"into it by replacing the file)")
    assert link.is_symlink() and digest(f) == before


def test_check_inefficient_names_missing_columns(tmp_path):
    f = tmp_path / "memscope_dump_1.csv"
    f.write_text("ID,Event\n1,MALLOC\n")
    with pytest.raises(ValueError) as e:
        msmemscope.check_inefficient(str(f))
    assert str(e.value).startswith("ERROR: CSV format error: missing headers ['Event Type', 'Name',")


# ---------------------------------------------------------------- TakeSnapshot
@pytest.mark.parametrize("args,exc,msg", [
    ((), None, None),
    (([0, 1], "x"), None, None),
    (("0",), TypeError, "msmemscope.TakeSnapshot: 'device_mask' must be None, a device id 0..31, or a list/tuple "
                        "of device ids; got str '0'"),
    ((32,), ValueError, "msmemscope.TakeSnapshot: device id 32 out of range (allowed: None, a device id 0..31, or "
                        "a list/tuple of device ids)"),
    ((None, ""), ValueError, "msmemscope.TakeSnapshot: 'name' must be a non-empty single-line string"),
    ((None, 3), TypeError, "msmemscope.TakeSnapshot: 'name' must be a string, got int"),
])
def test_take_snapshot_class_checks(args, exc, msg):
    if exc is None:
        s = msmemscope.TakeSnapshot(*args)
        assert hasattr(s, "__enter__") and callable(s)
        return
    with pytest.raises(exc) as e:
        msmemscope.TakeSnapshot(*args)
    assert str(e.value) == msg


# ---------------------------------------------------------------- framework hooks
@pytest.mark.parametrize("args,exc,msg", [
    (("vllm_ascend", "11.0", "worker", "decompose"), ModuleNotFoundError,
     "msmemscope.init_framework_hooks: framework 'vllm_ascend' is not installed here (no Python package "
     "'vllm_ascend'); installed and supported: pytorch"),
    (("jax", "0.4", "x", "decompose"), ValueError,
     "msmemscope.init_framework_hooks: unknown framework 'jax' (supported: pytorch, vllm_ascend, verl, "
     "mindspeed_llm; installed here: pytorch)"),
    (("pytorch", "1.12.0", "autograd", "decompose"), ValueError,
     "msmemscope.init_framework_hooks: framework 'pytorch' has no hooks for version '1.12.0' (supported versions: "
     "1.13+, 2.6+, 2.10+)"),
    (("pytorch", "1.13.1", "fsdp1", "decompose"), ValueError,
     "msmemscope.init_framework_hooks: framework 'pytorch' version '1.13.1' has no component 'fsdp1' "
     "(supported: autograd, optimizer)"),
    (("pytorch", "1.13.1", "autograd", "trace"), ValueError,
     "msmemscope.init_framework_hooks: invalid hook_type 'trace' (supported: decompose, snapshot)"),
    (("pytorch", 2, "autograd", "decompose"), TypeError,
     "msmemscope.init_framework_hooks: 'version' must be a string, got int"),
])
def test_init_framework_hooks_rejects(args, exc, msg):
    if args[0] == "vllm_ascend":
        import importlib.util
        if importlib.util.find_spec("vllm_ascend"):
            pytest.skip("vllm_ascend is installed here")
    with pytest.raises(exc) as e:
        msmemscope.init_framework_hooks(*args)
    assert str(e.value) == msg


def test_init_framework_hooks_wraps_and_cleanup_restores(capsys):
    torch = pytest.importorskip("torch")
    original = torch.autograd.backward, torch.optim.Optimizer.zero_grad
    msmemscope.init_framework_hooks("pytorch", torch.__version__, "autograd", "decompose")
    msmemscope.init_framework_hooks("pytorch", torch.__version__, "optimizer", "snapshot")
    assert torch.autograd.backward is not original[0]
    assert torch.autograd.backward.__wrapped__ is original[0]
    assert "zero_grad" in torch.optim.Optimizer.__dict__
    msmemscope.cleanup_framework_hooks()
    msmemscope.cleanup_framework_hooks()
    assert (torch.autograd.backward, torch.optim.Optimizer.zero_grad) == original
    assert capsys.readouterr().out.splitlines() == [
        f"[msmemscope] Info: Hijack functions registered successfully for framework 'pytorch', version "
        f"'{torch.__version__}', component autograd, hook type decompose",
        f"[msmemscope] Info: Hijack functions registered successfully for framework 'pytorch', version "
        f"'{torch.__version__}', component optimizer, hook type snapshot",
        "[msmemscope] Info: All hijack function handlers have been released",
        "[msmemscope] Info: No registered hijack handlers, nothing to release",
    ]


def test_a_framework_function_missing_from_the_installed_version_hooks_nothing():
    torch = pytest.importorskip("torch")
    before = torch.autograd.backward
    with pytest.raises(RuntimeError) as e:
        msmemscope.init_framework_hooks("pytorch", "2.6.0", "fsdp1", "decompose")
    assert str(e.value).startswith("msmemscope.init_framework_hooks: cannot hook torch.distributed.fsdp.")
    assert f"in the installed pytorch (version {torch.__version__})" in str(e.value)
    assert torch.autograd.backward is before


def test_enable_npu_sanitizer_needs_torch_npu():
    import importlib.util
    if importlib.util.find_spec("torch_npu"):
        pytest.skip("torch_npu is installed here")
    with pytest.raises(ModuleNotFoundError) as e:
        msmemscope.enable_npu_sanitizer()
    assert str(e.value) == ("msmemscope.enable_npu_sanitizer: needs torch_npu (the NPU sanitizer is part of "
                            "torch_npu, which is not installed)")


# ---------------------------------------------------------------- describer, watcher
def test_describer_takes_the_owner_positionally():
    d = msmemscope.describe.describer(None, "forward")
    assert isinstance(d, msmemscope.describe.Describer) and d.owner == "forward"
    with pytest.raises(TypeError) as e:
        msmemscope.describe.describer()
    assert str(e.value) == ('msmemscope.describe.describer: missing the owner label (describer(owner="x") for a '
                            'scope, describer(tensor_or_address, "x") to tag memory)')


def test_watcher_remove_with_length():
    import ctypes
    buf = ctypes.create_string_buffer(1000)
    addr = ctypes.addressof(buf)
    msmemscope.watcher.watch(addr, length=1000, name="test", dump_nums=2)
    with pytest.raises(ValueError) as e:
        msmemscope.watcher.remove(addr, length=999)
    assert str(e.value) == f"msmemscope.watcher.remove: 0x{addr:016x} is watched with length 1000, not 999"
    with pytest.raises(ValueError) as e:
        msmemscope.watcher.remove(addr, length=0)
    assert str(e.value) == "msmemscope.watcher.remove: 'length' must be > 0, got 0"
    msmemscope.watcher.remove(addr, length=1000)
    assert msmemscope.watcher.watched() == {}


def test_framework_hooks_label_and_snapshot_what_runs_inside(tmp_path):
    pytest.importorskip("torch")
    import subprocess
    import textwrap
    from conftest import dump_files, process_dirs
    script = tmp_path / "hooks.py"
    script.write_text(textwrap.dedent("""
        import torch, msmemscope
        msmemscope.config(device="cpu", events="alloc,free", analysis="", output="out")
        model = torch.nn.Linear(32, 32)
        msmemscope.init_framework_hooks("pytorch", torch.__version__, "autograd", "decompose")
        msmemscope.init_framework_hooks("pytorch", torch.__version__, "optimizer", "snapshot")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        msmemscope.start()
        model(torch.randn(8, 32)).sum().backward()
        opt.step()
        opt.zero_grad()
        msmemscope.cleanup_framework_hooks()
        model(torch.randn(8, 32)).sum().backward()
        opt.zero_grad()
        msmemscope.stop()
    """))
    env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    env.pop("LD_PRELOAD", None)
    env.pop("MSMEMSCOPE_SESSION", None)
    p = subprocess.run(["/usr/bin/python3", str(script)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    [d] = process_dirs(tmp_path / "out")
    rows = read_dump(dump_files(d)[0])
    owners = [r["attr"].get("owner") for r in rows if r["Event"] == "MALLOC" and r["Event Type"] == "PTA"]
    assert "PTA@pytorch@backward" in owners, owners
    snaps = [r["Name"] for r in rows if r["Event"] == "SNAPSHOT"]
    ident = "torch.optim.optimizer@Optimizer@zero_grad"
    assert snaps == [ident + "@Start", ident + "@End"], snaps  # one call hooked, the one after cleanup not
