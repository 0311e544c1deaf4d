"""The catalogue is data, validated: every stub fails its hidden suite, the reference passes it.

(tests/unit/test_packs.py covers packs: LUMEN_EX_PATH, --exercises, clashes, and `lumen-ex dev`.)"""

from __future__ import annotations

import shutil

import pytest

from lumen_ex.core import catalog
from lumen_ex.core.errors import CatalogError, UnknownExercise
from lumen_ex.core.results import Status

EXERCISES = catalog.load().exercises


def test_catalogue_is_valid():
    assert catalog.validate(catalog.load()) == []


def test_validator_finds_real_problems(tmp_path):
    """The validator is not vacuous: a broken copy of the built-in pack yields each problem."""
    root = tmp_path / "exercises"
    shutil.copytree(catalog.exercises_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "01-attention" / "attention.py").write_text("def scaled_dot_product_attention(q, k, v):\n    pass\n")
    (root / "02-kv-cache" / "README.md").unlink()
    (root / "02-kv-cache" / "notes.txt").write_text("forgotten")
    (root / "02-kv-cache" / "data").mkdir()
    (root / "02-kv-cache" / "data" / "table.bin").write_bytes(b"\0")        # data/ is the exercise's own
    (root / "02-kv-cache" / "data" / "deeper").mkdir()
    (root / "02-kv-cache" / "data" / "deeper" / "x.bin").write_bytes(b"\0")  # but one level only
    (root / "03-orphan").mkdir()
    manifest = root / "02-kv-cache" / "exercise.toml"
    manifest.write_text(manifest.read_text().replace('slug = "kv-cache"', 'slug = "Bad Slug"'))
    later = root / "05-flash-attention" / "exercise.toml"
    later.write_text(later.read_text().replace("builds_on = [1]", "builds_on = [1, 9]"))
    pack = catalog.read_pack(root)
    problems = "\n".join(catalog.validate(catalog.load_pack(root)) + catalog.unlisted_folders(pack))
    assert "needs TODO markers" in problems
    assert "does not define causal_mask()" in problems
    assert "README.md is missing" in problems
    assert "exercises/03-orphan is not listed in pack.toml" in problems
    assert "notes.txt is not part of an exercise" in problems
    assert "data/deeper/x.bin is not part of an exercise" in problems and "table.bin" not in problems
    assert "slug must match" in problems
    assert "builds_on = 9 names no earlier exercise" in problems
    manifest.write_text(manifest.read_text().replace("number = 2", "number = 1"))
    with pytest.raises(CatalogError, match="share 1"):
        catalog.load_pack(root)


def test_the_workspace_readme_says_what_builds_on_what_from_the_manifests(tmp_path):
    """`lumen-ex init`'s README lists every file in one aligned column and the order of the
    exercises from their ``builds_on`` (exercise.toml), not from a list in the code."""
    from lumen_ex.core.workspace import Workspace

    readme = (Workspace.create(tmp_path / "ws", catalog.load()).root / "README.md").read_text()
    listing = readme.split("```\n")[1].splitlines()
    assert [line.split()[0] for line in listing[:2]] == ["README.md", "lumen-ex.toml"]
    assert len(listing) == 3 + 2 * len(EXERCISES) and listing[-1].startswith(".lumen-ex/")
    assert len({len(line) - len(line[len(line.split()[0]):].lstrip()) for line in listing}) == 1, listing
    built = [f"{ex.number} on {' and '.join(map(str, ex.builds_on))}" for ex in EXERCISES if ex.builds_on]
    assert "3 on 1 and 2" in built and "9 on 5 and 8" in built
    assert "(exercise " + ", ".join(built) + ")" in readme.replace("\n", " ")
    # A workspace of some exercises only names none that it does not hold.
    some = catalog.Catalog("v", tuple(ex for ex in EXERCISES if ex.number in (2, 3, 9)))
    readme = (Workspace.create(tmp_path / "some", some).root / "README.md").read_text()
    assert "(exercise 3 on 2)" in readme and "9 on" not in readme


@pytest.mark.parametrize("key", ["1", "01", "attention", "01-attention", " Attention "])
def test_exercise_found_by_number_or_slug(key):
    assert catalog.load().find(key).slug == "attention"


def test_unknown_exercise_names_the_choices():
    listed = ", ".join(f"{ex.number} \\({ex.slug}\\)" for ex in EXERCISES)
    assert listed.startswith(r"1 \(attention\), 2 \(kv-cache\)")
    with pytest.raises(UnknownExercise, match=f"Choose one of: {listed}$"):
        catalog.load().find("99")


@pytest.mark.parametrize("ex", EXERCISES, ids=[e.slug for e in EXERCISES])
@pytest.mark.slow
def test_stub_fails_its_hidden_suite(ex, grade):
    result = grade(ex.number, ex.stub_path)
    assert result.status is Status.FAIL
    assert result.score < result.max_score
    first = result.first_failure
    assert first is not None and first.diagnosis is not None
    assert "NotImplementedError" in first.message or first.diagnosis.kind in ("exception", "missing")


@pytest.mark.parametrize("ex", EXERCISES, ids=[e.slug for e in EXERCISES])
@pytest.mark.slow
def test_reference_passes_with_full_marks(ex, grade):
    result = grade(ex.number, ex.reference_path)
    failures = [(t.id, t.message) for t in result.tests if t.status not in (Status.PASS, Status.SKIPPED)]
    assert failures == []
    assert result.status is Status.PASS
    assert result.score == pytest.approx(result.max_score)
    assert result.max_score == pytest.approx(ex.max_score)
    # Every scoring group is exercised, and every test belongs to a declared group.
    groups = {t.group for t in result.tests}
    assert groups == set(ex.points), f"groups in the suite {groups} vs the catalogue {set(ex.points)}"


def test_a_name_with_a_trailing_newline_is_refused_everywhere_a_name_is_checked(tmp_path):
    """A pattern anchored with ``$`` also accepts one newline at the end: the validators match the
    whole name. A forbidden API spelled "torch.nn.X\\n" (a TOML escape, a pasted line) would pass
    validation and then never match the call it should forbid; a pack's name names a folder in the
    grader image; the exercise's slug and file are typed and written by the learner's tools."""
    from lumen_ex.authoring import scaffold
    from lumen_ex.classroom import k8s
    from lumen_ex.core.errors import UsageError

    root = tmp_path / "exercises"
    shutil.copytree(catalog.exercises_root(), root, ignore=shutil.ignore_patterns("__pycache__"))
    pack = root / "pack.toml"
    pack.write_text(pack.read_text().replace('aliases = ["torch._C._nn.scaled_dot_product_attention"]',
                                             'aliases = ["torch._C._nn.scaled_dot_product_attention\\n"]')
                    .replace('kernels = ["aten::_native_multi_head_attention"]',
                             'kernels = ["aten::_native_multi_head_attention\\n"]'))
    manifest = root / "02-kv-cache" / "exercise.toml"
    manifest.write_text(manifest.read_text().replace('slug = "kv-cache"', 'slug = "kv-cache\\n"'))
    problems = "\n".join(catalog.validate(catalog.load_pack(root)))
    assert "'torch._C._nn.scaled_dot_product_attention\\n' must be a dotted name" in problems, problems
    assert "'aten::_native_multi_head_attention\\n' of torch.nn.functional.multi_head_attention_forward must be" \
        in problems, problems
    assert "(kv-cache\n, " in problems and "slug must match" in problems, problems

    name = catalog.read_pack(root).name
    pack.write_text(pack.read_text().replace(f'name = "{name}"', f'name = "{name}\\n"', 1))
    with pytest.raises(CatalogError, match="needs a name"):
        catalog.read_pack(root)
    with pytest.raises(UsageError, match="--slug"):
        scaffold._check("softmax\n", "Softmax", 101)
    digest = "registry.example/grader@sha256:" + "0" * 64
    assert k8s.resolve_image(digest) == digest
    with pytest.raises(UsageError, match="not known by digest"):   # (no image of that name here)
        k8s.resolve_image(digest + "\n")
