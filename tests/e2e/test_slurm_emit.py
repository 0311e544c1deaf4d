"""``lumen-ex grade --emit slurm`` and what ``--cluster slurm`` refuses, without a cluster.

tests/e2e/test_slurm.py grades through a real one-node cluster; these hold what needs none: the
scripts a round is made of, the options passed into them (and those refused, before anything is
written), the task that refuses to grade without a sandbox, and the rule that only whole results
are taken into DIR (src/lumen_ex/classroom/slurm_rounds.py ``collect``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LUMEN_EX, REFERENCES
from helpers.classes import EX1, grade, put


def _class(tmp: Path, n: int = 5) -> Path:
    subs = tmp / "class"
    for i in range(n):
        put(subs / f"s{i}", EX1.path, REFERENCES["attention"])
    return subs


def test_emit_writes_a_round_and_submits_nothing(tmp_path):
    subs = _class(tmp_path)
    extra = tmp_path / "more.sbatch"
    extra.write_text("# site options\n#SBATCH --qos=short\n\n#SBATCH --constraint=avx2\n")
    out = tmp_path / "grades"
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--seed", "3", "--emit", "slurm", "--shards", "2",
                  "--partition", "gpu", "--account", "cs-336", "--shard-time", "1:30:00", "--cpus-per-task", "3",
                  "--mem", "8G", "--gres", "gpu:1", "--sbatch-options", str(extra)], tmp_path,
                 {"PATH": f"{Path(LUMEN_EX).parent}:/usr/bin:/bin"})   # no sbatch needed
    assert proc.returncode == 0, proc.stdout + proc.stderr
    round_dir = out / "slurm" / "round-1"
    assert f"bash {round_dir / 'submit.sh'}" in proc.stdout
    assert not (round_dir / "jobs.json").exists() and not (out / "gradebook.csv").exists()
    plan = json.loads((round_dir / "plan.json").read_text())
    assert plan["shards"] == [["s0", "s1", "s2"], ["s3", "s4"]] and plan["seed"] == 3 and plan["jobs"] == 3
    array = (round_dir / "array.sh").read_text().splitlines()
    for line in ("#SBATCH --array=0-1", "#SBATCH --partition=gpu", "#SBATCH --account=cs-336",
                 "#SBATCH --cpus-per-task=3", "#SBATCH --time=1:30:00", "#SBATCH --mem=8G", "#SBATCH --gres=gpu:1",
                 "#SBATCH --qos=short", "#SBATCH --constraint=avx2", "cd /"):
        assert line in array, (line, array)
    assert array[-1].startswith(f"exec {sys.executable} -I -m lumen_ex.classroom.slurm_task shard {round_dir}")
    merge = (round_dir / "merge.sh").read_text()
    assert "#SBATCH --gres" not in merge and "#SBATCH --partition=gpu" in merge and "slurm_task merge" in merge
    submit = (round_dir / "submit.sh").read_text()
    assert "--dependency=afterany:$array merge.sh" in submit
    assert subprocess.run(["bash", "-n", str(round_dir / "submit.sh")]).returncode == 0
    # The round's shards start from the students' current results (none yet).
    assert sorted(p.name for p in (round_dir / "shards").iterdir()) == ["0", "1"]


def test_options_that_are_not_slurm_values_are_refused_before_anything_is_written(tmp_path):
    subs = _class(tmp_path, 1)
    out = tmp_path / "grades"
    for args in (["--partition", "gpu\n#SBATCH --uid=0"], ["--account", "a b"], ["--mem", "$(id)"],
                 ["--shards", "0"]):
        proc = grade([str(subs), "-e", "1", "--out", str(out), "--emit", "slurm", *args], tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (args, proc.stderr)
        assert not (out / "slurm").exists(), args
    extra = tmp_path / "evil.sbatch"
    extra.write_text("#SBATCH --qos=short\nrm -rf ~\n")
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--emit", "slurm", "--sbatch-options", str(extra)],
                 tmp_path)
    assert proc.returncode == 2 and f"{extra}:2 is not an #SBATCH line" in proc.stderr, proc.stderr
    assert not (out / "slurm").exists()
    extra.write_text("#SBATCH --comment=`id`\n")
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--emit", "slurm", "--sbatch-options", str(extra)],
                 tmp_path)
    assert proc.returncode == 2 and "is not an #SBATCH line" in proc.stderr, proc.stderr
    spaced = grade([str(subs), "-e", "1", "--out", str(tmp_path / "my grades"), "--emit", "slurm"], tmp_path)
    assert spaced.returncode == 2 and "cannot carry this path" in spaced.stderr, spaced.stderr
    both = grade([str(subs), "-e", "1", "--out", str(out), "--cluster", "slurm", "--emit", "k8s"], tmp_path)
    assert both.returncode == 2 and "neither --emit k8s nor --collect" in both.stderr


def test_no_sandbox_is_refused_on_the_login_node_and_by_the_task(tmp_path):
    """Without bubblewrap (or docker) on PATH, the login node refuses to submit, and a task on a node
    without one refuses to grade, saying why in its task.json, rather than run the code unisolated."""
    subs = _class(tmp_path, 2)
    out = tmp_path / "grades"
    no_sandbox = {"PATH": str(Path(LUMEN_EX).parent)}
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--cluster", "slurm"], tmp_path, no_sandbox)
    assert proc.returncode == 2 and "refuses the unisolated mode: no sandbox is available" in proc.stderr, proc.stderr
    assert not (out / "slurm").exists()
    # A round written where bwrap is (--emit), run by a task on a node where it is not.
    emitted = grade([str(subs), "-e", "1", "--out", str(out), "--emit", "slurm", "--shards", "1"], tmp_path)
    assert emitted.returncode == 0, emitted.stderr
    round_dir = out / "slurm" / "round-1"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_"))}
    task = subprocess.run([sys.executable, "-I", "-m", "lumen_ex.classroom.slurm_task", "shard", str(round_dir), "0"],
                          env={**env, **no_sandbox}, cwd="/", capture_output=True, text=True, timeout=300)
    assert task.returncode == 2, task.stdout + task.stderr
    record = json.loads((round_dir / "shards" / "0" / "task.json").read_text())
    assert "no sandbox is available" in record["refused"] and not record.get("finished"), record
    assert not list((round_dir / "shards" / "0").glob("results/*/*.json"))
    status = grade([str(subs), "-e", "1", "--out", str(out), "--status"], tmp_path)
    assert "shard 0 (2 students): refused: batch grading refuses the unisolated mode" in status.stdout, status.stdout


def test_only_whole_results_are_taken_in(tmp_path):
    """A result whose record does not match it (a task killed between the two writes) stays out of DIR."""
    from lumen_ex.classroom import slurm_rounds

    out = tmp_path / "grades"
    round_dir = slurm_rounds.new_round(out)
    (round_dir / "plan.json").write_text(json.dumps({"format": 1, "shards": [["ann", "ben"]]}))
    for key, matches in (("ann", True), ("ben", False)):
        folder = round_dir / "shards" / "0" / "results" / key
        folder.mkdir(parents=True)
        doc = json.dumps({"status": "pass", "who": key}) + "\n"
        (folder / "01-attention.json").write_text(doc)
        digest = hashlib.sha256((doc if matches else doc + " ").encode()).hexdigest()
        (folder / "01-attention.grading.json").write_text(json.dumps({"fingerprint": {}, "result_sha256": digest}))
    assert slurm_rounds.collect(out) == 1
    assert json.loads((out / "results" / "ann" / "01-attention.json").read_text())["who"] == "ann"
    assert not (out / "results" / "ben").exists()
    slurm_rounds.mark_collected(round_dir)
    (out / "results" / "ann" / "01-attention.json").unlink()
    assert slurm_rounds.collect(out) == 0      # a collected round is never taken in again


# Runs argv[1:] in a user namespace of its own that maps uids and gids 0-65535 as they are (so root
# stays root, and the sandbox's uid exists) and allows no further user namespace in it.
NO_USER_NAMESPACES = r"""
import ctypes, os, sys
ready_r, ready_w = os.pipe()
mapped_r, mapped_w = os.pipe()
pid = os.fork()
if pid == 0:
    if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) != 0:     # CLONE_NEWUSER
        os._exit(90)
    os.write(ready_w, b"u")
    os.read(mapped_r, 1)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
    os.execv(sys.argv[1], sys.argv[1:])
os.read(ready_r, 1)
for name in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{name}", "w") as f:
        f.write("0 0 65536")
os.write(mapped_w, b"m")
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_node_that_forbids_user_namespaces_refuses_to_grade(tmp_path):
    """The task runs where no user namespace can be made (a user namespace of its own whose
    max_user_namespaces is 0, as on a node with them switched off): bwrap cannot build a sandbox,
    and the task refuses to grade, saying so and what the admin can enable, rather than run the
    students' code unisolated."""
    if os.geteuid() != 0:
        pytest.skip("needs root to map the ids of a user namespace with no room for more")
    subs = _class(tmp_path, 2)
    out = tmp_path / "grades"
    emitted = grade([str(subs), "-e", "1", "--out", str(out), "--emit", "slurm", "--shards", "1", "--sandbox",
                     "bwrap"], tmp_path)
    assert emitted.returncode == 0, emitted.stderr
    round_dir = out / "slurm" / "round-1"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_"))}
    task = subprocess.run([sys.executable, "-I", "-c", NO_USER_NAMESPACES, sys.executable, "-I", "-m",
                           "lumen_ex.classroom.slurm_task", "shard", str(round_dir), "0"],
                          env=env, cwd="/", capture_output=True, text=True, timeout=300)
    assert task.returncode == 2, task.stdout + task.stderr
    refused = json.loads((round_dir / "shards" / "0" / "task.json").read_text())["refused"]
    assert "bwrap cannot create a sandbox here" in refused and "max_*_namespaces exceeded" in refused, refused
    assert "Enable unprivileged user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1" in refused, refused
    assert not list((round_dir / "shards" / "0").glob("results/*/*.json"))
