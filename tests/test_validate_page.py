"""The Validate page: the card (or the no-GPU notice), a quick CPU run of a small model, and what it shows.

Streamlit's AppTest runs ``app.py`` (frame and sidebar) routed to ``views/validate.py``. The GPU scan
(``ui.validate.scan_gpus``) is replaced where a test needs a known machine; the run itself is real:
CPU torch, quick mode, GPT-2's shapes (a few seconds). Calibrated profiles go to a temporary
``PLANNER_CALIBRATION_DIR``, never the real home folder.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import ui.validate
from planner.bench.report import ValidationReport
from planner.hardware import get_profile
from planner.units import fmt_bytes
from ui.validate import GpuScan, scan_gpus

ROOT = Path(__file__).resolve().parent.parent
PAGE = "views/validate.py"
SMALL_MODEL = "openai-community/gpt2"
NO_GPU_NOTICE = "No CUDA GPU found: the benchmarks run on this machine's CPU against the `cpu` profile."
NO_GPU = GpuScan((), "NVML", "NVML lists no device")


class FakeNVML:
    """The few pynvml calls ``scan_gpus`` makes, over a list of (name, memory bytes)."""

    def __init__(self, cards: list[tuple[str, int]], fail_init: bool = False):
        self.cards, self.fail_init, self.shut = cards, fail_init, False

    def nvmlInit(self):
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shut = True

    def nvmlSystemGetDriverVersion(self):
        return b"570.86.15"

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        return self.cards[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self.cards[handle][1])


H200_BYTES = get_profile("h200").memory_bytes


# ------------------------------------------------------------------------------ the torch-free scan


@pytest.mark.parametrize(
    ("cards", "fail_init", "names", "profiles", "reason"),
    [
        ([("NVIDIA H200", H200_BYTES)], False, ["NVIDIA H200"], ["h200"], None),
        ([("NVIDIA Made-Up 9000", 8 * 2**30)], False, ["NVIDIA Made-Up 9000"], [None], None),
        ([], False, [], [], "NVML lists no device"),
        ([("NVIDIA H200", H200_BYTES)], True, [], [], "NVML could not start (NVML Shared Library Not Found)"),
    ],
)
def test_scan_gpus_through_nvml(cards, fail_init, names, profiles, reason):
    nvml = FakeNVML(cards, fail_init)
    scan = scan_gpus(nvml=nvml)
    assert [g.name for g in scan.gpus] == names and [g.profile_id for g in scan.gpus] == profiles
    assert scan.reason == reason and scan.found is bool(names) and scan.source == "NVML"
    if names:
        assert scan.gpus[0].driver_version == "570.86.15" and scan.gpus[0].memory_total_bytes == cards[0][1]
        assert nvml.shut


@pytest.mark.parametrize(
    ("model_line", "names", "profiles"), [("Model: \t\t NVIDIA H200", ["NVIDIA H200"], ["h200"]), (None, [], [])]
)
def test_scan_gpus_without_pynvml_reads_the_driver_folder(monkeypatch, tmp_path, model_line, names, profiles):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "import pynvml" raises ImportError
    if model_line:
        gpu = tmp_path / "0000:65:00.0"
        gpu.mkdir()
        (gpu / "information").write_text(f"{model_line}\nIRQ:             123\nBus Location:    0000:65:00.0\n")
    scan = scan_gpus(proc_folder=tmp_path)
    assert [g.name for g in scan.gpus] == names and [g.profile_id for g in scan.gpus] == profiles
    assert scan.found is bool(names)
    if not names:
        assert scan.reason == f"pynvml (nvidia-ml-py) is not installed and {tmp_path} lists no GPU"


# ------------------------------------------------------------------------------ the page


@pytest.fixture
def page(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AppTest:
    """The Validate page routed through app.py, no GPU seen, calibration into tmp_path/cal."""
    monkeypatch.setenv("PLANNER_CALIBRATION_DIR", str(tmp_path / "cal"))
    monkeypatch.delenv("PLANNER_HARDWARE_DIR", raising=False)
    monkeypatch.setattr(ui.validate, "scan_gpus", lambda: NO_GPU)
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page(PAGE)
    return at


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def test_no_gpu_says_so_and_offers_no_cuda(page):
    at = page
    at.run()
    assert_clean(at)
    assert at.title[0].value == "Validate on this machine"
    assert at.info[0].value == NO_GPU_NOTICE
    assert list(at.radio(key="validate_device").options) == ["auto", "cpu"]
    assert any("cuda is unavailable: no CUDA GPU found" in c.value for c in at.caption)
    assert at.toggle(key="validate_quick").value is True  # quick by default
    # the sidebar's default model (Llama-3.1-8B) on CPU: slow, with what to do about it
    assert len(at.warning) == 1 and "Keep quick mode on" in at.warning[0].value and SMALL_MODEL in at.warning[0].value
    assert any("Press **Run the benchmarks**" in i.value for i in at.info)
    assert not at.dataframe and "validate_report_json" not in at.session_state


def test_a_seen_gpu_is_the_card_and_cuda_is_offered(page, monkeypatch):
    monkeypatch.setattr(ui.validate, "scan_gpus", lambda: scan_gpus(nvml=FakeNVML([("NVIDIA H200", H200_BYTES)])))
    at = page
    at.run()
    assert_clean(at)
    card = "\n".join(m.value for m in at.markdown)
    assert f"GPU 0: **NVIDIA H200** · {fmt_bytes(H200_BYTES)} · driver 570.86.15 · profile **h200**" in card
    assert NO_GPU_NOTICE not in [i.value for i in at.info]
    assert list(at.radio(key="validate_device").options) == ["auto", "cpu", "cuda"]
    assert not at.warning  # auto goes to the GPU: no CPU warning
    at.radio(key="validate_device").set_value("cpu").run()
    assert len(at.warning) == 1  # the same 8B model on CPU is slow


def test_quick_cpu_run_shows_predicted_vs_measured_and_the_calibration(page, tmp_path):
    at = page
    at.run()
    at.selectbox(key="model").set_value(SMALL_MODEL)
    at.radio(key="validate_device").set_value("cpu")
    at.toggle(key="validate_quick").set_value(True)
    at.run()
    assert not at.warning  # GPT-2 is small enough for the CPU
    at.button(key="validate_start").click().run()
    assert_clean(at)
    assert not at.error
    report = ValidationReport.model_validate_json(at.session_state["validate_report_json"])
    assert report.device.kind == "cpu" and report.profile.id == "cpu" and report.model.name == SMALL_MODEL
    assert any(
        m.value.startswith(f"**{report.device.name}** (cpu)") and "profile **cpu**" in m.value for m in at.markdown
    )

    # predicted vs measured: one row per check, the report's own numbers
    table = next(d.value for d in at.dataframe if "predicted (s)" in d.value.columns)
    assert list(table["check"]) == [c.name for c in report.checks]
    assert list(table["status"]) == [c.status for c in report.checks]
    ok = table[table["status"] == "ok"]
    assert len(ok) >= 10
    for _, row in ok.iterrows():
        check = next(c for c in report.checks if c.name == row["check"])
        assert math.isfinite(row["predicted (s)"]) and row["predicted (s)"] > 0
        assert math.isfinite(row["measured (s)"]) and row["measured (s)"] > 0
        assert row["predicted (s)"] == check.predicted_seconds and row["measured (s)"] == check.measured_seconds
        assert row["error (%)"] == pytest.approx(check.error_pct)
    progress = at.get("progress")
    assert (
        progress
        and progress[0].proto.value == 100
        and progress[0].proto.text.startswith(f"Done: {report.summary.checks} checks")
    )
    # one more bar per benchmark, each full: "gemm: 12 of 12 checks"
    groups = {c.benchmark: sum(x.benchmark == c.benchmark for x in report.checks) for c in report.checks}
    per_group = {bar.proto.text for bar in progress[1:]}
    assert per_group == {f"{g}: {n} of {n} checks" for g, n in groups.items()}
    assert all(bar.proto.value == 100 for bar in progress[1:])
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert chart["layout"]["xaxis"]["type"] == "log" and chart["layout"]["yaxis"]["type"] == "log"
    assert chart["data"][0]["name"] == "y = x (exact)"

    # utilization: unavailable on CPU, with the reason
    assert any(i.value.startswith("Utilization: unavailable (device is cpu") for i in at.info)

    # calibration: written into the temporary folder, errors before/after, the profile later plans use
    cal = report.calibration
    # a dry run first: nothing written until the user presses the write button
    assert cal is not None and cal.status in ("fitted", "refused") and cal.profile_id == "cpu-calibrated"
    assert cal.file is None
    assert not (tmp_path / "cal").exists() or not list((tmp_path / "cal").glob("*.yaml"))
    if cal.status == "refused":  # a loaded CPU measures noisily: the core refuses a fit that worsens its checks
        assert any(w.value.startswith("Calibration refused, nothing can be written") for w in at.warning)
        assert not [b for b in at.button if b.key == "validate_write"]
        pytest.skip(f"this run's fit was refused ({cal.reason}); the write path needs a fit that improves its checks")
    assert any(f"`{cal.target_file}`" in i.value and "nothing is written yet" in i.value for i in at.info)
    at.button(key="validate_write").click().run()
    assert_clean(at)
    report = ValidationReport.model_validate_json(at.session_state["validate_report_json"])
    cal = report.calibration
    assert cal.status == "written" and cal.profile_id == "cpu-calibrated"
    assert Path(cal.file).parent == tmp_path / "cal" and Path(cal.file).is_file()
    assert any(f"**cpu-calibrated** to `{cal.file}`" in s.value for s in at.success)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Median |error| before"] == f"{cal.median_abs_error_pct_before:.0f}%"
    assert shown["Median |error| after"] == f"{cal.median_abs_error_pct_after:.0f}%"
    factors = next(d.value for d in at.dataframe if "factor" in d.value.columns)
    assert factors.set_index("factor").loc["bandwidth_fraction", "after"] == cal.factors_after.bandwidth_fraction
    assert any("labelled **calibrated**" in m.value for m in at.markdown)

    # the JSON report
    download = at.get("download_button")
    assert (
        download and download[0].proto.label == "Download the report (JSON)" and download[0].proto.url.endswith(".json")
    )

    # a rerun draws the kept report instead of benchmarking again; the profile can be planned with
    kept = at.session_state["validate_report_json"]
    at.run()
    assert_clean(at)
    assert at.session_state["validate_report_json"] == kept and not at.get("progress")
    at.button(key="validate_use_profile").click().run()
    assert_clean(at)
    assert at.session_state["gpu"] == "cpu-calibrated"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    ("case", "device", "expected"),
    [
        ("torch missing", "cpu", "The benchmarks need torch, which could not be imported"),
        pytest.param(
            "cuda without a GPU",
            "cuda",
            "The benchmarks did not run: no CUDA GPU found",
            marks=pytest.mark.skipif(_cuda_available(), reason="this machine has a CUDA GPU"),
        ),
    ],
)
def test_a_run_that_cannot_start_is_an_error_not_a_traceback(page, monkeypatch, case, device, expected):
    """NVML sees a card but torch does not (a CPU build), or torch is not installed: one st.error saying what to do."""
    monkeypatch.setattr(ui.validate, "scan_gpus", lambda: scan_gpus(nvml=FakeNVML([("NVIDIA H200", H200_BYTES)])))
    at = page
    at.run()
    at.selectbox(key="model").set_value(SMALL_MODEL)
    at.radio(key="validate_device").set_value(device)
    at.run()
    if case == "torch missing":
        monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" raises ImportError
    at.button(key="validate_start").click().run()
    assert_clean(at)
    assert len(at.error) == 1 and at.error[0].value.startswith(expected)
    assert "validate_report_json" not in at.session_state and not at.get("progress")


def test_the_page_does_not_import_torch_before_the_run():
    """Drawing the page (card, options) must leave torch unimported; only the start button imports it."""
    code = (
        "import sys\n"
        "from streamlit.testing.v1 import AppTest\n"
        f"at = AppTest.from_file({str(ROOT / 'app.py')!r}, default_timeout=120)\n"
        "at.run()\n"
        f"at.switch_page({PAGE!r}).run()\n"
        "assert not at.exception, [e.value for e in at.exception]\n"
        "print(at.title[0].value)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[-2:] == ["Validate on this machine", "[]"]
