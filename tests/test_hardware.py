"""Hardware profiles: the built-in cards, the loader's errors, lookup and matching.

Known values come from shared/reference/hardware.md (dense FLOP/s, bandwidth, visible memory);
the CUDA totals from the torch printouts cited in each YAML's sources.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from planner.efficiency import Efficiency
from planner.errors import HardwareProfileError
from planner.hardware import (
    BUILTIN_DIR,
    ENV_VAR,
    HardwareProfile,
    calibrated_for,
    get_profile,
    load_profiles,
    match_profile,
    math_dtype,
    profile_from_detected,
    profile_path,
    read_profile,
    save_profile,
)
from planner.units import GiB, MiB

TERA = 1e12


@pytest.fixture(autouse=True)
def _no_user_dirs(monkeypatch):
    """Tests see only the built-ins unless they set PLANNER_HARDWARE_DIR themselves."""
    monkeypatch.delenv(ENV_VAR, raising=False)


def _h100_data() -> dict:
    return yaml.safe_load((BUILTIN_DIR / "h100-sxm.yaml").read_text())


# --- the built-in cards -------------------------------------------------------------------------


def test_every_builtin_loads_and_ids_match_file_names():
    files = sorted(BUILTIN_DIR.glob("*.yaml"))
    profiles = load_profiles()
    assert len(files) >= 16
    assert len(profiles) == len(files)  # no two files share an id
    for f in files:
        p = read_profile(f)
        assert p.id == f.stem, f"{f.name} holds id {p.id!r}"
        assert profiles[p.id] == p


def test_aliases_and_device_names_do_not_collide_between_cards():
    owner: dict[str, str] = {}
    from planner.hardware import _normalize

    for p in load_profiles().values():
        for name in (p.id, *p.aliases, *p.device_names):
            key = _normalize(name)
            assert owner.setdefault(key, p.id) == p.id, f"{name!r} is claimed by {owner[key]} and {p.id}"


def test_every_builtin_cites_its_main_numbers():
    for p in load_profiles().values():
        for key in ("memory_bytes", "hbm_bandwidth_bytes_per_s", "peak_flops_per_s"):
            assert p.sources.get(key), f"{p.id}: no source for {key}"
        if p.price_per_hour_usd is not None:
            assert "20" in p.sources["price_per_hour_usd"], f"{p.id}: price source needs a date"
        if p.memory_bytes_estimated:
            assert "estimate" in p.sources["memory_bytes"] or p.id == "cpu"


# Dense values from shared/reference/hardware.md (id, dtype, TFLOPS).
DENSE_TFLOPS = [
    ("h100-sxm", "bf16", 989.4),
    ("h100-sxm", "fp8", 1978.9),
    ("h100-sxm", "int8", 1978.9),
    ("h100-pcie", "bf16", 756.5),
    ("h100-pcie", "fp8", 1513),
    ("h100-nvl", "bf16", 835.5),
    ("h100-nvl", "fp8", 1670.5),
    ("h200", "bf16", 989.4),
    ("h200", "fp8", 1978.9),
    ("h20", "bf16", 148),
    ("h20", "fp8", 296),
    ("a100-40gb", "bf16", 312),
    ("a100-40gb", "int8", 624),
    ("a100-80gb", "bf16", 312),
    ("a100-80gb", "int8", 624),
    ("l40s", "bf16", 362.05),
    ("l40s", "fp8", 733),
    ("l4", "bf16", 121),
    ("l4", "fp8", 242.5),
    ("a10g", "bf16", 70),
    ("rtx-4090", "bf16", 165.2),
    ("rtx-4090", "fp8", 330.3),
    ("rtx-4090", "int8", 660.6),
    ("rtx-5090", "bf16", 209.5),
    ("rtx-5090", "fp8", 419),
    ("rtx-5090", "fp4", 1676),
    ("b200", "bf16", 2250),
    ("b200", "fp8", 4500),
    ("b200", "fp4", 9000),
    ("gb200", "bf16", 2500),
    ("gb200", "fp8", 5000),
    ("gb200", "fp4", 10000),
    ("mi300x", "bf16", 1307.4),
    ("mi300x", "fp8", 2614.9),
    ("mi325x", "bf16", 1307.4),
    ("mi325x", "fp8", 2614.9),
    ("gaudi3", "bf16", 1835),
    ("gaudi3", "fp8", 1835),
]


@pytest.mark.parametrize(("pid", "dtype", "tflops"), DENSE_TFLOPS)
def test_dense_flops_match_the_reference_table(pid, dtype, tflops):
    p = get_profile(pid)
    assert p.has_native(dtype)
    assert p.peak_flops_per_s[dtype] == pytest.approx(tflops * TERA, rel=1e-9)


BANDWIDTH_TB_S = {
    "h100-sxm": 3.35,
    "h100-pcie": 2.0,
    "h100-nvl": 3.9,
    "h200": 4.8,
    "h20": 4.0,
    "b200": 8.0,
    "gb200": 8.0,
    "a100-40gb": 1.555,
    "a100-80gb": 2.039,
    "l40s": 0.864,
    "l4": 0.300,
    "a10g": 0.600,
    "rtx-4090": 1.008,
    "rtx-5090": 1.792,
    "mi300x": 5.3,
    "mi325x": 6.0,
    "gaudi3": 3.67,
}


@pytest.mark.parametrize(("pid", "tb_s"), BANDWIDTH_TB_S.items())
def test_bandwidth_matches_the_reference_table(pid, tb_s):
    assert get_profile(pid).hbm_bandwidth_bytes_per_s == pytest.approx(tb_s * TERA)


def test_no_sparse_figure_slipped_in():
    """Low-precision rates are at most twice the next wider one. A sparse FP8 figure next to a dense
    BF16 figure would be 4x."""
    for p in load_profiles().values():
        f = p.peak_flops_per_s
        # GeForce: FP16/FP8 are the FP32-accumulate rates (half of FP16-accumulate); INT8 and
        # hardware.md's RTX 5090 FP4 (1,676 = marketed sparse 3,352 / 2) are not halved.
        geforce = 2.0 if p.id.startswith("rtx-") else 1.0
        for low, high, ratio in (("fp8", "bf16", 2), ("fp4", "fp8", 2 * geforce), ("int8", "bf16", 2 * geforce)):
            if low in f and high in f:
                # 1.025 slack: NVIDIA's L40S sheet pairs BF16 362.05 with FP8 733 (733 / 2 = 366.5).
                assert f[low] <= 1.025 * ratio * f[high], (p.id, low)
        if "fp16" in f and "bf16" in f:
            assert f["fp16"] == f["bf16"], p.id


def test_h100_sxm_spot_values():
    p = get_profile("h100-sxm")
    assert p.peak_flops_for("bf16") == 989.4e12
    assert p.peak_flops_for("fp8") == 1978.9e12
    assert p.hbm_bandwidth_bytes_per_s == 3.35e12
    assert p.memory_smi_bytes == 81_559 * MiB
    assert p.interconnect_kind == "nvlink4"
    assert p.unidirectional_interconnect_bytes_per_s == 450e9
    assert p.gpus_per_node == 8


def test_h200_memory():
    p = get_profile("h200")
    assert p.memory_smi_bytes == 143_771 * MiB  # nvidia-smi
    assert p.memory_bytes == 143_156 * MiB  # torch.cuda total, what vLLM multiplies
    assert not p.memory_bytes_estimated


def test_b200_uses_usable_not_physical_memory():
    p = get_profile("b200")
    assert p.memory_smi_bytes == 183_359 * MiB  # 179.06 GiB: the "180 GB" usable, not 192 GB physical
    assert 170 * GiB < p.memory_bytes < p.memory_smi_bytes


def test_cuda_total_sits_below_nvidia_smi_by_the_driver_reservation():
    """hardware.md: vLLM multiplies the CUDA total, below nvidia-smi's. Printed totals sit 424-728 MiB
    below; the A100 80GB estimate (79.15 GiB, inside the 79.11-79.33 GiB vLLM logs print for 80 GB
    cards) sits 870 MiB below, so estimates get a wider band."""
    for p in load_profiles().values():
        if p.memory_smi_bytes is not None:
            gap = p.memory_smi_bytes - p.memory_bytes
            upper = 950 * MiB if p.memory_bytes_estimated else 750 * MiB
            assert 400 * MiB <= gap <= upper, (p.id, gap / MiB)


def test_80gb_cards_are_inside_the_range_vllm_logs_print():
    for pid in ("h100-sxm", "h100-pcie", "a100-80gb"):
        assert 79.11 * GiB - MiB <= get_profile(pid).memory_bytes <= 79.33 * GiB, pid


def test_a100_has_no_fp8_tensor_cores_and_falls_back_to_bf16():
    for pid in ("a100-40gb", "a100-80gb", "a10g"):
        p = get_profile(pid)
        assert not p.has_native("fp8")
        assert p.compute_dtype_for("fp8") == "bf16"
        assert p.peak_flops_for("fp8") == p.peak_flops_per_s["bf16"]


def test_fp4_is_native_only_on_blackwell():
    native = {p.id for p in load_profiles().values() if p.has_native("fp4")}
    assert native == {"b200", "gb200", "rtx-5090", "rtx-pro-6000"}
    h100 = get_profile("h100-sxm")
    assert h100.compute_dtype_for("nvfp4") == "bf16"  # W4A16 weight-only kernels


def test_ridge_point_h100_bf16():
    # 989.4e12 FLOP/s / 3.35e12 B/s = 295.3 FLOP/B
    assert get_profile("h100-sxm").ridge_point_flops_per_byte("bf16") == pytest.approx(295.34, abs=0.01)
    assert get_profile("h100-sxm").ridge_point_flops_per_byte("bfloat16") == pytest.approx(295.34, abs=0.01)


def test_unknowns_are_none_not_zero():
    p = get_profile("cpu")
    assert p.kind == "cpu"
    assert p.interconnect_bandwidth_bytes_per_s is None
    assert p.unidirectional_interconnect_bytes_per_s is None
    assert p.peak_flops_for("fp32") == 1e11
    assert get_profile("h100-sxm").peak_flops_for("fp32") is None  # tensor-core rates only
    assert get_profile("gaudi3").price_per_hour_usd is None  # no public price found: None, not 0


def test_gb200_nvlink_domain_is_72():
    p = get_profile("gb200")
    assert p.gpus_per_node == 72
    assert "72" in p.notes


def test_math_dtype():
    assert math_dtype("torch.bfloat16") == "bf16"
    assert math_dtype("FP8") == "fp8"
    assert math_dtype("mxfp4") == "fp4"
    with pytest.raises(HardwareProfileError, match=r"fp9.*bf16"):
        math_dtype("fp9")


# --- lookup ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("h100-sxm", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("h100-sxm5", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("H100_SXM", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("H200", "h200"),
        ("h20", "h20"),
        ("A100", "a100-80gb"),
        ("A100-SXM4-40GB", "a100-40gb"),
        ("RTX 4090", "rtx-4090"),
        ("4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("MI300X", "mi300x"),
        ("L40S", "l40s"),
        ("CPU", "cpu"),
    ],
)
def test_get_profile_accepts_ids_aliases_and_device_names(given, expected):
    assert get_profile(given).id == expected


def test_unknown_id_lists_the_known_ids():
    with pytest.raises(HardwareProfileError) as info:
        get_profile("h300")
    msg = str(info.value)
    assert "unknown GPU 'h300'" in msg
    for pid in ("h100-sxm", "h200", "a100-80gb", "l40s", "cpu"):
        assert pid in msg
    assert ENV_VAR in msg


# --- matching detected devices ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device_name", "memory_bytes", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", 81_089 * MiB, "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", 81_559 * MiB, "h100-sxm"),  # NVML/nvidia-smi total also matches
        ("NVIDIA H100 80GB HBM3", None, "h100-sxm"),
        ("NVIDIA H100 PCIe", 81_008 * MiB, "h100-pcie"),
        ("NVIDIA H100 NVL", None, "h100-nvl"),
        ("NVIDIA H200", 143_156 * MiB, "h200"),
        ("NVIDIA H20", 97_285 * MiB, "h20"),
        ("NVIDIA A100-SXM4-80GB", 81_920 * MiB, "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", 40_536 * MiB, "a100-40gb"),
        ("A100-SXM4-40GB", None, "a100-40gb"),  # older drivers omit the vendor
        ("NVIDIA A100 80GB PCIe", 81_920 * MiB, "a100-pcie-80gb"),
        ("NVIDIA L40S", 45_589 * MiB, "l40s"),
        ("NVIDIA L4", None, "l4"),
        ("NVIDIA A10G", 22_587 * MiB, "a10g"),
        ("NVIDIA GeForce RTX 4090", 24_564 * MiB, "rtx-4090"),
        ("NVIDIA GeForce RTX 5090", None, "rtx-5090"),
        ("NVIDIA B200", 182_631 * MiB, "b200"),
        ("NVIDIA GB200", 189_471 * MiB, "gb200"),
        ("AMD Instinct MI300X", 196_592 * MiB, "mi300x"),
        # no match: another SKU, a MIG slice, a card with no profile, wrong memory
        ("NVIDIA H20", 141 * GiB, None),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * GiB, None),
        ("NVIDIA H100 80GB HBM3", 10 * GiB, None),
        ("NVIDIA A100-PCIE-40GB", 40_536 * MiB, None),
        ("NVIDIA L40", None, None),
        ("NVIDIA GeForce RTX 3090", 24_576 * MiB, "rtx-3090"),
    ],
)
def test_match_profile(device_name, memory_bytes, expected):
    found = match_profile(device_name, memory_bytes)
    assert (found.id if found else None) == expected


def test_profile_from_detected_is_labelled_and_unknowns_are_none():
    p = profile_from_detected("NVIDIA GeForce RTX 3090", 24_146 * MiB)
    assert p.id == "detected-rtx-3090"
    assert p.confidence == "C"
    assert "detected" in p.name and "No built-in profile" in p.notes
    assert p.memory_bytes == 24_146 * MiB and not p.memory_bytes_estimated
    assert p.hbm_bandwidth_bytes_per_s is None
    assert p.ridge_point_flops_per_byte("bf16") is None
    assert p.interconnect_kind is None
    with pytest.raises(HardwareProfileError, match=r"a roofline needs the HBM bandwidth of detected-rtx-3090"):
        p.known_hbm_bandwidth_bytes_per_s("a roofline")


def test_profile_from_detected_with_nvml_total_and_measurements():
    p = profile_from_detected(
        "NVIDIA A100 80GB PCIe",
        81_920 * MiB,
        memory_is_cuda_total=False,
        hbm_bandwidth_bytes_per_s=1.6e12,
        peak_flops_per_s={"bfloat16": 2.5e14},
    )
    assert p.memory_smi_bytes == 81_920 * MiB
    assert p.memory_bytes == 81_920 * MiB - 512 * MiB
    assert p.memory_bytes_estimated
    assert p.ridge_point_flops_per_byte("bf16") == pytest.approx(156.25)
    assert p.vendor == "NVIDIA"


# --- bad files ----------------------------------------------------------------------------------


def _mutate(**changes):
    def make() -> str:
        data = _h100_data()
        for key, value in changes.items():
            if value is _DROP:
                data.pop(key)
            else:
                data[key] = value
        return yaml.safe_dump(data)

    return make


_DROP = object()

BAD_YAMLS = [
    # (case, text or factory, fragments the message must contain)
    ("syntax error", lambda: "id: h100\nname: [unclosed\n", ["bad.yaml", "YAML syntax error", "line"]),
    ("not a mapping", lambda: "- h100\n- h200\n", ["bad.yaml", "expected a mapping", "list"]),
    (
        "unknown key",
        _mutate(hbm_bandwith_bytes_per_s=1e12),
        ["bad.yaml", "unknown key 'hbm_bandwith_bytes_per_s'", "did you mean 'hbm_bandwidth_bytes_per_s'"],
    ),
    (
        "negative bandwidth",
        _mutate(hbm_bandwidth_bytes_per_s=-1),
        ["bad.yaml: key 'hbm_bandwidth_bytes_per_s' must be > 0, got -1", "3.35e12 for 3.35 TB/s"],
    ),
    (
        "missing field",
        _mutate(memory_bytes=_DROP),
        ["bad.yaml", "required key 'memory_bytes' is missing", "bytes"],
    ),
    ("wrong type", _mutate(memory_bytes="lots"), ["bad.yaml", "key 'memory_bytes' must be a valid integer", "'lots'"]),
    ("float memory", _mutate(memory_bytes=79.6), ["bad.yaml", "key 'memory_bytes'", "79.6"]),
    (
        "unknown dtype",
        _mutate(peak_flops_per_s={"bf16": 1e15, "fp9": 1e15}),
        ["bad.yaml", "peak_flops_per_s.fp9", "not a dtype", "fp8"],
    ),
    (
        "zero flops",
        _mutate(peak_flops_per_s={"bf16": 0}),
        ["bad.yaml", "key 'peak_flops_per_s.bf16' must be > 0, got 0", "leave out a dtype"],
    ),
    (
        "sparse flops as text",
        _mutate(peak_flops_per_s={"bf16": "1979 TFLOPS"}),
        ["bad.yaml", "peak_flops_per_s.bf16", "DENSE"],
    ),
    ("bad interconnect", _mutate(interconnect_kind="nvlink9"), ["bad.yaml", "interconnect_kind", "nvlink9", "nvlink4"]),
    ("uppercase id", _mutate(id="H100-SXM"), ["bad.yaml", "key 'id'", "lowercase"]),
    ("bad confidence", _mutate(confidence="D"), ["bad.yaml", "key 'confidence'", "'D'"]),
    ("zero gpus", _mutate(gpus_per_node=0), ["bad.yaml", "key 'gpus_per_node' must be >= 1, got 0"]),
    (
        "smi and cuda swapped",
        _mutate(memory_bytes=81_559 * MiB, memory_smi_bytes=81_089 * MiB),
        ["bad.yaml", "exceeds memory_smi_bytes", "Swap"],
    ),
    (
        "sources typo",
        _mutate(sources={"hbm_bandwith": "x"}),
        ["bad.yaml", "sources key 'hbm_bandwith'", "did you mean"],
    ),
    (
        "efficiency typo",
        _mutate(efficiency={"bandwith_fraction": 0.8}),
        ["bad.yaml", "unknown key 'efficiency.bandwith_fraction'", "bandwidth_fraction"],
    ),
    (
        "bandwidth on no link",
        _mutate(interconnect_kind="none"),
        ["bad.yaml", "interconnect_kind is 'none'"],
    ),
]


@pytest.mark.parametrize(("case", "make", "fragments"), BAD_YAMLS, ids=[c[0] for c in BAD_YAMLS])
def test_bad_yaml_names_file_key_and_fix(tmp_path, case, make, fragments):
    path = tmp_path / "bad.yaml"
    path.write_text(make())
    with pytest.raises(HardwareProfileError) as info:
        read_profile(path)
    msg = str(info.value)
    for fragment in fragments:
        assert fragment in msg, f"{case}: {fragment!r} not in {msg!r}"
    # the same message reaches a user through the loader
    with pytest.raises(HardwareProfileError, match=r"bad\.yaml"):
        load_profiles(extra_dirs=[tmp_path])


def test_exponent_without_sign_still_reads_as_a_number(tmp_path):
    """PyYAML reads 3.35e12 as a string; pydantic turns it into the float."""
    text = (BUILTIN_DIR / "h100-sxm.yaml").read_text().replace("3.35e+12", "3.35e12")
    (tmp_path / "h100-sxm.yaml").write_text(text)
    assert read_profile(tmp_path / "h100-sxm.yaml").hbm_bandwidth_bytes_per_s == 3.35e12


def test_duplicate_id_in_one_folder_names_both_files(tmp_path):
    for name in ("one.yaml", "two.yaml"):
        (tmp_path / name).write_text(yaml.safe_dump(_h100_data()))
    with pytest.raises(HardwareProfileError, match=r"two\.yaml.*one\.yaml|one\.yaml.*two\.yaml"):
        load_profiles(extra_dirs=[tmp_path])


def test_a_folder_named_twice_is_read_once(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(BUILTIN_DIR))
    assert load_profiles(extra_dirs=[BUILTIN_DIR]) == load_profiles(extra_dirs=None)


def test_missing_user_folder_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nope"))
    with pytest.raises(HardwareProfileError, match=f"{ENV_VAR}.*nope.*not a folder"):
        load_profiles()


# --- user folders, overrides, calibrated cards --------------------------------------------------------


def test_env_var_folder_overrides_builtin_and_adds_cards(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    slower = _h100_data() | {"hbm_bandwidth_bytes_per_s": 3.0e12, "notes": "my derated H100"}
    (a / "h100-sxm.yaml").write_text(yaml.safe_dump(slower))
    custom = _h100_data() | {"id": "my-card", "name": "My card", "aliases": ["mine"], "device_names": ["My Card X"]}
    (b / "my-card.yaml").write_text(yaml.safe_dump(custom))
    monkeypatch.setenv(ENV_VAR, f"{a}{__import__('os').pathsep}{b}")

    profiles = load_profiles()
    assert profiles["h100-sxm"].hbm_bandwidth_bytes_per_s == 3.0e12
    assert get_profile("H100").notes == "my derated H100"  # aliases follow the override
    assert profile_path("h100-sxm") == a / "h100-sxm.yaml"
    assert get_profile("mine").id == "my-card"
    assert match_profile("My Card X", None).id == "my-card"
    assert profiles["h200"] == read_profile(BUILTIN_DIR / "h200.yaml")

    monkeypatch.delenv(ENV_VAR)
    assert load_profiles()["h100-sxm"].hbm_bandwidth_bytes_per_s == 3.35e12


def test_edited_file_is_reread(tmp_path):
    path = tmp_path / "h100-sxm.yaml"
    path.write_text(yaml.safe_dump(_h100_data() | {"tdp_watts": 600}))
    assert load_profiles(extra_dirs=[tmp_path])["h100-sxm"].tdp_watts == 600
    path.write_text(yaml.safe_dump(_h100_data() | {"tdp_watts": 650, "notes": "edited"}))
    assert load_profiles(extra_dirs=[tmp_path])["h100-sxm"].tdp_watts == 650


def test_calibrated_profile_gets_its_own_id(tmp_path, monkeypatch):
    base = get_profile("h100-sxm")
    calibrated = base.model_copy(
        update={
            "efficiency": Efficiency(kind="calibrated", bandwidth_fraction=0.86, source="H100 SXM, 2026-01-01"),
            "calibration_info": {"card": "NVIDIA H100 80GB HBM3", "driver": "570.124.06", "torch": "2.13.0"},
        }
    )
    saved = save_profile(calibrated, tmp_path)
    assert saved == tmp_path / "h100-sxm.yaml"
    monkeypatch.setenv(ENV_VAR, str(tmp_path))

    profiles = load_profiles()
    assert profiles["h100-sxm"] == base  # the datasheet card stays
    assert profiles["h100-sxm-calibrated"].efficiency.bandwidth_fraction == 0.86
    assert calibrated_for("H100").id == "h100-sxm-calibrated"
    assert calibrated_for("h200") is None
    assert get_profile("h100-sxm-calibrated").is_calibrated
    assert match_profile("NVIDIA H100 80GB HBM3", None).id == "h100-sxm"


def test_calibrated_file_name_marks_a_profile(tmp_path):
    (tmp_path / "l4.calibrated.yaml").write_text(yaml.safe_dump(get_profile("l4").model_dump(mode="json")))
    profiles = load_profiles(extra_dirs=[tmp_path])
    assert "l4-calibrated" in profiles and profiles["l4"] == get_profile("l4")
    assert calibrated_for("l4", extra_dirs=[tmp_path]).id == "l4-calibrated"


@pytest.mark.parametrize("pid", sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml")))
def test_save_and_read_round_trip(tmp_path, pid):
    original = get_profile(pid)
    path = save_profile(original, tmp_path)
    assert path.read_text().startswith("#")
    assert read_profile(path) == original


def test_detected_profile_round_trips(tmp_path):
    p = profile_from_detected("Some New Accelerator", 64 * GiB, calibration_info={"date": "2026-01-01"})
    assert read_profile(save_profile(p, tmp_path)) == p


def test_profiles_are_frozen():
    p = get_profile("h100-sxm")
    with pytest.raises(ValidationError):
        p.memory_bytes = 1  # type: ignore[misc]
    with pytest.raises(ValidationError):
        HardwareProfile.model_validate(_h100_data() | {"colour": "green"})


def test_every_field_has_a_description():
    for name, field in HardwareProfile.model_fields.items():
        assert field.description, name


def test_hardware_module_imports_neither_streamlit_nor_torch():
    code = "import sys, planner.hardware; print(sorted(m for m in ('streamlit', 'torch') if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert out.stdout.strip() == "[]"
