"""cuda collector: programs that call the (simulated) CUDA driver directly.

The simulated libcuda.so.1 (tests/fixtures/cuda) hands out deterministic device
addresses: device N's first block is 0x700000000000 + N * 0x10000000000, later
ones follow rounded up to 512 bytes, a freed range is given again (the lowest
that fits first; test_cuda_address_reuse.py); VMM reservations start at
0x600000000000 and VMM handles count from 0xa001.
"""
import re

from cuda_helpers import devices_written, rows, run_cuda

D0 = 0x700000000000
D1 = 0x710000000000


def ptr(v):
    return f"0x{v:016x}"


def test_alloc_pitch_managed_free(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["basic"])
    assert "pitch=512" in p.stdout
    a, b, c = D0, D0 + 1024, D0 + 1024 + 2048
    assert rows(d, "0") == [
        ("MALLOC", "HAL", "N/A", "0", ptr(a),
         f"{{allocation_id:1,addr:{ptr(a)},size:1000,used:1000,alloc_type:alloc,process_used:1000,device_used:1000,driver:cuda}}"),
        ("MALLOC", "HAL", "N/A", "0", ptr(b),
         f"{{allocation_id:2,addr:{ptr(b)},size:2048,used:3048,alloc_type:pitch,process_used:3048,device_used:3048,driver:cuda}}"),
        ("MALLOC", "HAL", "N/A", "0", ptr(c),
         f"{{allocation_id:3,addr:{ptr(c)},size:4096,used:7144,alloc_type:managed,process_used:7144,device_used:7144,driver:cuda}}"),
        ("FREE", "HAL", "N/A", "0", ptr(a),
         f"{{allocation_id:1,addr:{ptr(a)},size:1000,used:6144,process_used:6144,device_used:6144}}"),
        ("FREE", "HAL", "N/A", "0", ptr(b),
         f"{{allocation_id:2,addr:{ptr(b)},size:2048,used:4096,process_used:4096,device_used:4096}}"),
        ("FREE", "HAL", "N/A", "0", ptr(c),
         f"{{allocation_id:3,addr:{ptr(c)},size:4096,used:0,process_used:0,device_used:0}}"),
    ]
    assert devices_written(d) == ["device_0"]
    assert "0/HAL: peak 7.0 KiB, final 0 B" in p.stdout


def test_virtual_memory_create_map_unmap_release(cli, test_bin, tmp_path):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["vmm"])
    mb2 = 2 * 1024 * 1024
    va = 0x600000000000
    assert rows(d, "0") == [
        ("MALLOC", "HAL", "N/A", "0", ptr(0xa001),
         f"{{allocation_id:1,addr:{ptr(0xa001)},size:{mb2},used:{mb2},alloc_type:create,process_used:{mb2},device_used:{mb2},driver:cuda}}"),
        ("MALLOC", "HAL", "N/A", "0", ptr(0xa002),
         f"{{allocation_id:2,addr:{ptr(0xa002)},size:{mb2},used:{2*mb2},alloc_type:create,process_used:{2*mb2},device_used:{2*mb2},driver:cuda}}"),
        ("MALLOC", "HAL", "N/A", "0", ptr(va),
         f"{{allocation_id:3,addr:{ptr(va)},size:{mb2},used:{mb2},alloc_type:map,process_used:{2*mb2},device_used:{2*mb2},driver:cuda,virtual:true}}"),
        ("MALLOC", "HAL", "N/A", "0", ptr(va + mb2),
         f"{{allocation_id:4,addr:{ptr(va + mb2)},size:{mb2},used:{2*mb2},alloc_type:map,process_used:{2*mb2},device_used:{2*mb2},driver:cuda,virtual:true}}"),
        # one cuMemUnmap over both mappings frees each of them; mappings are
        # a pool of their own (used) and not counted again in device_used
        ("FREE", "HAL", "N/A", "0", ptr(va),
         f"{{allocation_id:3,addr:{ptr(va)},size:{mb2},used:{mb2},process_used:{2*mb2},device_used:{2*mb2}}}"),
        ("FREE", "HAL", "N/A", "0", ptr(va + mb2),
         f"{{allocation_id:4,addr:{ptr(va + mb2)},size:{mb2},used:0,process_used:{2*mb2},device_used:{2*mb2}}}"),
        ("FREE", "HAL", "N/A", "0", ptr(0xa001),
         f"{{allocation_id:1,addr:{ptr(0xa001)},size:{mb2},used:{mb2},process_used:{mb2},device_used:{mb2}}}"),
        ("FREE", "HAL", "N/A", "0", ptr(0xa002),
         f"{{allocation_id:2,addr:{ptr(0xa002)},size:{mb2},used:0,process_used:0,device_used:0}}"),
    ]


def test_async_and_pool_allocations(cli, test_bin, tmp_path):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["async"])
    a, b, c = D0, D0 + 512, D0 + 1024
    assert rows(d, "0") == [
        ("MALLOC", "HAL", "N/A", "0", ptr(a),
         f"{{allocation_id:1,addr:{ptr(a)},size:256,used:256,alloc_type:async,process_used:256,device_used:256,driver:cuda}}"),
        ("MALLOC", "HAL", "N/A", "0", ptr(b),
         f"{{allocation_id:2,addr:{ptr(b)},size:512,used:768,alloc_type:async,process_used:768,device_used:768,driver:cuda}}"),
        ("MALLOC", "HAL", "N/A", "0", ptr(c),
         f"{{allocation_id:3,addr:{ptr(c)},size:768,used:1536,alloc_type:async,process_used:1536,device_used:1536,driver:cuda}}"),
        ("FREE", "HAL", "N/A", "0", ptr(a),
         f"{{allocation_id:1,addr:{ptr(a)},size:256,used:1280,process_used:1280,device_used:1280}}"),
        ("FREE", "HAL", "N/A", "0", ptr(b),
         f"{{allocation_id:2,addr:{ptr(b)},size:512,used:768,process_used:768,device_used:768}}"),
        ("FREE", "HAL", "N/A", "0", ptr(c),
         f"{{allocation_id:3,addr:{ptr(c)},size:768,used:0,process_used:0,device_used:0}}"),
    ]


def test_pinned_host_memory_is_host_pinned_on_cpu(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["pinned"], device="cuda,cpu")
    m = re.search(r"a=(0x[0-9a-f]{16}) b=(0x[0-9a-f]{16}) r=(0x[0-9a-f]{16})", p.stdout)
    assert m, p.stdout
    a, b, r = m.groups()
    pinned = [x for x in rows(d, "cpu") if x[1] == "HOST_PINNED"]
    # process_used/device_used also count the host heap (HOST rows): not asserted
    got = []
    for ev, typ, name, dev, ptr_, attr in pinned:
        kv = dict(item.split(":", 1) for item in attr[1:-1].split(","))
        got.append((ev, dev, ptr_, kv["addr"], kv["size"], kv["used"], kv.get("pinned"), kv.get("driver"),
                    kv.get("alloc_type"), kv["allocation_id"]))
    ids = {g[2]: g[9] for g in got if g[0] == "MALLOC"}
    assert [g[:9] for g in got] == [
        ("MALLOC", "cpu", a, a, "4096", "4096", "true", "cuda", "alloc"),
        ("MALLOC", "cpu", b, b, "8192", "12288", "true", "cuda", "alloc"),
        ("MALLOC", "cpu", r, r, "16384", "28672", "true", "cuda", "register"),
        ("FREE", "cpu", r, r, "16384", "12288", None, None, None),
        ("FREE", "cpu", a, a, "4096", "8192", None, None, None),
        ("FREE", "cpu", b, b, "8192", "0", None, None, None),
    ]
    assert [g[9] for g in got if g[0] == "FREE"] == [ids[r], ids[a], ids[b]]
    assert "cpu/HOST_PINNED: peak 28.0 KiB, final 0 B" in p.stdout


def test_pinned_rows_need_device_cpu(cli, test_bin, tmp_path):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["pinned"], device="cuda")
    assert not (d / "device_cpu" / "dump").exists() or all(
        x[1] != "HOST_PINNED" for x in rows(d, "cpu"))


def test_out_of_memory_rows_as_upstream(cli, test_bin, tmp_path):
    # Upstream (hal_hooks.cpp HandleOOM) writes the OOM_Snapshot row at every
    # failure; the trigger and the blocks only with its oom analysis.
    env = {"FAKE_CUDA_MEM_LIMIT": "1048576"}
    (tmp_path / "none").mkdir()
    (tmp_path / "oom").mkdir()
    p, d = run_cuda(cli, tmp_path / "none", test_bin / "cuda_driver_prog", ["oom"], env=env)
    assert "oom rc=2" in p.stdout
    malloc = ("MALLOC", "HAL", "N/A", "0", ptr(D0),
              f"{{allocation_id:1,addr:{ptr(D0)},size:524288,used:524288,alloc_type:alloc,process_used:524288,device_used:524288,driver:cuda}}")
    snapshot = ("SNAPSHOT", "SNAPSHOT", "OOM_Snapshot", "0", "N/A",
                "{reserved:0,max_reserved:0,allocated:524288,max_allocated:524288,total:0,free:0,"
                "device_rate:0.000000,reserved_rate:0.000000}")
    free = ("FREE", "HAL", "N/A", "0", ptr(D0),
            f"{{allocation_id:1,addr:{ptr(D0)},size:524288,used:0,process_used:0,device_used:0}}")
    assert rows(d, "0") == [malloc, snapshot, free]
    assert "1 out-of-memory failure(s), an OOM_Snapshot row each; --analysis=oom adds" in p.stdout
    p, d = run_cuda(cli, tmp_path / "oom", test_bin / "cuda_driver_prog", ["oom"], env=env, extra=["--analysis=oom:1"])
    got = rows(d, "0")
    assert got[:3] == [malloc, snapshot, ("OOM_DETAIL", "OOM_TRIGGER", "OOM_Trigger", "0", "N/A",
                                          "{func:cuMemAlloc_v2,req_size:1048576,flag:0,ret:2,driver:cuda}")]
    # then the blocks, and our OOM_Snapshot_After at the next memory event (the FREE)
    assert [g[1] for g in got[3:]] == ["OOM_RECENT_ALLOC", "OOM_TOP_ALLOC", "HAL", "SNAPSHOT"]
    assert got[-1][2] == "OOM_Snapshot_After"


def test_kernel_launch_names_and_streams(cli, test_bin, tmp_path):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["launch"])
    assert rows(d, "0") == [
        ("KERNEL_LAUNCH", "KERNEL_LAUNCH", "vecAdd", "0", "N/A", "{streamId:32,taskId:1}"),
        # cuLaunchKernelEx on the default stream (0): no stream attributes
        ("KERNEL_LAUNCH", "KERNEL_LAUNCH", "reduce", "0", "N/A", ""),
        ("KERNEL_LAUNCH", "KERNEL_LAUNCH", "reduce", "0", "N/A", "{streamId:48,taskId:3}"),
        # the per-thread-stream export cuLaunchKernel_ptsz
        ("KERNEL_LAUNCH", "KERNEL_LAUNCH", "vecAdd", "0", "N/A", "{streamId:2,taskId:4}"),
    ]


def test_kernel_launch_only_with_events_launch(cli, test_bin, tmp_path):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["launch"], events="alloc,free")
    files = list((d).glob("device_*/dump/memscope_dump_*.csv"))
    for f in files:
        assert "KERNEL_LAUNCH" not in f.read_text()


def test_device_filter_cuda_1_and_free_on_other_context(cli, test_bin, tmp_path):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["devices"], device="cuda:1")
    # the FREE of device 1's block happens while device 0's context is
    # current: it still belongs to device 1
    assert rows(d, "1") == [
        ("MALLOC", "HAL", "N/A", "1", ptr(D1),
         f"{{allocation_id:1,addr:{ptr(D1)},size:200,used:200,alloc_type:alloc,process_used:200,device_used:200,driver:cuda}}"),
        ("FREE", "HAL", "N/A", "1", ptr(D1),
         f"{{allocation_id:1,addr:{ptr(D1)},size:200,used:0,process_used:0,device_used:0}}"),
    ]
    assert devices_written(d) == ["device_1"]


def test_both_devices(cli, test_bin, tmp_path):
    _, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["devices"], device="cuda")
    assert devices_written(d) == ["device_0", "device_1"]
    assert [x[:5] for x in rows(d, "0")] == [("MALLOC", "HAL", "N/A", "0", ptr(D0)),
                                            ("FREE", "HAL", "N/A", "0", ptr(D0))]
    assert [x[:5] for x in rows(d, "1")] == [("MALLOC", "HAL", "N/A", "1", ptr(D1)),
                                            ("FREE", "HAL", "N/A", "1", ptr(D1))]


def test_snapshot_entry_point(cli, test_bin, tmp_path):
    p, d = run_cuda(cli, tmp_path, test_bin / "cuda_driver_prog", ["snapshot"])
    assert "rows=2 current=1" in p.stdout
    total = 16 << 30
    free0 = total - (1 << 20)
    snaps0 = [x for x in rows(d, "0") if x[0] == "SNAPSHOT"]
    snaps1 = [x for x in rows(d, "1") if x[0] == "SNAPSHOT"]
    assert snaps0 == [
        # upstream's keys, order and "%f" rates (csrc/analysis/dump.cpp); what
        # the caller did not give is 0, as upstream writes it
        ("SNAPSHOT", "SNAPSHOT", "before step", "0", "N/A",
         f"{{reserved:4096,max_reserved:0,allocated:1024,max_allocated:0,total:{total},free:{free0},"
         "device_rate:0.006104,reserved_rate:25.000000}"),
        ("SNAPSHOT", "SNAPSHOT", "Memory Snapshot", "0", "N/A",
         f"{{reserved:0,max_reserved:0,allocated:0,max_allocated:0,total:{total},free:{free0},"
         "device_rate:0.006104,reserved_rate:0.000000}"),
    ]
    assert snaps1 == [
        ("SNAPSHOT", "SNAPSHOT", "before step", "1", "N/A",
         f"{{reserved:4096,max_reserved:0,allocated:1024,max_allocated:0,total:{total},free:{total},"
         "device_rate:0.000000,reserved_rate:25.000000}"),
    ]


def test_without_profiler_the_program_runs_plain(test_bin):
    import subprocess
    p = subprocess.run([str(test_bin / "cuda_driver_prog"), "snapshot"], capture_output=True, text=True)
    assert p.returncode == 12 and "no msms_cuda_snapshot" in p.stdout
    p = subprocess.run([str(test_bin / "cuda_driver_prog"), "basic"], capture_output=True, text=True)
    assert p.returncode == 0 and "pitch=512" in p.stdout
