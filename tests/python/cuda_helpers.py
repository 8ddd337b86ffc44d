"""Shared helpers of the test_cuda_*.py suites (simulated CUDA driver)."""
from pathlib import Path

from conftest import dump_files, process_dirs, read_dump


def run_cuda(cli, tmp_path, program, args=(), device="cuda", events="alloc,free,launch", env=None, extra=(),
             level="kernel"):
    """Runs program under the CLI (no analysis); returns (proc, process dir).
    The programs launch kernels, recorded at kernel level only (upstream's
    default level, op, records framework operators): level="kernel" unless
    a test says otherwise (None: the default)."""
    out = tmp_path / "out"
    lv = [f"--level={level}"] if level else []
    p = cli([f"--device={device}", f"--events={events}", *lv, "--analysis=", f"--output={out}", *extra, "--",
             str(program), *args], cwd=tmp_path, env=env, check_rc=0)
    dirs = process_dirs(out)
    assert len(dirs) == 1, (dirs, p.stdout, p.stderr)
    return p, dirs[0]


def rows(procdir, device, keep_host=False):
    """Rows of one device's dump as (Event, Event Type, Name, Device Id, Ptr, Attr), without
    SYSTEM rows and (unless keep_host) without the host heap's HOST rows."""
    files = dump_files(procdir, device)
    assert len(files) == 1, (procdir, device, files)
    out = []
    ids = []
    for r in read_dump(files[0]):
        ids.append(int(r["ID"]))
        if r["Event"] == "SYSTEM":
            continue
        if not keep_host and r["Event Type"] == "HOST":
            continue
        out.append((r["Event"], r["Event Type"], r["Name"], r["Device Id"], r["Ptr"], r["Attr"]))
    assert ids == sorted(ids), "IDs must increase"
    return out


def devices_written(procdir):
    return sorted(p.name for p in Path(procdir).iterdir() if p.name.startswith("device_"))
