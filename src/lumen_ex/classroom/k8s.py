"""``lumen-ex grade --emit k8s``: grade a class on an existing Kubernetes cluster instead of here.

Writes, under DIR/k8s/:

- ``volume/``: what goes on the shared volume. ``submissions/<i>/`` is student i's throwaway
  workspace (made exactly as ``lumen-ex grade`` makes it); ``results/<i>/`` is where pod i writes.
- ``index.json``: index -> student, and the exercises that could not be put in a workspace (they are
  recorded by ``--collect`` as they would be locally, without running anything).
- ``job.json``: a batch/v1 Job, ``completionMode: Indexed``, one submission per index. Each pod runs
  the grader image's entry point (``lumen-ex-container``, docs/docker.md) once per exercise with its own
  submission mounted read-only at /workspace (``subPathExpr`` on ``$(JOB_COMPLETION_INDEX)``: a pod
  sees no other student's files) and its results folder at /results.
- ``networkpolicy.json``: no ingress, no egress for the job's pods (the equivalent of
  ``--network none``, where the cluster's network plugin enforces policies).
- ``pvc.json``: a ReadWriteMany claim for the shared volume (or point ``claimName`` at your own), of
  the storage class ``--storage-class`` names (else the cluster's default).
- ``helper-pod.json`` and ``copy-results.sh``: a pod that only mounts the shared volume (to copy the
  volume in with ``kubectl cp`` before the Job, and the results out after it), and the script that
  copies ``results/`` out into a local folder and removes the pod.

One lost pod never fails the class: each index has its own retries (``backoffLimitPerIndex``), the
Job goes on whatever number of indexes fail (``maxFailedIndexes`` = the number of students), and its
``podFailurePolicy`` does not count a pod that was evicted or preempted (condition
``DisruptionTarget``: it is simply run again) and counts an out-of-memory kill (exit code 137) as one
retry of that index alone. An index that still fails is graded ``error`` ("no result from the
cluster job") by ``--collect``; the others are kept. These fields need Kubernetes 1.29 or later.

The image is referenced by digest (``REPO@sha256:...``): every pod runs exactly the image that was
built and tested, whatever a tag points at later. A tag is resolved through the local docker's
``RepoDigests`` (the image must have been pushed or pulled); otherwise the command refuses.

Pod Security: the pods need the ``baseline`` level (namespace label
``pod-security.kubernetes.io/enforce: baseline``), not ``restricted``: the harness runs as root
(``runAsNonRoot: false``) and adds the capabilities SETUID, SETGID and KILL to start the learner's
worker as the unprivileged ``lumen-worker`` user and to kill it, and ``restricted`` forbids both
(it allows adding only NET_BIND_SERVICE and requires a non-root user). ``baseline`` allows those
three capabilities, and everything else the pod does is within ``restricted`` anyway (no privilege
escalation, the runtime's seccomp profile, every other capability dropped, no host namespaces or
host paths).

The pod's security context mirrors the docker backend: a read-only root file system, no privilege
escalation, every capability dropped except SETUID and SETGID (the harness starts the learner's
worker as the unprivileged ``lumen-worker`` user) and KILL (to kill it), the runtime's default
seccomp profile, no service-account token. The harness itself must start as root to drop to that
user, so ``runAsNonRoot`` is false for the container: it is root without any other capability.

Then ``lumen-ex grade SUBMISSIONS --out DIR --all --collect <the volume's results folder>`` reads
results/<i>/<exercise>/result.json back into DIR/results and writes the gradebook and report.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from lumen_ex.classroom.batch_types import GradeRequest, Outcome
from lumen_ex.classroom.entries import discover
from lumen_ex.classroom.store import load_document, record, result_path
from lumen_ex.classroom.submissions import prepare
from lumen_ex.classroom.ungraded import grader_error_result, unpreparable_result
from lumen_ex.core import catalog as catalog_mod
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.errors import UsageError
from lumen_ex.core.options import SEED_ENV
from lumen_ex.core.results import RunResult, SandboxInfo
from lumen_ex.image import engine
from lumen_ex.image.tag import default_ref

K8S = "k8s"
INDEX_ENV = "JOB_COMPLETION_INDEX"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
HARNESS_MEMORY_MB = 1024
MARGIN_S = 60
RETRIES_PER_INDEX = 1             # an out-of-memory kill is retried once, for that student only
OOM_EXIT_CODE = 137               # 128 + SIGKILL: what the kernel's out-of-memory killer leaves
POD_SECURITY_LEVEL = "baseline"   # see the module's docstring: root + SETUID, SETGID, KILL
_DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")


def job_name(students: list[str], exercises: list[Exercise], base: str) -> str:
    digest = hashlib.sha256(json.dumps([students, [e.slug for e in exercises]]).encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:30] or "class"
    return f"lumen-ex-grade-{slug}-{digest}".replace("--", "-")


def pod_seconds(exercises: list[Exercise]) -> int:
    return int(sum(ex.times.startup_seconds + ex.times.run_seconds + MARGIN_S for ex in exercises))


POD_SCRIPT = """\
set -u
chmod 0700 /run/lumen
chmod 1777 /tmp
status=0
for spec in $LUMEN_EX_EXERCISES; do
  number=${spec%%:*}
  folder=${spec#*:}
  mkdir -p -m 0700 "/results/$folder"
  lumen-ex-container "$number" --device "$LUMEN_EX_DEVICE" --workspace /workspace --results "/results/$folder" || status=1
done
exit $status
"""


def failure_policy() -> dict:
    """The Job's podFailurePolicy: an evicted or preempted pod is not counted (it runs again), an
    out-of-memory kill counts one retry of that index (backoffLimitPerIndex)."""
    return {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "Count", "onExitCodes": {"containerName": "grade", "operator": "In", "values": [OOM_EXIT_CODE]}},
    ]}


def resolve_image(image: str) -> str:
    """``image`` as ``REPO@sha256:...``: as given when it is a digest reference, else the digest the
    local docker knows for it (RepoDigests); UsageError when none is known."""
    if _DIGEST.fullmatch(image):
        return image
    repo = image.split("@")[0]
    repo = repo.rsplit(":", 1)[0] if ":" in repo.rsplit("/", 1)[-1] else repo
    for digest in _repo_digests(image):
        if digest.split("@")[0] == repo:
            return digest
    raise UsageError(f"the image {image} is not known by digest here",
                     "Push it to your registry (docker push) and pass --image REPO@sha256:<digest> "
                     "(docker image inspect --format '{{json .RepoDigests}}' IMAGE shows it)")


def _repo_digests(image: str) -> list[str]:
    try:
        answer = engine.docker("image", "inspect", "--format", "{{json .RepoDigests}}", image, timeout=30)
        return json.loads(answer.out) if answer.ok else []
    except Exception:  # noqa: BLE001  no docker here: the caller refuses with the reason
        return []


def manifests(name: str, *, count: int, exercises: list[Exercise], image: str, parallelism: int,
              claim: str, device: str = "cpu", seed: int | None = None, timeout: float | None = None,
              storage_class: str | None = None) -> dict:
    """The Job, NetworkPolicy, PersistentVolumeClaim and helper Pod, as plain dicts (JSON-ready)."""
    labels = {"app.kubernetes.io/name": "lumen-ex-container", "app.kubernetes.io/instance": name}
    memory_mb = max(ex.limits.memory_mb for ex in exercises) + HARNESS_MEMORY_MB
    per_pod = int(timeout * len(exercises)) if timeout else pod_seconds(exercises)
    parallelism = max(1, min(parallelism, count))
    env = [
        {"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}},
        {"name": "LUMEN_EX_EXERCISES", "value": " ".join(f"{ex.number}:{ex.dir}" for ex in exercises)},
        {"name": "LUMEN_EX_DEVICE", "value": device if device in ("cpu", "cuda") else "cpu"},
        {"name": "TMPDIR", "value": "/run/lumen"},
    ]
    if seed is not None:
        env.append({"name": SEED_ENV, "value": str(seed)})
    container: dict[str, Any] = {
        "name": "grade",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", POD_SCRIPT],
        "env": env,
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,         # root, to start the worker as lumen-worker; no other capability
            "privileged": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["SETUID", "SETGID", "KILL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resources": {
            "requests": {"cpu": "1", "memory": f"{memory_mb}Mi", "ephemeral-storage": "64Mi"},
            "limits": {"cpu": "2", "memory": f"{memory_mb}Mi", "ephemeral-storage": "256Mi"},
        },
        "volumeMounts": [
            {"name": "shared", "mountPath": "/workspace", "subPathExpr": f"submissions/$({INDEX_ENV})",
             "readOnly": True},
            {"name": "shared", "mountPath": "/results", "subPathExpr": f"results/$({INDEX_ENV})"},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "run", "mountPath": "/run/lumen"},
        ],
    }
    if device == "cuda":
        container["resources"]["limits"]["nvidia.com/gpu"] = "1"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": count,
            "parallelism": parallelism,
            "backoffLimitPerIndex": RETRIES_PER_INDEX,
            "maxFailedIndexes": count,
            "podFailurePolicy": failure_policy(),
            # room for each index's retry, so that the Job's own deadline never ends the class early
            "activeDeadlineSeconds": math.ceil(count / parallelism) * per_pod * (1 + RETRIES_PER_INDEX) + 600,
            "ttlSecondsAfterFinished": 7 * 24 * 3600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "activeDeadlineSeconds": per_pod,
                    "terminationGracePeriodSeconds": 30,
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [
                        {"name": "shared", "persistentVolumeClaim": {"claimName": claim}},
                        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                        {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                    ],
                },
            },
        },
    }
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{name}-no-network", "labels": labels},
        "spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress", "Egress"]},
    }
    pvc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "labels": labels},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "2Gi"}}},
    }
    if storage_class:
        pvc["spec"]["storageClassName"] = storage_class
    return {"job": job, "networkpolicy": policy, "pvc": pvc,
            "helper-pod": helper_pod(name, image=image, claim=claim, labels=labels)}


def helper_pod(name: str, *, image: str, claim: str, labels: dict) -> dict:
    """A pod that mounts the shared volume at /volume and waits: ``kubectl cp`` goes through it (the
    grader image has ``tar``). It runs no learner code; it is as locked down as the Job's pods,
    without even their capabilities, and it stays within the network policy."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-helper"[:63], "labels": {**labels, "app.kubernetes.io/component": "helper"}},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 4 * 3600,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "helper",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/sh", "-c", "sleep 14400"],
                "securityContext": {"runAsUser": 0, "runAsNonRoot": False, "privileged": False,
                                    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE", "FOWNER"]},
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "1", "memory": "256Mi"}},
                "volumeMounts": [{"name": "shared", "mountPath": "/volume"}],
            }],
            "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


COPY_SCRIPT = """\
#!/bin/sh
# Copy the results of the lumen-ex Job {job} out of the shared volume, then remove the helper pod.
# Written by `lumen-ex grade --emit k8s` (src/lumen_ex/classroom/k8s.py). Usage: sh copy-results.sh [DEST]
# DEST defaults to ./cluster-results; then run `lumen-ex grade ... --collect DEST`.
set -eu
dest="${{1:-cluster-results}}"
here="$(cd "$(dirname "$0")" && pwd)"
kubectl apply -f "$here/helper-pod.json"
kubectl wait --for=condition=Ready pod/{pod} --timeout=300s
kubectl cp {pod}:/volume/results "$dest"
kubectl delete pod {pod} --wait=false
echo "results copied to $dest: run lumen-ex grade SUBMISSIONS --all --out DIR --collect $dest"
"""


def emit_manifests(submissions: Path, out: Path, exercises: list[Exercise], *, image: str | None = None,
                   parallelism: int = 4, device: str = "cpu", students: tuple[str, ...] = (),
                   timeout: float | None = None, seed: int | None = None,
                   storage_class: str | None = None) -> list[Path]:
    """Prepare the shared volume's contents and write the manifests; return the files written."""
    if not Path(submissions).is_dir():
        raise UsageError(f"{submissions} is not a folder", "Pass the folder holding one entry per student")
    cat = catalog_mod.load()
    subs, _ = discover(Path(submissions), exclude=(Path(out),))
    if students:
        subs = [s for s in subs if s.student in set(students)]
    if not subs:
        raise UsageError(f"no submissions in {submissions}", "It must hold one folder or .zip per student")
    if image is None:
        image = default_ref()
    image = resolve_image(image)
    base = Path(out) / K8S
    volume = base / "volume"
    if volume.exists():
        shutil.rmtree(volume)
    (volume / "results").mkdir(parents=True)
    (volume / "submissions").mkdir()
    index: dict = {"image": image, "exercises": [ex.number for ex in exercises], "students": [],
                   "missing": {}, "refused": {}}
    with tempfile.TemporaryDirectory(prefix=".k8s-", dir=base) as scratch:
        for i, sub in enumerate(subs):
            prepared = prepare(sub, exercises, cat, Path(scratch))
            target = volume / "submissions" / str(i)
            shutil.move(str(prepared.workspace), target)
            (volume / "results" / str(i)).mkdir(mode=0o755)
            index["students"].append(sub.student)
            if prepared.refused:
                index["refused"][sub.student] = prepared.refused
            if prepared.missing:
                index["missing"][sub.student] = prepared.missing
    for folder in (volume, volume / "submissions", volume / "results"):
        folder.chmod(0o755)
    names = [s.student for s in subs]
    name = job_name(names, exercises, Path(submissions).resolve().name)
    docs = manifests(name, count=len(subs), exercises=exercises, image=image, parallelism=parallelism,
                     claim=f"{name}-volume"[:63], device=device, seed=seed, timeout=timeout,
                     storage_class=storage_class)
    written = []
    for key, doc in docs.items():
        path = base / f"{key}.json"
        write_atomically(path, json.dumps(doc, indent=2) + "\n")
        written.append(path)
    script = base / "copy-results.sh"
    write_atomically(script, COPY_SCRIPT.format(job=name, pod=docs["helper-pod"]["metadata"]["name"]))
    script.chmod(0o755)
    written.append(script)
    index["job"] = name
    index["pod_security"] = POD_SECURITY_LEVEL
    write_atomically(base / "index.json", json.dumps(index, indent=2) + "\n")
    written += [base / "index.json", volume]
    return written


def collect_results(req: GradeRequest, results_dir: Path) -> Outcome:
    """Record the cluster's result documents (results/<i>/<exercise dir>/result.json) as local ones."""
    index_path = Path(req.out) / K8S / "index.json"
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        raise UsageError(f"no {index_path}", "Run `lumen-ex grade ... --emit k8s --out DIR` first, with this DIR") from None
    subs, notes = discover(Path(req.submissions), exclude=(Path(req.out),))
    by_name = {s.student: s for s in subs}
    listed = [by_name[n] for n in index["students"] if n in by_name]
    outcome = Outcome(listed, 0, 0, notes=notes, sandbox="docker")
    info = SandboxInfo("docker", True, {}, f"graded by the Kubernetes job {index.get('job', '')}")
    for i, student in enumerate(index["students"]):
        for ex in req.exercises:
            kept = load_document(result_path(req.out, student, ex))
            if not req.force and kept is not None and kept.get("status") != "error":   # errors are retried
                outcome.resumed += 1
                continue
            result = unpreparable_result(ex, index.get("refused", {}).get(student, ""),
                                         index.get("missing", {}).get(student, {}), sandbox=info, device=req.device)
            if result is None:
                result = _cluster_result(Path(results_dir) / str(i) / ex.dir / "result.json", ex, info, req.device, i)
            record(req.out, student, ex, result)
            outcome.graded += 1
    return outcome


def _cluster_result(path: Path, ex: Exercise, info: SandboxInfo, device: str, index: int) -> RunResult:
    try:
        result = RunResult.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return grader_error_result(ex, f"no result from the cluster job for index {index} (the pod failed, "
                                       "was not run, or ran past its deadline)", sandbox=info, device=device, seed=0)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return grader_error_result(ex, f"the cluster's result for index {index} is not a valid result "
                                       f"document ({type(exc).__name__})", sandbox=info, device=device, seed=0)
    if result.exercise.get("number") != ex.number:
        return grader_error_result(ex, f"the cluster's result for index {index} is for another exercise",
                                   sandbox=info, device=device, seed=result.seed)
    return result
