"""The bundled copy of the public measurements stands in for ../shared/reference on a bare clone."""

import json
from pathlib import Path

import pytest

from planner.verify import public_records
from planner.verify.public_records import BUNDLED_REFERENCE_DIR, REFERENCE_FILE, load_records

SHARED = Path(public_records.__file__).resolve().parents[2].parent / "shared" / "reference" / REFERENCE_FILE


def test_bundled_copy_loads_every_record():
    records = load_records(BUNDLED_REFERENCE_DIR / REFERENCE_FILE)
    assert len(records) == 1471


@pytest.mark.skipif(not SHARED.is_file(), reason="no ../shared/reference beside this clone")
def test_bundled_copy_is_verbatim():
    assert json.loads((BUNDLED_REFERENCE_DIR / REFERENCE_FILE).read_text()) == json.loads(SHARED.read_text())


def test_falls_back_to_the_bundled_copy(monkeypatch, tmp_path):
    monkeypatch.delenv("PLANNER_REFERENCE_DIR", raising=False)
    fake_module = tmp_path / "repo" / "planner" / "verify" / "public_records.py"
    fake_module.parent.mkdir(parents=True)
    monkeypatch.setattr(public_records, "__file__", str(fake_module))
    assert public_records.reference_dir() == BUNDLED_REFERENCE_DIR
