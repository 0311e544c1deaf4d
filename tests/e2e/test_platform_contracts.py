"""The platforms' contracts (docs/classroom.md, Output formats), through the real entry points.

- PrairieLearn: ``gradable: false`` when the file is missing or does not parse, and the record's
  pictures in ``images`` (lumen-ex-platform prairielearn, run as tests/e2e/test_platforms.py runs it).
- Gradescope: test visibility per scoring group from the catalogue, and a skipped test marked.
- GitHub Actions: the workflow `lumen-ex init --ci github` writes, validated against the
  github-workflow JSON Schema from schemastore as the check-jsonschema package vendors it (a test
  extra in pyproject.toml), with the names GitHub Classroom requires and no pip cache.
- Kubernetes: the manifests of `--emit k8s` with per-index retries, a pod failure policy, the image
  by digest, a storage class and the helper pod, against tests/schemas/k8s-subset.schema.json.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path

import pytest
from conftest import CORPORA
from helpers.classes import grade, make_class
from helpers.cli import SYNTAX_ERROR, run
from helpers.pictures import MASK_INVERTED
from helpers.platforms import run_on_host, submission

from lumen_ex.core import catalog
from lumen_ex.feedback.pictures.png import PNG_SIGNATURE

CAT = catalog.load()
EX1 = CAT.find(1)
SCHEMAS = Path(__file__).parents[1] / "schemas"
DIGEST = "registry.example/course/lumen-ex-grader@sha256:" + "0f" * 32


# -- PrairieLearn ----------------------------------------------------------------------------------


def test_prairielearn_not_gradable_when_the_file_is_missing_or_does_not_parse(tmp_path):
    missing = run_on_host("prairielearn", submission(tmp_path / "a", {"notes.md": "hi"}), tmp_path / "a.json", "1")
    assert missing["gradable"] is False and "score" in missing and missing["score"] == 0
    assert missing["format_errors"] == [f"no {EX1.path} in the submission"]

    broken = run_on_host("prairielearn", submission(tmp_path / "b", {"attention.py": SYNTAX_ERROR}),
                         tmp_path / "b.json", "1", "2")            # exercise 2's file is missing too
    assert broken["gradable"] is False
    assert any(e.startswith("your file does not parse: SyntaxError") and "(line " in e
               for e in broken["format_errors"])
    assert any(e.startswith("no 02-kv-cache/kv_cache.py") for e in broken["format_errors"])


@pytest.mark.slow
def test_prairielearn_a_wrong_answer_is_gradable_and_carries_its_pictures(tmp_path):
    doc = run_on_host("prairielearn", submission(tmp_path / "s", {"attention.py": MASK_INVERTED}),
                      tmp_path / "r.json", "1")
    assert doc["gradable"] is True and 0 < doc["score"] < 1 and "format_errors" not in doc
    assert doc["images"], "the failing weights test has a heatmap"
    for image in doc["images"]:
        assert image["url"].startswith("data:image/png;base64,") and "expected | yours | difference" in image["label"]
        assert base64.b64decode(image["url"].split(",", 1)[1], validate=True).startswith(PNG_SIGNATURE)
    per_test = [i for t in doc["tests"] for i in t.get("images", [])]
    assert per_test == doc["images"]


# -- Gradescope --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_gradescope_visibility_per_group_and_a_skipped_test(tmp_path, monkeypatch):
    ex = dataclasses.replace(EX1, visibility={"properties": "after_due_date", "values": "hidden"})
    patched = dataclasses.replace(CAT, exercises=(ex, *CAT.exercises[1:]))
    monkeypatch.setattr(catalog, "load", lambda path=None: patched)
    doc = run_on_host("gradescope", submission(tmp_path / "s", {"attention.py": CORPORA["attention"] / "correct" /
                                                                "where_mask.py"}), tmp_path / "r.json", "1")
    seen = {t["tags"][0]: t["visibility"] for t in doc["tests"]}
    assert seen["properties"] == "after_due_date" and seen["values"] == "hidden" and seen["shapes"] == "visible"
    skipped = [t for t in doc["tests"] if t["extra_data"]["status"] == "skipped"]
    assert skipped, "without a GPU the cuda test is skipped"
    for t in skipped:
        assert t["name"].endswith("(skipped)") and "skipped" in t["tags"] and "status" not in t
        assert t["max_score"] == 0 and t["output"].startswith("skipped")
    assert catalog.validate(patched) == []
    bad = dataclasses.replace(CAT, exercises=(dataclasses.replace(EX1, visibility={"values": "later"}),))
    assert any("visibility" in p for p in catalog.validate(bad))


# -- the GitHub Actions workflow --------------------------------------------------------------------------


def workflow_schema() -> dict:
    resources = pytest.importorskip("importlib.resources")
    pytest.importorskip("check_jsonschema")
    path = resources.files("check_jsonschema.builtin_schemas.vendor") / "github-workflows.json"
    return json.loads(path.read_text())


def test_the_workflow_is_valid_for_github_and_has_the_names_classroom_needs(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("ruamel.yaml")
    spec = "git+https://github.com/ORG/lumen-ex@v0.1.0"
    proc = run(["init", "repo", "--ci", "github", "--lumen-ex-spec", spec], tmp_path)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "repo" / ".github" / "workflows" / "lumen-ex.yml"
    wf = yaml.YAML(typ="safe").load(path.read_text())
    jsonschema.validate(wf, workflow_schema())
    assert wf["name"] == "Autograding Tests" and list(wf["jobs"]) == ["run-autograding-tests"]
    assert "repository_dispatch" in wf["on"]                 # how GitHub Classroom starts a run
    job = wf["jobs"]["run-autograding-tests"]
    assert job["env"]["LUMEN_EX_SPEC"] == f"${{{{ vars.LUMEN_EX_SPEC || '{spec}' }}}}"
    setup = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert "cache" not in setup["with"]                      # no requirements file to key a pip cache on
    install = next(s for s in job["steps"] if s.get("id") == "install")["run"]
    assert 'python -m pip install "$LUMEN_EX_SPEC"' in install and "::error" in install

    refused = run(["init", "other", "--ci", "github", "--lumen-ex-spec", "x' ; rm -rf ~"], tmp_path)
    assert refused.returncode == 2 and not (tmp_path / "other").exists()


# -- Kubernetes --------------------------------------------------------------------------------------------


def test_k8s_manifests_survive_a_lost_pod_and_pin_the_image(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    subs = make_class(tmp_path)
    out = tmp_path / "out"
    proc = grade([str(subs), "-e", "1", "--out", str(out), "--emit", "k8s", "--image", DIGEST,
                  "--storage-class", "nfs-client"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    base = out / "k8s"
    schema = json.loads((SCHEMAS / "k8s-subset.schema.json").read_text())
    docs = {n: json.loads((base / f"{n}.json").read_text()) for n in ("job", "networkpolicy", "pvc", "helper-pod")}
    for doc in docs.values():
        jsonschema.validate(doc, schema)
    spec = docs["job"]["spec"]
    assert spec["backoffLimitPerIndex"] == 1 and spec["maxFailedIndexes"] == spec["completions"] == 5
    assert "backoffLimit" not in spec
    rules = spec["podFailurePolicy"]["rules"]
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]} in rules
    assert any(r["action"] == "Count" and r["onExitCodes"]["values"] == [137] for r in rules)
    assert spec["template"]["spec"]["containers"][0]["image"] == DIGEST
    assert docs["pvc"]["spec"]["storageClassName"] == "nfs-client"
    helper = docs["helper-pod"]
    assert helper["spec"]["containers"][0]["image"] == DIGEST
    assert helper["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == docs["pvc"]["metadata"]["name"]
    script = (base / "copy-results.sh").read_text()
    name = helper["metadata"]["name"]
    assert f"kubectl cp {name}:/volume/results" in script and f"kubectl delete pod {name}" in script
    assert json.loads((base / "index.json").read_text())["pod_security"] == "baseline"

    # a broken schema rule is caught: podFailurePolicy needs restartPolicy Never
    bad = json.loads(json.dumps(docs["job"]))
    bad["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_k8s_refuses_an_image_not_known_by_digest(tmp_path):
    subs = make_class(tmp_path)
    proc = grade([str(subs), "-e", "1", "--out", str(tmp_path / "out"), "--emit", "k8s",
                  "--image", "registry.example/nothing-here:1.0"], tmp_path)
    assert proc.returncode == 2 and "not known by digest" in proc.stdout + proc.stderr
