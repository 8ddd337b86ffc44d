#!/usr/bin/python3
"""Issue #27: what msmemscope's views say about three PyTorch scripts of our
own, next to torch's own counts (printed by the scripts) and
torch.profiler(profile_memory=True, with_stack=True). memray is not run
(it says whether `import memray` works; bench/README.md's PyTorch section
builds memray from source for the cost benchmark).

For each script (gpt_keep_loss.py, cnn_loader.py, kv_infer.py):
 1. `msmemscope --device=cpu --call-stack=python --analysis=leaks,decompose
    --sinks=html,memory_viz [--step-on=__main__:generate_token] -- python3 S`:
    the console's decomposition (live/peak bytes per owner), the leak
    report (blocks/bytes, per-step warnings), the pools' peak/final, and the
    memory_viz pickle read with torch.cuda._memory_viz (the total of
    memory(segments), the framework pool's active blocks, its peak replayed
    from its trace when the trace is complete, allocations of one batch's size);
 2. profile_wrap.py S: the same script in-process under torch.profiler;
 3. memray: not run; the last line says whether it could be imported.

Prints the side-by-side table (markdown with --markdown).

Usage: bench/views/run.py [--msmemscope build/bin/msmemscope] [--out DIR]
                          [--only a,b,c] [--markdown] [--keep]
MSMEMSCOPE_HOME in the environment is passed on (a prefix whose python/
holds another copy of the package).
"""
import argparse
import glob
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
BATCH_BYTES = 16 * 3 * 32 * 32 * 4  # one collated image batch of cnn_loader.py

SCRIPTS = [
    ("a", "gpt_keep_loss.py", "GPT + AdamW, every loss (and graph) kept", []),
    ("b", "cnn_loader.py", "CNN, DataLoader(num_workers=2), grad accumulation", []),
    ("c", "kv_infer.py", "no_grad inference, KV cache dict grows", ["--step-on=__main__:generate_token"]),
]


def figures(prefix, text):
    out = {}
    for m in re.finditer(r"^%s: (\w+) = (-?\d+)$" % prefix, text, re.M):
        out[m.group(1)] = int(m.group(2))
    return out


UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def size(num, unit):
    return int(round(float(num) * UNITS[unit]))


def parse_console(text):
    """The main process's section of the console (the first process that did
    not end with _exit: DataLoader workers do)."""
    starts = [m for m in re.finditer(r"^msmemscope: pid (\d+) \((.*)\) (.*)$", text, re.M)]
    sections = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        sections.append((m, text[m.start():end]))
    main = next((s for s in sections if "(_exit)" not in s[0].group(3)), sections[0] if sections else None)
    r = {"processes": len(sections), "owners": {}}
    if main is None:
        return r
    m, sec = main
    r["pid"] = int(m.group(1))
    o = re.search(r"^\s+output: (.*)$", sec, re.M)
    r["output"] = o.group(1).strip() if o else None
    for pool in ("HOST", "PTA"):
        p = re.search(r"^\s+cpu/%s: peak ([\d.]+) (B|KiB|MiB|GiB), final ([\d.]+) (B|KiB|MiB|GiB)" % pool, sec, re.M)
        if p:
            r[pool + "_peak"] = size(p.group(1), p.group(2))
            r[pool + "_final"] = size(p.group(3), p.group(4))
    for row in re.finditer(r"^\s+(HOST|PTA\S*)\s+(\d+)\s+(\d+)\s+(\d+)$", sec, re.M):
        r["owners"][row.group(1)] = (int(row.group(2)), int(row.group(3)), int(row.group(4)))
    lk = re.search(r"Leaked blocks on device cpu by site, largest first: (\d+) block\(s\), (\d+) bytes, from (\d+) site", sec)
    if lk:
        r["leak_blocks"], r["leak_bytes"], r["leak_sites"] = int(lk.group(1)), int(lk.group(2)), int(lk.group(3))
    sm = re.search(r"^====== SUMMARY: ([\d.]+) Mb\(s\) leaked in (\d+) allocation", sec, re.M)
    if sm:
        r["upstream_summary_mib"] = float(sm.group(1))
    # the per-step warning: one line per step, with the step's bytes
    steps = re.findall(r"\[step (\d+)\]: (?:(\d+) ptrs \(.*?; (\d+) bytes\)|ptr: \S+ .*?(\d+))", text)
    per = re.findall(r"\[step (\d+)\]: \d+ ptrs \(.*?; (\d+) bytes\)", text)
    r["warned_steps"] = len(steps)
    if per:
        r["step_bytes_last"] = int(per[-1][1])
    r["first_leak_site"] = None
    fl = re.search(r"^\s+\d+ block\(s\), \d+ bytes \(steps [^)]*\): (.*)$", sec, re.M)
    if fl:
        r["first_leak_site"] = fl.group(1)
    return r


def read_memory_viz(run_dir):
    r = {}
    pick = glob.glob(os.path.join(run_dir, "memory_viz_*.pickle"))
    if not pick:
        return r
    import torch.cuda._memory_viz as mv
    with open(pick[0], "rb") as f:
        snap = pickle.load(f)
    devs = snap["msmemscope"]["devices"]
    r["devices"] = devs
    mem = mv.memory(snap["segments"], format_flamegraph=lambda s: s)
    r["memory_total"] = sum(int(line.rsplit(" ", 1)[1]) for line in mem.splitlines() if line.strip())
    active = [0] * len(devs)
    for seg in snap["segments"]:
        active[seg["device"]] += sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    r["active"] = dict(zip(devs, active))
    r["batch_allocs"] = 0
    for i, trace in enumerate(snap["device_traces"]):
        if "framework" not in devs[i]:
            continue
        r["batch_allocs"] += sum(1 for e in trace if e["action"] == "alloc" and e["size"] == BATCH_BYTES)
        if snap["msmemscope"]["trace_dropped"][i] == 0:
            live = peak = 0
            for e in trace:
                if e["action"] == "alloc":
                    live += e["size"]
                elif e["action"] == "free_completed":
                    live -= e["size"]
                peak = max(peak, live)
            r["pta_trace_peak"] = peak
            r["pta_trace_final"] = live
    r["trace_dropped"] = snap["msmemscope"]["trace_dropped"]
    return r


def run_msmemscope(args, script, extra, out):
    cmd = [args.msmemscope, "--device=cpu", "--call-stack=python", "--analysis=leaks,decompose",
           "--sinks=html,memory_viz", "--output-path=" + out] + extra + ["--", PY, os.path.join(HERE, script)]
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(os.path.join(out, "console.txt"), "w") as f:
        f.write(p.stdout)
    c = parse_console(p.stdout)
    c["rc"] = p.returncode
    c["torch"] = figures("torch", p.stdout)
    if c.get("output"):
        c["viz"] = read_memory_viz(c["output"])
    return c


def run_profiler(script, count_batches):
    extra = ["--count-size", str(BATCH_BYTES)] if count_batches else []
    p = subprocess.run([PY, os.path.join(HERE, "profile_wrap.py")] + extra + [os.path.join(HERE, script)], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return figures("torch", p.stdout), figures("profiler", p.stdout), p.stdout


def has_memray():
    return subprocess.run([PY, "-c", "import memray"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return "{:,}".format(v)


def rows_for(key, c, t, prof):
    own = c.get("owners", {})
    viz = c.get("viz", {})

    def owner(o):
        if not own:
            return None
        live, peak, _ = own.get(o, (0, 0, 0))
        return "%s (live at exit %s)" % (fmt(peak), fmt(live))

    pta_live = sum(v[0] for k, v in own.items() if k.startswith("PTA")) if own else None
    rows = [
        ("parameter bytes (msmemscope: PTA@weight peak)", t.get("parameter_bytes"), owner("PTA@weight"), None),
        ("gradient bytes (PTA@gradient peak)", t.get("gradient_bytes"), owner("PTA@gradient"), None),
        ("optimizer state bytes (PTA@optimizer_state peak)", t.get("optimizer_state_bytes"),
         owner("PTA@optimizer_state"), None),
    ]
    if key == "b":
        rows.append(("DataLoader batches received: 196,608 B image blocks in the main process "
                     "(msmemscope: PTA@shared_memory peak)",
                     "%d batches" % (t.get("steps", 0) * 2), "%s (%s)" % (fmt(viz.get("batch_allocs")),
                                                                       owner("PTA@shared_memory")),
                     prof.get("alloc_%d_count" % BATCH_BYTES)))
    rows.append(("kept by the last judged step (msmemscope: that step's leak warning)",
                 t.get("kept_per_step_bytes"), c.get("step_bytes_last", 0 if own else None), None))
    rows.append(("kept by all judged steps (msmemscope: leak report, blocks)",
                 t.get("kept_judged_bytes", 0),
                 "%s (%s)" % (fmt(c.get("leak_bytes", 0)), fmt(c.get("leak_blocks", 0))) if own else None, None))
    rows += [
        ("tensor bytes live at the end (torch: gc scan as main() returns; msmemscope: PTA* live at "
         "process exit; profiler: allocated - freed while profiling)",
         t.get("live_tensor_bytes"), pta_live, prof.get("final_bytes")),
        ("tensor peak (msmemscope: PTA pool replayed from the memory_viz trace)", None,
         viz.get("pta_trace_peak"), prof.get("peak_bytes")),
        ("bytes allocated over the run (profiler: [memory] events)", None, None, prof.get("alloc_bytes")),
        ("sum of operators' positive self_cpu_memory_usage", None, None, prof.get("ops_self_alloc_bytes")),
        ("memory_viz: _memory_viz.memory(segments) total (console: the decomposition's live bytes, all owners)",
         None, "%s (%s)" % (fmt(viz.get("memory_total")),
                            fmt(sum(v[0] for v in own.values()) if own else None)), None),
    ]
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--msmemscope", default=os.path.join(ROOT, "build", "bin", "msmemscope"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default="a,b,c")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the run folders (with --out they are kept)")
    args = ap.parse_args()
    out_root = args.out or tempfile.mkdtemp(prefix="msmemscope_views_")
    memray = has_memray()
    head = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %cd", "--date=iso"],
                          stdout=subprocess.PIPE, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           stdout=subprocess.PIPE, text=True).stdout.count("\n")
    lines = ["msmemscope: %s (commit %s%s); torch %s" % (
        args.msmemscope, head, ", %d tracked file(s) modified in the tree" % dirty if dirty else "",
        subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                       text=True).stdout.strip())]
    for key, script, title, extra in SCRIPTS:
        if key not in args.only.split(","):
            continue
        out = os.path.join(out_root, key)
        os.makedirs(out, exist_ok=True)
        c = run_msmemscope(args, script, extra, out)
        t = c["torch"]
        t_prof, prof, prof_text = run_profiler(script, key == "b")
        with open(os.path.join(out, "profiler.txt"), "w") as f:
            f.write(prof_text)
        start = len(lines)
        lines.append("")
        lines.append("**(%s) %s** (`bench/views/%s`%s; msmemscope rc %s, %d process(es); leak sites %s%s)" % (
            key, title, script, (", " + " ".join("`%s`" % e for e in extra)) if extra else "", c["rc"],
            c["processes"], fmt(c.get("leak_sites", 0)),
            (", first: " + c["first_leak_site"]) if c.get("first_leak_site") else ""))
        lines.append("")
        lines.append("| figure | torch's own | msmemscope | torch.profiler |")
        lines.append("|---|---:|---:|---:|")
        for name, a, b, p in rows_for(key, c, t, prof):
            lines.append("| %s | %s | %s | %s |" % (name, fmt(a), fmt(b), fmt(p)))
        for line in prof_text.splitlines():
            if line.startswith("profiler-size:"):
                lines.append("")
                lines.append("torch.profiler: " + line.split(":", 1)[1].strip())
        if t_prof and t_prof != t:
            lines.append("")
            lines.append("(torch's own figures under the profiler differ: %s)" % t_prof)
        print("\n".join(lines[start:]), flush=True)
    lines.append("")
    lines.append("memray: not run by this script (%s; bench/README.md's PyTorch section builds it from "
                 "source)" % ("it is importable" if memray else "`import memray` fails: not a Debian package"))
    if args.markdown:
        print("\n----- markdown -----")
        print("\n".join(lines))
    if not args.out and not args.keep:
        shutil.rmtree(out_root, ignore_errors=True)
    else:
        print("run folders under", out_root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
