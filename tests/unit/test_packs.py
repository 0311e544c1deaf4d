"""Exercise packs without grading: discovery (LUMEN_EX_PATH, --exercises, the image's installed
packs), clashes, a course's copy replacing the built-in pack, the exercise modules loaded by path,
`lumen-ex dev new` and `dev check --no-grade`, and `lumen-ex list --format json`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import LUMEN_EX, pack_copy

from lumen_ex.authoring.scaffold import new_pack
from lumen_ex.core import catalog, exercise_modules, packs
from lumen_ex.core.errors import CatalogError, UsageError

BUILTIN = catalog.load(environ={})


def env_with(path) -> dict:
    return {"LUMEN_EX_PATH": str(path)}


def test_the_builtin_pack_alone_without_a_path():
    assert [p.name for p in packs.discover({})] == ["lumen-ex"]
    assert all(ex.builtin and ex.pack.startswith("lumen-ex@") for ex in BUILTIN.exercises)
    assert catalog.validate(BUILTIN) == []
    assert catalog.unlisted_folders(packs.discover({})[0]) == []


def test_a_pack_on_the_path_adds_its_exercises(tmp_path):
    new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    cat = catalog.load(env_with(tmp_path / "course"))
    assert [ex.number for ex in cat.exercises] == [*(ex.number for ex in BUILTIN.exercises), 101]
    ex = cat.find("softmax")
    assert ex.number == 101
    assert ex.pack == "course@0.1.0" and not ex.builtin and ex.root == (tmp_path / "course" / "101-softmax").resolve()
    assert cat.version == f"{BUILTIN.version}+course@0.1.0"
    assert catalog.validate(cat) == []


def test_numbers_and_slugs_must_be_unique_across_packs(tmp_path):
    new_pack(tmp_path / "a", slug="attention", title="Clash", number=50, name="a")
    with pytest.raises(CatalogError, match=r"share 'attention'"):
        catalog.load(env_with(tmp_path / "a"))
    new_pack(tmp_path / "b", slug="other", title="Clash", number=1, name="b")
    with pytest.raises(CatalogError, match=r"share 1"):
        catalog.load(env_with(tmp_path / "b"))


def test_a_copy_named_like_the_builtin_pack_replaces_it(tmp_path):
    copy = pack_copy(tmp_path, version="2099.1.1")
    cat = catalog.load(env_with(copy))
    assert cat.version == "2099.1.1"
    assert all(ex.root.is_relative_to(copy.resolve()) for ex in cat.exercises)


def test_the_first_of_two_packs_with_one_name_wins(tmp_path):
    new_pack(tmp_path / "one", slug="first", title="First", name="same")
    new_pack(tmp_path / "two", slug="second", title="Second", number=102, name="same")
    cat = catalog.load({"LUMEN_EX_PATH": os.pathsep.join([str(tmp_path / "one"), str(tmp_path / "two")])})
    assert cat.find(101).slug == "first"
    with pytest.raises(UsageError):
        cat.find("second")


def test_a_path_entry_that_is_not_a_pack_is_one_clear_error(tmp_path):
    with pytest.raises(CatalogError, match="not a folder"):
        catalog.load(env_with(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CatalogError, match="pack.toml is missing"):
        catalog.load(env_with(tmp_path / "empty"))
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "pack.toml").write_text("x = 1\n" * 100_000)
    with pytest.raises(CatalogError, match="KiB"):
        catalog.load(env_with(tmp_path / "big"))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "pack.toml").write_text('format_version = 1\nname = "Bad Name"\nversion = "1"\nexercises = []\n')
    with pytest.raises(CatalogError, match="needs a name"):
        catalog.load(env_with(tmp_path / "bad"))


def test_packs_installed_in_the_package_are_found(tmp_path, monkeypatch):
    new_pack(tmp_path / "installed" / "course", slug="softmax", title="Softmax", name="course")
    monkeypatch.setattr(packs, "installed_root", lambda: tmp_path / "installed")
    assert catalog.load({}).find(101).pack == "course@0.1.0"
    assert packs.extra_packs({}) == []          # already in the image: not added again


def test_image_files_include_the_packs_in_use(tmp_path, monkeypatch):
    from lumen_ex.image import tag

    new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    monkeypatch.delenv("LUMEN_EX_PATH", raising=False)
    without = tag.package_files()
    monkeypatch.setenv("LUMEN_EX_PATH", str(tmp_path / "course"))
    with_pack = tag.package_files()
    added = set(with_pack) - set(without)
    assert "lumen_ex/packs/course/101-softmax/suite/test_softmax.py" in added
    assert "lumen_ex/packs/course/pack.toml" in added
    assert tag.content_hash(with_pack) != tag.content_hash(without)


def test_exercise_modules_of_two_packs_never_share_a_name(tmp_path):
    new_pack(tmp_path / "a", slug="softmax", title="A", name="a")
    new_pack(tmp_path / "b", slug="softmax", title="B", name="b")
    ref_a = exercise_modules.load(tmp_path / "a" / "101-softmax", "reference")
    ref_b = exercise_modules.load(tmp_path / "b" / "101-softmax", "reference")
    assert ref_a is not ref_b and ref_a.__name__ != ref_b.__name__
    assert sys.modules[ref_a.__name__] is ref_a
    assert exercise_modules.load(tmp_path / "a" / "101-softmax", "reference") is ref_a
    suite = tmp_path / "a" / "101-softmax" / "suite" / "test_softmax.py"
    assert exercise_modules.exercise_folder(suite) == (tmp_path / "a" / "101-softmax").resolve()
    assert exercise_modules.sibling(suite, "mistakes").CATALOGUE["softmax-wrong-axis"]
    with pytest.raises(ValueError):
        exercise_modules.load(tmp_path / "a" / "101-softmax", "../reference")
    with pytest.raises(CatalogError):
        exercise_modules.exercise_folder(tmp_path)


def test_dev_new_refuses_what_it_cannot_write(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(UsageError, match="not empty"):
        new_pack(tmp_path / "full", slug="a", title="A")
    with pytest.raises(UsageError, match="--slug"):
        new_pack(tmp_path / "p", slug="Bad Slug", title="A")
    with pytest.raises(UsageError, match="--title"):
        new_pack(tmp_path / "p", slug="a", title='say "hi"')


@pytest.mark.slow
def test_dev_check_without_grading_finds_each_problem(tmp_path):
    folder = new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    ok = subprocess.run([LUMEN_EX, "dev", "check", str(tmp_path / "course"), "--no-grade", "--format", "json"],
                        capture_output=True, text=True, timeout=120, cwd="/")
    assert ok.returncode == 0 and json.loads(ok.stdout)["ok"] is True, ok.stdout + ok.stderr
    (folder / "notes.txt").write_text("forgotten")
    (tmp_path / "course" / "102-orphan").mkdir()
    (folder / "corpus" / "buggy" / "no_header.py").write_text("def softmax(x):\n    return x\n")
    buggy = folder / "corpus" / "buggy" / "wrong_axis.py"
    buggy.write_text(buggy.read_text().replace("softmax-wrong-axis", "not-a-known-mistake"))
    overflow = folder / "corpus" / "buggy" / "no_max_subtracted.py"
    overflow.write_text(overflow.read_text().replace("# expect-kind:", "# expect-knd:"))
    (folder / "mistakes.py").write_text((folder / "mistakes.py").read_text().replace("CATALOGUE = {", "CATALOG = {"))
    manifest = folder / "exercise.toml"
    manifest.write_text(manifest.read_text().replace('"softmax-wrong-axis" = 2', '"softmax-wrong-axes" = 2\nvalues = 9'))
    bad = subprocess.run([LUMEN_EX, "dev", "check", str(tmp_path / "course"), "--no-grade", "--format", "json"],
                         capture_output=True, text=True, timeout=120, cwd="/")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    problems = "\n".join(p["what"] for p in json.loads(bad.stdout)["problems"])
    assert "notes.txt is not part of an exercise" in problems
    assert "102-orphan is not listed in pack.toml" in problems
    assert "mistakes.py needs CATALOGUE" in problems
    assert "add a '# bug: <what is wrong>' header line" in problems
    assert "'# expect-kind:' must be one of" in problems
    assert "'# expect-knd:' is not a header lumen-ex reads; did you mean 'expect-kind'?" in problems
    assert "[hint_for] 'values' = 9 names no hint: number the hints from 1 to 2" in problems


def test_dev_check_without_grading_names_a_hint_for_a_mistake_that_does_not_exist(tmp_path):
    folder = new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    manifest = folder / "exercise.toml"
    manifest.write_text(manifest.read_text().replace('"softmax-wrong-axis" = 2', '"softmax-wrong-axes" = 2'))
    bad = subprocess.run([LUMEN_EX, "dev", "check", str(tmp_path / "course"), "--no-grade", "--format", "json"],
                         capture_output=True, text=True, timeout=120, cwd="/")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    problems = [p["what"] for p in json.loads(bad.stdout)["problems"]]
    assert problems == ["exercise.toml [hint_for] 'softmax-wrong-axes' is neither a known mistake (mistakes.py "
                        "CATALOGUE, or a generic one) nor a diagnosis kind: correct the name, or remove it; did you "
                        "mean 'softmax-wrong-axis'?"], problems


def test_autograd_is_on_unless_an_exercise_turns_it_off(tmp_path):
    """exercise.toml ``autograd = false`` reaches the exercise (and the worker's load request, as
    tests/sandbox/test_forbidden_routes.py shows); anything but true or false is one clear error."""
    folder = new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    assert catalog.load(env_with(tmp_path / "course")).find("softmax").autograd is True
    manifest = folder / "exercise.toml"
    text = manifest.read_text()
    manifest.write_text("autograd = false\n" + text)
    assert catalog.load(env_with(tmp_path / "course")).find("softmax").autograd is False
    manifest.write_text('autograd = "no"\n' + text)
    with pytest.raises(CatalogError, match="autograd must be true or false, not 'no'"):
        catalog.load(env_with(tmp_path / "course"))


def test_dev_check_never_says_ok_about_exercises_it_did_not_check(tmp_path):
    """An exercise of another pack named with -e is a usage error naming that pack's folder, and a
    pack that a same-name pack on LUMEN_EX_PATH replaces is a problem (never "ok · 0 exercise(s)")."""
    new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    copy = pack_copy(tmp_path)
    env = {**os.environ, "LUMEN_EX_PATH": os.pathsep.join([str(tmp_path / "course"), str(copy)])}
    other = subprocess.run([LUMEN_EX, "dev", "check", str(tmp_path / "course"), "--no-grade", "-e", "1"],
                           capture_output=True, text=True, timeout=120, cwd="/", env=env)
    assert other.returncode == 2 and len(other.stderr.splitlines()) == 1, other.stdout + other.stderr
    assert other.stderr.startswith(f"Error: exercise 1 (attention) is not in the pack checked ({(tmp_path / 'course').resolve()}) "
                                   f"but in {copy.resolve()}. Name its pack's folder: lumen-ex dev check {copy.resolve()} -e 1")
    replaced = subprocess.run([LUMEN_EX, "dev", "check", "--no-grade", "--format", "json"],
                              capture_output=True, text=True, timeout=120, cwd="/", env=env)
    assert replaced.returncode == 1, replaced.stdout + replaced.stderr
    doc = json.loads(replaced.stdout)
    assert doc["ok"] is False and [p["where"] for p in doc["problems"]] == ["lumen-ex"], doc["problems"]
    assert doc["problems"][0]["what"].startswith(f"{packs.builtin_root()} is not the pack in use: the pack of the "
                                                 f"same name at {copy.resolve()} is found first")
    mine = subprocess.run([LUMEN_EX, "dev", "check", str(copy), "--no-grade", "-e", "attention", "--format", "json"],
                          capture_output=True, text=True, timeout=120, cwd="/", env=env)
    assert mine.returncode == 0 and [e["number"] for e in json.loads(mine.stdout)["exercises"]] == [1], mine.stdout


def test_list_json_names_the_packs_and_exercises(tmp_path):
    new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    proc = subprocess.run([LUMEN_EX, "list", "--format", "json", "--exercises", str(tmp_path / "course")],
                          capture_output=True, text=True, timeout=120, cwd="/")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format_version"] == 1 and doc["workspace"] is None
    assert [p["name"] for p in doc["packs"]] == ["course", "lumen-ex"]
    ex = {e["number"]: e for e in doc["exercises"]}
    assert ex[101]["slug"] == "softmax" and ex[101]["pack"] == "course@0.1.0" and ex[101]["max_score"] == 5
    assert ex[101]["path"] == "101-softmax/softmax.py" and ex[101]["status"] == "not checked"
    assert ex[1]["slug"] == "attention" and ex[1]["pack"].startswith("lumen-ex@")


def test_an_exercise_is_fingerprinted_by_what_it_is_graded_with(tmp_path):
    """classroom/store.py exercise_files: the suite, reference, mistakes and manifests, not the
    README, the corpus or the pack's version (the catalogue's version records that)."""
    from lumen_ex.classroom.store import exercise_files

    ex = BUILTIN.find(1)
    mine = exercise_files(ex)
    assert {"exercise.toml", "reference.py", "mistakes.py", "../pack.toml"} <= set(mine)
    assert any(p.startswith("suite/") for p in mine)
    assert not [p for p in mine if p.startswith("corpus/") or p.endswith("README.md") or "__pycache__" in p]
    bumped = pack_copy(tmp_path / "a", version="2099.1.1",
                       edits={f"{ex.dir}/README.md": ("#", "# edited"), f"{ex.dir}/corpus/correct/einsum_arange.py":
                              ("import", "import math\nimport")})
    assert exercise_files(catalog.load(env_with(bumped)).find(1)) == mine
    edited = pack_copy(tmp_path / "b", edits={f"{ex.dir}/exercise.toml": ("\ncontract = 1\n", "\ncontract = 3\n")})
    changed = exercise_files(catalog.load(env_with(edited)).find(1))
    assert [p for p in mine if mine[p] != changed.get(p)] == ["exercise.toml"]



def test_dev_new_adds_an_exercise_to_an_existing_pack(tmp_path):
    new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    folder = new_pack(tmp_path / "course", slug="attention-sink", title="Attention sink")
    assert folder.name == "102-attention-sink"
    pack = packs.read_pack(tmp_path / "course")
    assert pack.folders == ("101-softmax", "102-attention-sink") and pack.version == "0.1.0"
    cat = catalog.load(env_with(tmp_path / "course"))
    assert catalog.validate(cat) == [] and cat.find(102).slug == "attention-sink"
    with pytest.raises(UsageError, match="already has an exercise softmax"):
        new_pack(tmp_path / "course", slug="softmax", title="Again")
    with pytest.raises(UsageError, match="already has an exercise 101"):
        new_pack(tmp_path / "course", slug="other", title="Other", number=101)
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "notes.txt").write_text("x")
    with pytest.raises(UsageError, match="holds no pack.toml"):
        new_pack(tmp_path / "loose", slug="softmax", title="Softmax")


def test_a_pack_chooses_what_a_new_workspace_holds(tmp_path):
    """pack.toml's workspace: "own" for the course's exercises, others by slug; init's next step is
    the workspace's first exercise."""
    new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    manifest = tmp_path / "course" / "pack.toml"
    manifest.write_text(manifest.read_text() + 'workspace = ["own"]\n')
    made = subprocess.run([LUMEN_EX, "init", str(tmp_path / "ws")], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env_with(tmp_path / "course")})
    assert made.returncode == 0, made.stderr
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == ["101-softmax", "README.md", "lumen-ex.toml"]
    assert "open 101-softmax/README.md, edit 101-softmax/softmax.py" in made.stdout and "check 101" in made.stdout
    assert "Start with `101-softmax/README.md`, then go in order." in (tmp_path / "ws" / "README.md").read_text()

    manifest.write_text(manifest.read_text().replace('workspace = ["own"]', 'workspace = ["own", "rope"]'))
    chosen = catalog.for_workspace(catalog.load(env_with(tmp_path / "course")), packs.discover(env_with(tmp_path / "course")))
    assert [ex.number for ex in chosen.exercises] == [4, 101]
    manifest.write_text(manifest.read_text().replace('"rope"', '"ropes"'))
    with pytest.raises(CatalogError, match="workspace names 'ropes', which is no exercise in use"):
        catalog.for_workspace(catalog.load(env_with(tmp_path / "course")), packs.discover(env_with(tmp_path / "course")))
    assert catalog.for_workspace(BUILTIN, packs.discover({})) == BUILTIN     # no pack chooses: every exercise


def test_manifests_are_read_again_when_their_bytes_change_and_each_reader_gets_its_own_copy(tmp_path):
    """The catalogue remembers a manifest's parse by its bytes (packs._parsed): an edit is seen at the
    next load in the same process, whatever the file's date, and a caller that changes what it was
    given changes nothing for the next one."""
    new_pack(tmp_path / "course", slug="softmax", title="Softmax", name="course")
    manifest = tmp_path / "course" / "101-softmax" / "exercise.toml"
    stat = manifest.stat()
    assert catalog.load(env_with(tmp_path / "course")).find(101).title == "Softmax"
    manifest.write_text(manifest.read_text().replace('title = "Softmax"', 'title = "Softmax, again"'))
    os.utime(manifest, ns=(stat.st_atime_ns, stat.st_mtime_ns))      # the same date: only the bytes differ
    assert catalog.load(env_with(tmp_path / "course")).find(101).title == "Softmax, again"
    first = packs.read_toml(manifest, "exercise manifest")
    first["title"] = "changed by a caller"
    first["functions"].append("extra")
    again = packs.read_toml(manifest, "exercise manifest")
    assert again["title"] == "Softmax, again" and "extra" not in again["functions"]
