"""What ``lumen-ex grade`` keeps in DIR, and how a rerun knows whether a result is still true.

Beside each result document (DIR/results/<key>/<exercise>.json) is its **record**
(``<exercise>.grading.json``): what exactly was graded and how, the *fingerprint*:

- ``entry``: which entry of SUBMISSIONS it is of (its name as given, the entry's file name, its kind),
  so that a new ``lee/`` never takes over the result of ``lee.zip``;
- ``files``: the sha256 of every file copied into the student's throwaway workspace for this
  exercise (the learner's file and the ``.py`` files beside it), or ``problem``, the reason it could
  not be graded (missing, refused);
- ``versions``: lumen-ex, the exercise catalogue and, under docker, the grader image's id;
- ``exercise``: the sha256 of every file the exercise is graded with (:func:`exercise_files`: its
  suite, reference, mistakes and manifest, and its pack's manifest but its version), so that an edit
  to a pack regrades what it affects even when nobody bumped the version (the version is for
  people, the hashes for correctness);
- ``seed`` (the class seed, src/lumen_ex/classroom/planning.py) and ``device``;

and ``result_sha256``, the hash of the document it belongs to (a record and a document that do not
match are a write that was cut short). A rerun compares the fingerprint of what it would grade now
with the record, field by field: anything different, a missing record, or a document whose status is
``error`` (a grader failure, "no result from the cluster job") is regraded, with the reason.

``--force`` regrades into a staging folder (DIR/.staging/<run>/results) and moves the new results
into DIR/results only when the whole run has finished: first a journal (DIR/.staging/swap.json)
naming the staging folder, then the moves, then the journal is removed. A run killed before the
journal leaves the old results as they were (the next run discards the staging folder and says
so); one killed during the moves is finished by the next run (:func:`recover`). So a kill never
leaves a mix of old and new results.

DIR/class.json is the class record: the class seed, every entry found (key, name as given, kind),
the entries skipped and why, and the roster match. The gradebook (src/lumen_ex/classroom/gradebook.py) reads it.
DIR/results/<key>/submission.json says what was graded of each submission, and from where.

The result documents, their records, the class record and the staging are read and written here
and nowhere else: :func:`record` and :func:`load_document` for the result documents,
:func:`describe_submission`, the class record and the staging. What is made from them is written
beside them by other modules: gradebook.csv, report.md and the --format views by
src/lumen_ex/classroom/outputs.py, DIR/feedback/ by feedback_files.py, the deadline's
late-policy.json and each student's results/<key>/submitted.json by late.py, and DIR/k8s/ by k8s.py.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import secrets
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lumen_ex.classroom.entries import Submission
from lumen_ex.classroom.submissions import Prepared
from lumen_ex.core.atomic import write_atomically
from lumen_ex.core.catalog import Exercise
from lumen_ex.core.results import RunResult

RESULTS = "results"
SUBMISSION_INFO = "submission.json"
CLASS_FILE = "class.json"
STAGING = ".staging"
JOURNAL = "swap.json"
RECORD_SUFFIX = ".grading.json"


# -- fingerprints ----------------------------------------------------------------------------------


def hash_files(folder: Path) -> dict[str, str]:
    """sha256 of every regular file below ``folder`` (a throwaway workspace's exercise folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder.parent))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# What of an exercise's folder a grading does not read: the learner's README and the author's corpus.
NOT_GRADED_WITH = ("README.md", "corpus", "__pycache__")


def exercise_files(ex: Exercise) -> dict[str, str]:
    """sha256 of every file ``ex`` is graded with, by path in its folder: all but NOT_GRADED_WITH,
    and its pack's manifest (``../pack.toml``) without its version, which the catalogue's version
    already records."""
    root = Path(ex.root)
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not path.is_symlink() and not set(rel.parts) & set(NOT_GRADED_WITH):
            out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = root.parent / "pack.toml"
    try:
        data = tomllib.loads(manifest.read_text())
    except (OSError, ValueError):
        return out
    data.pop("version", None)
    out["../pack.toml"] = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    return out


def fingerprint(*, name: str, entry: str, kind: str, files: dict[str, str], problem: str,
                versions: dict[str, str], seed: int, device: str, exercise: dict[str, str] | None = None) -> dict:
    """What one student x exercise would be graded from (see the module's docstring)."""
    return {"entry": {"name": name, "entry": entry, "kind": kind}, "files": dict(sorted(files.items())),
            "problem": problem, "versions": dict(versions), "seed": seed, "device": device,
            "exercise": dict(sorted((exercise or {}).items()))}


def record_path(out: Path, key: str, ex_dir: str) -> Path:
    return Path(out) / RESULTS / key / f"{ex_dir}{RECORD_SUFFIX}"


def document_path(out: Path, key: str, ex_dir: str) -> Path:
    return Path(out) / RESULTS / key / f"{ex_dir}.json"


def write_result(out: Path, key: str, ex_dir: str, document: str, fp: dict | None, run: str) -> None:
    """The result document, then its record (a cut between the two is seen: ``result_sha256``)."""
    write_atomically(document_path(out, key, ex_dir), document)
    if fp is None:
        return
    record = {"fingerprint": fp, "result_sha256": _sha256(document), "run": run, "recorded": now()}
    write_atomically(record_path(out, key, ex_dir), json.dumps(record, indent=1) + "\n")


def result_path(out: Path, student: str, ex: Exercise) -> Path:
    return document_path(out, student, ex.dir)


def load_document(path: Path) -> dict | None:
    """A stored result document, or None when absent or not a valid one."""
    try:
        doc = json.loads(path.read_text())
        RunResult.from_dict(doc)
        return doc
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record(out: Path, student: str, ex: Exercise, result: RunResult, fingerprint: dict | None = None,
           run: str = "") -> None:
    """Store a result document, and with ``fingerprint`` its record of what was graded
    (:func:`fingerprint`), which a rerun compares with the submission as it is then."""
    write_result(out, student, ex.dir, result.to_json() + "\n", fingerprint, run)


def describe_submission(out: Path, sub: Submission, prepared: Prepared) -> None:
    """DIR/results/<student>/submission.json: what was graded, from where (and the git commit,
    read by :func:`lumen_ex.classroom.submissions.prepare` through the bounded reader)."""
    info = {"student": sub.student, "name": sub.name, "source": sub.source.name, "kind": sub.kind,
            "commit": prepared.commit,
            "graded": prepared.found, "missing": prepared.missing, "refused": prepared.refused,
            "ambiguous": prepared.ambiguous}
    write_atomically(Path(out) / RESULTS / sub.student / SUBMISSION_INFO,
                     json.dumps(info, indent=1) + "\n")


def submission_info(out: Path, student: str) -> dict:
    """DIR/results/<student>/submission.json, or {} when there is none (or it cannot be read)."""
    try:
        info = json.loads((Path(out) / RESULTS / student / SUBMISSION_INFO).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def read_record(out: Path, key: str, ex_dir: str) -> dict | None:
    try:
        record = json.loads(record_path(out, key, ex_dir).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("fingerprint"), dict) else None


@dataclass
class State:
    """Where one student x exercise stands: ``up to date``, ``stale``, ``missing`` or ``failed``
    (its result is a grader error), and why when it must be regraded."""

    state: str
    reason: str = ""

    @property
    def current(self) -> bool:
        return self.state == "up to date"


def state_of(out: Path, key: str, ex_dir: str, fp: dict) -> State:
    """Compare what would be graded now (``fp``) with what the stored result was graded from."""
    path = document_path(out, key, ex_dir)
    try:
        text = path.read_text()
        doc = json.loads(text)
        status = doc["status"]
    except FileNotFoundError:
        return State("missing", "not graded yet")
    except (OSError, ValueError, KeyError, TypeError):
        return State("stale", "its result document cannot be read")
    if status == "error":
        return State("failed", f"the last grading was a grader error ({_short(doc.get('message', ''))})")
    record = read_record(out, key, ex_dir)
    if record is None:
        return State("stale", "no record of what was graded (a result from an older lumen-ex or a cluster job)")
    if not belongs_to(record, text):
        return State("stale", "its record does not match the result (a write was cut short)")
    why = differences(record["fingerprint"], fp)
    return State("stale", "; ".join(why)) if why else State("up to date")


def differences(old: dict, new: dict) -> list[str]:
    """What changed between two fingerprints, in words; [] when they are the same."""
    why = []
    if old.get("entry") != new["entry"]:
        was = (old.get("entry") or {}).get("entry", "?")
        why.append(f"the stored result is of another entry ({was}), this one is {new['entry']['entry']}")
    why += _file_changes(old.get("files") or {}, new["files"])
    if (old.get("problem") or "") != new["problem"] and not why:
        why.append("the submission changed")
    old_v, new_v = old.get("versions") or {}, new["versions"]
    for name, label in (("lumen_ex", "lumen-ex"), ("catalog", "the catalogue"), ("image", "the grader image")):
        if name == "image" and name not in new_v:
            continue        # the image is compared only when grading under docker
        if old_v.get(name) != new_v.get(name):
            why.append(f"{label} {old_v.get(name) or 'none'} -> {new_v.get(name) or 'none'}")
    if old.get("seed") != new["seed"]:
        why.append(f"the class seed {old.get('seed')} -> {new['seed']}")
    if old.get("device") != new["device"]:
        why.append(f"the device {old.get('device')} -> {new['device']}")
    was, now = old.get("exercise"), new.get("exercise") or {}
    if was is None and now:
        why.append("no record of the exercise's files it was graded with")
    elif isinstance(was, dict) and was != now:
        changed = sorted(p for p in set(was) | set(now) if was.get(p) != now.get(p))
        why.append("the exercise changed: " + ", ".join(changed[:5]) + (f" and {len(changed) - 5} more"
                                                                         if len(changed) > 5 else ""))
    return why


def _file_changes(old: dict[str, str], new: dict[str, str]) -> list[str]:
    changed = [f"{p} changed" for p in new if p in old and old[p] != new[p]]
    changed += [f"{p} is new" for p in new if p not in old]
    changed += [f"{p} was removed" for p in old if p not in new]
    return changed


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def belongs_to(record: dict, document: str) -> bool:
    """Whether ``record`` is the record of the result document ``document`` (its text): a record
    and a document that do not match are a write that was cut short."""
    return record.get("result_sha256") == _sha256(document)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(4)


# -- the class record --------------------------------------------------------------------------------


def load_class(out: Path) -> dict:
    """DIR/class.json, or {} when there is none yet (or it cannot be read)."""
    try:
        data = json.loads((Path(out) / CLASS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_class(out: Path, data: dict) -> None:
    # ASCII JSON: a name that is not UTF-8 (a lone surrogate) is escaped and reads back the same.
    write_atomically(Path(out) / CLASS_FILE, json.dumps(data, indent=1) + "\n")


def class_seed(out: Path, asked: int | None) -> tuple[int, str]:
    """The seed this class is graded with, and a note when it changes: ``--seed`` when given, else
    the one recorded in DIR/class.json, else a fresh one (recorded by the caller)."""
    recorded = load_class(out).get("seed")
    recorded = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None
    if asked is not None:
        note = (f"the class seed changes from {recorded} to {asked}: every result is regraded"
                if recorded is not None and recorded != asked else "")
        return int(asked), note
    if recorded is not None:
        return recorded, ""
    return secrets.randbelow(2**31), ""


# -- staging for --force -------------------------------------------------------------------------------


def staging_dir(out: Path, run: str) -> Path:
    return Path(out) / STAGING / run


def commit_staging(out: Path, staged: Path) -> None:
    """Move every staged result into DIR/results, journaled so that a kill midway is finished by
    the next run (:func:`recover`)."""
    journal = Path(out) / STAGING / JOURNAL
    write_atomically(journal, json.dumps({"staged": staged.name}) + "\n")
    _move_all(Path(out), staged)
    journal.unlink()


def _move_all(out: Path, staged: Path) -> None:
    source = staged / RESULTS
    files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else []
    for path in files:
        target = out / RESULTS / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    shutil.rmtree(staged, ignore_errors=True)


def recover(out: Path) -> list[str]:
    """Finish or discard what an earlier ``--force`` run left in DIR/.staging; notes saying which."""
    base = Path(out) / STAGING
    if not base.is_dir():
        return []
    notes = []
    journal = base / JOURNAL
    if journal.is_file():
        try:
            staged = base / json.loads(journal.read_text())["staged"]
        except (OSError, ValueError, KeyError, TypeError):
            staged = None
        if staged is not None and staged.is_dir() and staged.parent == base:
            _move_all(Path(out), staged)
            notes.append("an earlier --force run was stopped while it stored its results: they are now all in place")
        journal.unlink()
    for left in sorted(p for p in base.iterdir() if p.is_dir()):
        count = sum(1 for p in left.rglob("*.json") if not p.name.endswith(RECORD_SUFFIX)
                    and p.name != SUBMISSION_INFO)
        shutil.rmtree(left, ignore_errors=True)
        notes.append(f"an earlier --force run did not finish: its {count} new results were discarded and the "
                     "results from before it are kept (run it again to regrade)")
    return notes
