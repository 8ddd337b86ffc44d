"""OOM killer, cgroup v1 memory controller (see oom_cgroup.py). Skipped,
with the reason in ctest's output, where this machine has no writable v1
memory hierarchy."""
import oom_cgroup


def test_oom_killed_in_memory_cgroup(cli, test_bin, tmp_path):
    oom_cgroup.root_process_killed(oom_cgroup.make_v1, cli, test_bin, tmp_path)


def test_oom_killed_child_in_memory_cgroup(cli, test_bin, tmp_path):
    oom_cgroup.child_process_killed(oom_cgroup.make_v1, cli, test_bin, tmp_path)
