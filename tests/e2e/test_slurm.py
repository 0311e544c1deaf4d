"""Grading a class on a real one-node Slurm cluster, as an unprivileged user (issue "Slurm").

The module's fixture starts munged, slurmctld and slurmd (Debian's ``munge`` and ``slurm-wlm``, which
.ci/run installs) on localhost, with a configuration of its own in a temporary folder (its own ports,
state, logs and munge socket: nothing under /etc is read or changed), and stops them by pid. Every
``lumen-ex`` here runs as uid 65534 (nobody), the jobs too, with an interpreter that user can reach:
a venv of Debian's python3.11 that adds this checkout's site-packages (the checkout's own
interpreter may live under /root). The module skips, saying why, without root, without the Slurm
and munge programs, without that interpreter, or when uid 65534 cannot read this checkout; a
cluster that does not come up once they are all there is a failure.

A class of 23 students (correct, buggy and hostile files, a zip, a git checkout, and one correct
but slow file) is graded locally and through the cluster, with one class seed: the gradebooks must
be identical. Then a round whose last task is cancelled mid-shard (``scancel`` of that array task):
the merge job still writes the gradebook, with that shard's unfinished check missing; the same
command run again submits exactly the unfinished check, and the gradebook is identical again.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import pytest
from conftest import CORPORA, CORPUS, REFERENCES, bwrap_ok
from helpers.classes import EX1, SHA, put, zip_folder

pytestmark = pytest.mark.slow

NOBODY = 65534
SEED = 11
DEBIAN_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")
# Correct but slow: every call sleeps, so that its check takes seconds and its task can be cancelled mid-way.
# (The import comes after the reference's text: a `from __future__` import must be a file's first line.)
SLOW = REFERENCES["attention"].read_text().replace("def scaled_dot_product_attention(", "def _sdpa(", 1) + '''

import time as _time


def scaled_dot_product_attention(q, k, v, mask=None):
    _time.sleep(0.2)
    return _sdpa(q, k, v, mask)
'''


def _missing() -> str:
    if os.geteuid() != 0:
        return "starting slurmd (which runs jobs as their users) needs root"
    absent = [p for p in PROGRAMS if shutil.which(p, path=os.environ.get("PATH", "") + ":/usr/sbin") is None]
    if absent:
        return f"no {', '.join(absent)} (apt-get install slurm-wlm munge)"
    if not DEBIAN_PYTHON.exists():
        return f"no {DEBIAN_PYTHON} for the unprivileged user's interpreter"
    if not bwrap_ok():
        return "bubblewrap is unavailable"
    return ""


def _program(name: str) -> str:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin") or name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """The running daemons, the folder everything lives in, and how to run things as uid 65534."""

    def __init__(self, root: Path):
        self.root = root
        self.conf = root / "slurm.conf"
        self.python = root / "venv" / "bin" / "python"
        self.procs: list[subprocess.Popen] = []

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_", "SLURM_"))}
        return {**keep, "SLURM_CONF": str(self.conf), "HOME": str(self.root / "home"), "COLUMNS": "120",
                "NO_COLOR": "1", "TERM": "dumb", "LUMEN_EX_CHECK_SERVER": "off"}

    def as_nobody(self, args: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(args, user=NOBODY, group=NOBODY, extra_groups=[], env=self.env(), cwd=self.root,
                              capture_output=True, text=True, timeout=timeout)

    def lumen_ex(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return self.as_nobody([str(self.python), "-I", "-m", "lumen_ex.cli.main", *args], timeout=timeout)

    def slurm(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([_program(args[0]), *args[1:]], env=self.env(), capture_output=True, text=True,
                              timeout=60)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n" + p.read_text()[-1500:] for p in sorted((self.root / "log").glob("*.log")))


def _start(root: Path) -> Cluster:
    cluster = Cluster(root)
    for sub in ("log", "state", "spool", "munge", "home", "work"):
        (root / sub).mkdir()
    root.chmod(0o755)
    (root / "home").chmod(0o777)
    os.chown(root / "work", NOBODY, NOBODY)
    # The unprivileged user's interpreter: Debian's python3.11 in a venv that adds this checkout's site-packages.
    subprocess.run([str(DEBIAN_PYTHON), "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    site_dir = Path(sysconfig.get_paths(vars={"base": str(root / "venv")})["purelib"])
    (site_dir / "lumen_ex_checkout.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    probe = cluster.as_nobody([str(cluster.python), "-I", "-c", "import lumen_ex, torch"], timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"uid {NOBODY} cannot import lumen_ex and torch from this checkout: "
                    f"{(probe.stderr.strip().splitlines() or ['?'])[-1]}")
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_sock = root / "munge" / "munge.socket"
    host = socket.gethostname().split(".")[0]
    cluster.conf.write_text("\n".join([
        "ClusterName=lumentest", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}", "SlurmUser=root", "AuthType=auth/munge", f"AuthInfo=socket={munge_sock}",
        "CredType=cred/munge", f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={root / 'log' / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory", "ReturnToService=2", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        f"NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory=4000 State=UNKNOWN",
        f"PartitionName=lumen Nodes={host} Default=YES MaxTime=INFINITE State=UP", ""]))
    cluster.conf.chmod(0o644)
    daemons = [[_program("munged"), "-F", "--force", f"--key-file={key}", f"--socket={munge_sock}",
                f"--pid-file={root / 'munge' / 'munged.pid'}", f"--log-file={root / 'log' / 'munged.log'}",
                f"--seed-file={root / 'munge' / 'munge.seed'}"],
               [_program("slurmctld"), "-D", "-f", str(cluster.conf)],
               [_program("slurmd"), "-D", "-f", str(cluster.conf)]]
    for argv in daemons:
        cluster.procs.append(subprocess.Popen(argv, env=cluster.env(), stdout=subprocess.DEVNULL,
                                              stderr=open(root / "log" / f"{Path(argv[0]).name}.err.log", "w")))
        if "munged" in argv[0]:
            _wait(lambda: munge_sock.exists(), 20, cluster, "munged did not make its socket")
            (root / "munge").chmod(0o755)
    _wait(lambda: "idle" in cluster.slurm("sinfo", "-h", "-o", "%T").stdout, 60, cluster, "the node is not idle")
    return cluster


def _wait(ready, timeout: float, cluster: Cluster, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what}\n{cluster.logs()}"
        time.sleep(0.25)


def _stop(cluster: Cluster) -> None:
    for proc in reversed(cluster.procs):     # slurmd, slurmctld, then munged, each by its pid
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)


@pytest.fixture(scope="module")
def cluster():
    why = _missing()
    if why:
        pytest.skip(why)
    root = Path(tempfile.mkdtemp(prefix="lumen-ex-slurm-", dir="/tmp"))
    cluster = None
    try:
        cluster = _start(root)
        yield cluster
    finally:
        if cluster is not None:
            _stop(cluster)
        shutil.rmtree(root, ignore_errors=True)


def make_class(work: Path) -> Path:
    """23 students: 5 correct, 12 buggy, 3 hostile, a zip, a git checkout, and a slow correct one last."""
    subs = work / "class"
    correct = [REFERENCES["attention"], *sorted((CORPORA["attention"] / "correct").glob("*.py"))[:4]]
    for i, path in enumerate(correct):
        put(subs / f"c{i:02d}", EX1.path, path)
    for i, path in enumerate(sorted((CORPORA["attention"] / "buggy").glob("*.py"))[:12]):
        put(subs / f"b{i:02d}", EX1.path, path)
    for name in ("sys_exit", "monkeypatch_comparisons", "subclass_eq_true"):
        put(subs / f"h-{name}", EX1.path, CORPUS / "hostile" / f"{name}.py")
    zip_folder(subs / "y-zip.zip", {"hw/01-attention/attention.py": (CORPORA["attention"] / "buggy" /
                                                                     "no_scale.py").read_text()})
    put(subs / "y-git", EX1.path, REFERENCES["attention"])
    put(subs / "y-git", ".git/HEAD", "ref: refs/heads/main\n")
    put(subs / "y-git", ".git/refs/heads/main", SHA + "\n")
    put(subs / "zz-slow", EX1.path, SLOW)
    for path in [subs, *subs.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    return subs


def _latest_round(out: Path) -> Path:
    return max((out / "slurm").glob("round-*"), key=lambda p: int(p.name.split("-")[1]))


def test_a_class_graded_on_slurm_matches_a_local_run_and_a_cancelled_task_is_resubmitted(cluster):
    """Over 30 s: the class is graded three times (locally, on the cluster, and on the cluster with a
    task cancelled and rerun), and one file sleeps in every call."""
    work = cluster.root / "work"
    subs = make_class(work)
    local = cluster.lumen_ex("grade", str(subs), "-e", "1", "--out", str(work / "local"), "--seed", str(SEED))
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    expected = (work / "local" / "gradebook.csv").read_text()
    rows = expected.splitlines()[1:]
    assert len(rows) == 23 and {r.split(",")[6] for r in rows} == {"pass", "fail"}, expected

    graded = cluster.lumen_ex("grade", str(subs), "-e", "1", "--out", str(work / "slurm"), "--seed", str(SEED),
                              "--cluster", "slurm", "--shards", "4", "--cpus-per-task", "1")
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:] + cluster.logs()
    assert "submitted: job array" in graded.stdout and "checks recorded" in graded.stdout
    assert (work / "slurm" / "gradebook.csv").read_text() == expected
    round_dir = _latest_round(work / "slurm")
    plan = json.loads((round_dir / "plan.json").read_text())
    assert len(plan["shards"]) == 4 and sorted(k for s in plan["shards"] for k in s) == sorted(
        r.split(",")[1] for r in rows)
    for index in range(4):     # every task ran, and ran as uid 65534
        task = json.loads((round_dir / "shards" / str(index) / "task.json").read_text())
        assert task["finished"] and task["refused"] is None, task
    assert (work / "slurm" / "results" / "c00" / "01-attention.json").stat().st_uid == NOBODY
    again = cluster.lumen_ex("grade", str(subs), "-e", "1", "--out", str(work / "slurm"), "--cluster", "slurm")
    assert again.returncode == 0 and "nothing to submit" in again.stdout, again.stdout[-2000:]

    # A round whose last task (it ends with the slow student) is cancelled while it grades.
    out = work / "cancelled"
    sent = cluster.lumen_ex("grade", str(subs), "-e", "1", "--out", str(out), "--seed", str(SEED), "--cluster",
                            "slurm", "--shards", "4", "--cpus-per-task", "1", "--no-wait")
    assert sent.returncode == 0, sent.stdout[-3000:] + sent.stderr[-3000:]
    round_dir = _latest_round(out)
    jobs = json.loads((round_dir / "jobs.json").read_text())
    plan = json.loads((round_dir / "plan.json").read_text())
    last = len(plan["shards"]) - 1
    assert plan["shards"][last][-1] == "zz-slow"
    first_of_last = plan["shards"][last][0]
    slow_results = round_dir / "shards" / str(last) / "results"
    _wait(lambda: (slow_results / first_of_last / "01-attention.grading.json").exists(), 300, cluster,
          "the last shard never recorded its first student")
    cancelled = cluster.slurm("scancel", f"{jobs['array']}_{last}")
    assert cancelled.returncode == 0, cancelled.stderr
    _wait(lambda: not cluster.slurm("squeue", "-h", "-j", f"{jobs['array']},{jobs['merge']}").stdout.strip(), 300,
          cluster, "the jobs did not end")
    book = (out / "gradebook.csv").read_text()         # written by the merge job, which ran all the same
    assert book != expected and next(r for r in book.splitlines() if r.startswith("zz-slow,")).split(",")[6] \
        in ("pending", "missing", ""), book
    status = cluster.lumen_ex("grade", str(subs), "-e", "1", "--out", str(out), "--status")
    assert f"shard {last}" in status.stdout and "did not finish" in status.stdout, status.stdout[-2000:]
    rerun = cluster.lumen_ex("grade", str(subs), "-e", "1", "--out", str(out), "--cluster", "slurm",
                             "--cpus-per-task", "1")
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    second = _latest_round(out)
    assert second != round_dir
    resubmitted = [k for s in json.loads((second / "plan.json").read_text())["shards"] for k in s]
    unfinished = [k for k in plan["shards"][last] if not (slow_results / k / "01-attention.grading.json").exists()]
    assert resubmitted == unfinished and "zz-slow" in resubmitted, (resubmitted, unfinished)
    assert (out / "gradebook.csv").read_text() == expected
