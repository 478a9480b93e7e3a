"""Device detection: which card (or CPU) the benchmarks run on, and which profile describes it.

``detect_device('cuda')`` reads torch (name, memory, capability, L2) and NVML (driver, clocks,
power limit, NVML memory total): read-only queries, nothing is set. Without a CUDA GPU it raises
``NoGPUError`` with a message the CLI and the app show as is. ``profile_for_device`` picks the
hardware profile: the given one, the one whose ``device_names`` match (``match_profile``), the
``cpu`` profile on CPU, or, when nothing matches, a detected profile whose peaks a short probe
measures (see ``planner.bench.suite``).
"""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path

from planner.bench.report import DeviceInfo
from planner.bench.safety import host_free_bytes, meminfo_bytes
from planner.errors import PlannerError
from planner.hardware import HardwareProfile, get_profile, match_profile

NO_GPU_MESSAGE = "no CUDA GPU found (torch.cuda.is_available() is False);"
NO_GPU_HINT = "run with --device cpu, or on a machine with an NVIDIA GPU and the CUDA build of torch"


class NoGPUError(PlannerError):
    """--device cuda was asked for and torch sees no CUDA GPU."""


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: str) -> str:
    """'cpu' or 'cuda' ('auto' picks cuda when available); anything else is an error."""
    key = device.strip().lower()
    if key.startswith("cuda:"):
        key = "cuda"
    if key == "auto":
        return "cuda" if cuda_available() else "cpu"
    if key not in ("cpu", "cuda"):
        raise PlannerError(f"unknown device {device!r};", hint="use cpu, cuda or auto.")
    return key


def detect_device(device: str = "cpu", index: int = 0) -> DeviceInfo:
    """DeviceInfo for 'cpu' or 'cuda' (device ``index``); NoGPUError when no CUDA GPU is there."""
    import torch

    kind = resolve_device(device)
    if kind == "cpu":
        return _cpu_info(torch)
    if not torch.cuda.is_available():
        build = "" if torch.version.cuda else f" (this torch, {torch.__version__}, is a CPU-only build)"
        raise NoGPUError(NO_GPU_MESSAGE, hint=NO_GPU_HINT + build + ".")
    return _cuda_info(torch, index)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _cpu_cache_bytes() -> int | None:
    """Largest CPU cache (L3 usually) from sysfs; None when unreadable."""
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in base.glob("index*"):
            text = (idx / "size").read_text().strip().upper()
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1], 1)
            value = int(text.rstrip("KMG")) * mult
            best = max(best or 0, value)
    except (OSError, ValueError):
        return best
    return best


def _cpu_info(torch) -> DeviceInfo:
    return DeviceInfo(
        kind="cpu",
        name=_cpu_name(),
        memory_total_bytes=meminfo_bytes("MemTotal"),
        memory_free_bytes=host_free_bytes(),
        l2_cache_bytes=_cpu_cache_bytes(),
        torch_version=torch.__version__,
        cpu_threads=torch.get_num_threads(),
        notes=("CPU run: no NVML, no CUDA graphs, no fp8 GEMMs; times are torch's CPU kernels",),
    )


def _cuda_info(torch, index: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    with torch.cuda.device(index):
        free, total = torch.cuda.mem_get_info()
    cap = torch.cuda.get_device_capability(index)
    notes: list[str] = []
    pci = _pci_bus_id(props)
    nv = nvml_device_facts(index, pci, notes)
    fp8 = cap >= (8, 9) and hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")
    return DeviceInfo(
        kind="cuda",
        name=torch.cuda.get_device_name(index),
        index=index,
        pci_bus_id=pci,
        memory_total_bytes=int(total),
        memory_free_bytes=int(free),
        nvml_memory_total_bytes=nv.get("memory_total_bytes"),
        compute_capability=f"{cap[0]}.{cap[1]}",
        multiprocessors=getattr(props, "multi_processor_count", None),
        l2_cache_bytes=getattr(props, "L2_cache_size", None),
        driver_version=nv.get("driver_version"),
        cuda_version=torch.version.cuda,
        torch_version=torch.__version__,
        sm_clock_mhz=nv.get("sm_clock_mhz"),
        sm_clock_max_mhz=nv.get("sm_clock_max_mhz"),
        memory_clock_mhz=nv.get("memory_clock_mhz"),
        power_limit_watts=nv.get("power_limit_watts"),
        fp8_supported=fp8,
        cuda_graphs_supported=True,
        notes=tuple(notes),
    )


def _pci_bus_id(props) -> str | None:
    """'00000000:65:00.0' from torch's device properties (integers there), as NVML takes it; None if absent."""
    parts = [getattr(props, k, None) for k in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(p, int) for p in parts):
        return f"{parts[0]:08X}:{parts[1]:02X}:{parts[2]:02X}.0"
    return None


def nvml_handle(nvml, index: int, pci_bus_id: str | None = None):
    """NVML handle of the torch device: by PCI bus id when torch gives one (CUDA_VISIBLE_DEVICES
    renumbers devices for torch, not for NVML), else by index."""
    if pci_bus_id:
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        except Exception:  # noqa: BLE001 (a stale bus id falls back to the index)
            pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [v.strip() for v in visible.split(",") if v.strip()]
    if ids and index < len(ids) and ids[index].isdigit():
        index = int(ids[index])
    return nvml.nvmlDeviceGetHandleByIndex(index)


def nvml_device_facts(index: int, pci_bus_id: str | None, notes: list[str]) -> dict:
    """Driver, clocks, power limit and NVML total of one GPU; empty (with a note) without NVML."""
    try:
        import pynvml as nvml
    except ImportError as exc:
        notes.append(f"NVML unavailable (pynvml not importable: {exc}); install nvidia-ml-py for driver and clocks")
        return {}
    out: dict = {}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 (NVML is optional: a failure is a note)
        notes.append(f"NVML unavailable (nvmlInit failed: {exc})")
        return {}
    try:
        handle = nvml_handle(nvml, index, pci_bus_id)
        reads = {
            "driver_version": lambda: _text(nvml.nvmlSystemGetDriverVersion()),
            "memory_total_bytes": lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total),
            "sm_clock_mhz": lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "sm_clock_max_mhz": lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "memory_clock_mhz": lambda: int(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            "power_limit_watts": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
        }
        for key, read in reads.items():
            try:
                out[key] = read()
            except Exception as exc:  # noqa: BLE001 (one unreadable field is a note)
                notes.append(f"NVML could not read {key}: {exc}")
    except Exception as exc:  # noqa: BLE001 (NVML is optional: a failure is a note)
        notes.append(f"NVML could not open device {index}: {exc}")
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def profile_for_device(dev: DeviceInfo, given: HardwareProfile | None) -> tuple[HardwareProfile | None, str, str]:
    """(profile or None, origin, note). None means no profile matches: the suite probes the peaks."""
    if given is not None:
        return given, "given", f"profile {given.id} passed by the caller"
    if dev.kind == "cpu":
        return get_profile("cpu"), "cpu", "the generic CPU profile (rough placeholder peaks, meant to be calibrated)"
    found = match_profile(dev.name, dev.memory_total_bytes)
    if found is not None:
        return found, "matched", f"device name {dev.name!r} and its memory match profile {found.id}"
    return (
        None,
        "detected",
        (
            f"no hardware profile lists the device name {dev.name!r} with {dev.memory_total_bytes} bytes; "
            "using a detected profile whose peaks were measured by a probe (copy, large GEMM)"
        ),
    )
