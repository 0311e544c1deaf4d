"""The student-repository workflow (`lumen-ex init --ci github`) and the cluster path
(`lumen-ex grade --emit k8s`, then `--collect`), through the real entry point.

The workflow is parsed by a real YAML parser (PyYAML, from whichever Python on this machine has it:
lumen-ex itself does not depend on it) and its check step is run here as GitHub would run it. The
manifests are parsed back, validated against a strict subset of the Kubernetes API
(tests/schemas/k8s-subset.schema.json) and checked field by field; where docker and a grader image
are present, one index of the Job is run for real: the pod's command, environment, mounts and
security settings, translated to `docker run`.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import CORPORA, LUMEN_EX
from docker_support import needs_docker
from helpers.classes import grade, make_class
from helpers.cli import run

from lumen_ex.core import catalog

CAT = catalog.load()
EX1 = CAT.find(1)
SCHEMAS = Path(__file__).parents[1] / "schemas"
IMAGE = "registry.example/lumen-ex-grader@sha256:" + "ab" * 32


def yaml_python() -> str | None:
    for python in ("/usr/bin/python3", shutil.which("python3")):
        if python and subprocess.run([python, "-c", "import yaml"], capture_output=True).returncode == 0:
            return python
    return None


def load_yaml(path: Path) -> dict:
    python = yaml_python()
    if python is None:
        pytest.skip("no Python with PyYAML on this machine to parse the workflow")
    proc = subprocess.run([python, "-c", "import json, sys, yaml; "
                           "print(json.dumps(yaml.safe_load(open(sys.argv[1])), default=str))", str(path)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


# -- the GitHub workflow of a student repository ---------------------------------------------------


@pytest.mark.slow
def test_init_ci_github_writes_a_workflow_that_runs(tmp_path):
    proc = run(["init", "repo", "--ci", "github"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "CI: .github/workflows/lumen-ex.yml" in proc.stdout
    repo = tmp_path / "repo"
    path = repo / ".github" / "workflows" / "lumen-ex.yml"
    text = path.read_text()
    assert "not tamper-proof" in text or "feedback for you, not a grade" in text
    wf = load_yaml(path)
    assert set(wf.get("on") or wf.get("true")) == {"push", "pull_request", "workflow_dispatch",   # PyYAML reads `on` as true
                                                   "repository_dispatch"}                         # GitHub Classroom's trigger
    assert wf["permissions"]["contents"] == "read"
    assert wf["name"] == "Autograding Tests"
    job = wf["jobs"]["run-autograding-tests"]
    assert job["runs-on"] == "ubuntu-latest" and job["env"]["LUMEN_EX_SPEC"] == "${{ vars.LUMEN_EX_SPEC || '' }}"
    steps = job["steps"]
    install = next(s for s in steps if s.get("id") == "install")
    lines = install["run"].splitlines()
    assert lines[0] == "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert lines[1].startswith('if [ -z "$LUMEN_EX_SPEC" ]; then echo "::error')   # no spec: a clear error
    assert lines[2] == 'python -m pip install "$LUMEN_EX_SPEC"'        # the CPU build of torch comes first
    checks = [s for s in steps if s.get("run", "").startswith("lumen-ex check")]
    assert [s["run"] for s in checks] == [f"lumen-ex check {ex.number} --format github --device cpu"
                                          for ex in CAT.exercises]
    assert all("steps.install.outcome == 'success'" in s["if"] and "!cancelled()" in s["if"] for s in checks)
    reporter = steps[-1]
    assert reporter["uses"] == "classroom-resources/autograding-grading-reporter@v1"
    ids = [s["id"] for s in checks]
    assert reporter["with"]["runners"] == ",".join(ids)
    assert reporter["env"] == {f"{i.upper()}_RESULTS": f"${{{{ steps.{i}.outputs.result }}}}" for i in ids}
    assert all(re.fullmatch(r"[A-Z0-9_]+", key) for key in reporter["env"])
    assert (repo / ".gitignore").read_text().startswith(".lumen-ex/")

    # run the first check step as the runner would: in the repository, with GitHub's files set
    shutil.copyfile(EX1.reference_path, repo / EX1.path)
    argv = shlex.split(checks[0]["run"])
    output = tmp_path / "github_output"
    env = {**os.environ, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "NO_COLOR": "1"}
    step = subprocess.run([LUMEN_EX, *argv[1:], "--sandbox", "none"], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)
    assert step.returncode == 0, step.stdout + step.stderr
    result = dict(line.split("=", 1) for line in output.read_text().splitlines())["result"]
    assert json.loads(base64.b64decode(result))["status"] == "pass"
    assert "::notice title=lumen-ex check 1 (attention)%3A Points 10/10::" in step.stdout


# -- the Kubernetes Indexed Job ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("k8s")
    subs = make_class(root)
    out = root / "out"
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--emit", "k8s", "--jobs", "3",
                  "--image", IMAGE], root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, subs, out, proc


def test_emit_k8s_writes_valid_manifests(emitted):
    jsonschema = pytest.importorskip("jsonschema")
    root, subs, out, proc = emitted
    base = out / "k8s"
    assert sorted(p.name for p in base.iterdir()) == ["copy-results.sh", "helper-pod.json", "index.json", "job.json",
                                                      "networkpolicy.json", "pvc.json", "volume"]
    assert not (out / "results").exists(), "--emit k8s must not grade"
    schema = json.loads((SCHEMAS / "k8s-subset.schema.json").read_text())
    docs = {name: json.loads((base / f"{name}.json").read_text())
            for name in ("job", "networkpolicy", "pvc", "helper-pod")}
    for doc in docs.values():
        jsonschema.validate(doc, schema)
    job, policy, pvc = docs["job"], docs["networkpolicy"], docs["pvc"]
    index = json.loads((base / "index.json").read_text())
    assert index["students"] == ["alice", "bob", "carol", "dave", "eve"]

    spec = job["spec"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 5 and spec["parallelism"] == 3
    assert spec["backoffLimitPerIndex"] >= 1 and spec["activeDeadlineSeconds"] > spec["template"]["spec"]["activeDeadlineSeconds"]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False and sc["capabilities"] == {"drop": ["ALL"], "add": ["SETUID", "SETGID", "KILL"]}
    assert sc["runAsNonRoot"] is False and sc["runAsUser"] == 0    # the harness must become lumen-worker
    limits = container["resources"]["limits"]
    assert limits["cpu"] == "2" and limits["memory"] == f"{EX1.limits.memory_mb + 1024}Mi"
    assert container["resources"]["requests"]["memory"] == limits["memory"]

    # one submission per index, mounted read-only; results to the shared volume
    env = {e["name"]: e for e in container["env"]}
    assert env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["LUMEN_EX_EXERCISES"]["value"] == f"{EX1.number}:{EX1.dir}"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert {m["name"] for m in mounts.values()} <= set(volumes)
    assert len(mounts) == len(container["volumeMounts"])
    assert mounts["/workspace"] == {"name": "shared", "mountPath": "/workspace",
                                    "subPathExpr": "submissions/$(JOB_COMPLETION_INDEX)", "readOnly": True}
    assert mounts["/results"]["subPathExpr"] == "results/$(JOB_COMPLETION_INDEX)" and not mounts["/results"].get("readOnly")
    for m in mounts.values():
        for var in re.findall(r"\$\((\w+)\)", m.get("subPathExpr", "")):
            assert var in env, f"{var} is used in a subPathExpr but not defined in the container's env"
    assert volumes["shared"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert {volumes[mounts[p]["name"]]["emptyDir"]["medium"] for p in ("/tmp", "/run/lumen")} == {"Memory"}
    assert "ReadWriteMany" in pvc["spec"]["accessModes"]

    # no network for the job's pods
    assert policy["spec"]["podSelector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]

    # the shared volume: student i's throwaway workspace under submissions/<i>
    volume = base / "volume"
    assert sorted(p.name for p in (volume / "submissions").iterdir()) == ["0", "1", "2", "3", "4"]
    assert (volume / "submissions" / "1" / EX1.path).read_text() == \
        (CORPORA["attention"] / "buggy" / "no_scale.py").read_text()           # bob
    assert (volume / "submissions" / "0" / "lumen-ex.toml").is_file()
    assert index["missing"]["carol"] == {EX1.slug: f"no {EX1.path} in the submission"}
    assert "outside its folder" in index["refused"]["eve"]
    assert oct((volume / "submissions" / "1" / EX1.path).stat().st_mode & 0o777) == "0o644"


def docker_run_argv(container: dict, pod: dict, volume: Path, index: int, image: str) -> list[str]:
    """The pod of ``index``, as a docker command line: same command, env, mounts and security."""
    sc = container["securityContext"]
    argv = ["docker", "run", "--rm", "--network", "none", "--user", f"{sc['runAsUser']}:0",
            "--memory", container["resources"]["limits"]["memory"].replace("Mi", "m"),
            "--cpus", container["resources"]["limits"]["cpu"], "--cap-drop", "ALL"]
    argv += [f"--cap-add={c}" for c in sc["capabilities"]["add"]]
    if sc["readOnlyRootFilesystem"]:
        argv.append("--read-only")
    if not sc["allowPrivilegeEscalation"]:
        argv += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for m in container["volumeMounts"]:
        v = volumes[m["name"]]
        if "emptyDir" in v:
            argv += ["--tmpfs", f"{m['mountPath']}:size={v['emptyDir']['sizeLimit'].replace('Mi', 'm')}"]
        else:
            sub = m["subPathExpr"].replace("$(JOB_COMPLETION_INDEX)", str(index))
            argv += ["--mount", f"type=bind,source={volume / sub},target={m['mountPath']}"
                     + (",readonly" if m.get("readOnly") else "")]
    for e in container["env"]:
        value = str(index) if e["name"] == "JOB_COMPLETION_INDEX" else e["value"]
        argv += ["--env", f"{e['name']}={value}"]
    return argv + ["--entrypoint", container["command"][0], image, *container["command"][1:]]


@needs_docker
@pytest.mark.slow
def test_one_index_of_the_job_runs_in_the_grader_image_and_is_collected(emitted):
    from lumen_ex.image import tag as image_mod

    root, subs, out, _ = emitted
    image = image_mod.status().ref          # the image of exactly this lumen-ex (needs_docker checks it)
    job = json.loads((out / "k8s" / "job.json").read_text())
    pod = job["spec"]["template"]["spec"]
    volume = out / "k8s" / "volume"
    for index in (0, 1):               # alice (correct) and bob (no scale)
        argv = docker_run_argv(pod["containers"][0], pod, volume, index, image)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (volume / "results" / str(index) / EX1.dir / "result.json").is_file()
    collected = grade([str(subs), "-e", "1", "--out", str(out), "--collect", str(volume / "results")], root)
    assert collected.returncode == 3, collected.stdout + collected.stderr     # dave's pod never ran, eve refused
    book = {r["student"]: r for r in csv.DictReader(io.StringIO((out / "gradebook.csv").read_text()))}
    assert book["alice"]["status"] == "pass" and float(book["alice"][EX1.slug]) == EX1.max_score
    assert book["bob"]["status"] == "fail" and "no-scale" in book["bob"]["first_failure"]
    assert book["carol"]["status"] == "fail" and "no 01-attention/attention.py" in book["carol"]["first_failure"]
    assert book["dave"]["status"] == "error" and "no result from the cluster job for index 3" in book["dave"]["first_failure"]
    assert book["eve"]["status"] == "fail"      # her unsafe zip is refused: charged to her, not the grader
    alice = json.loads((out / "results" / "alice" / f"{EX1.dir}.json").read_text())
    assert alice["sandbox"]["backend"] == "docker" and alice["status"] == "pass"
