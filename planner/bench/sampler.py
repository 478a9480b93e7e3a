"""GPU utilization sampled by NVML while the benchmarks run, read as the seed's diagnosis.

A background thread calls ``nvmlDeviceGetUtilizationRates`` every ``interval_s`` and files each
sample under the benchmark group running at that moment (``tag``). NVML reports two percentages
over its own sample period (1/6 s to 1 s depending on the card): ``gpu``, the share of time any
kernel was running, and ``memory``, the share of time device memory was being read or written.
Their reading (``diagnose``):

* gpu high (>= 60 %), memory low (< 30 %): compute-bound;
* memory high (>= 60 %): memory-bound (kernels are busy moving bytes, so gpu is usually high too);
* both low (< 30 %): overhead/scheduling-bound (the card waits for the host);
* anything else: mixed.

No NVML (CPU runs, pynvml missing, driver refusing) gives ``status='unavailable'`` with the
reason, never an exception. Sampling only reads; it sets nothing on the card.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict

from planner.bench.device import nvml_handle
from planner.bench.report import UtilizationReading, UtilizationReport

HIGH_PCT = 60.0
LOW_PCT = 30.0


def diagnose(gpu_util_pct: float, memory_util_pct: float) -> str:
    """The bound two NVML utilizations imply (thresholds: module docstring)."""
    if memory_util_pct >= HIGH_PCT:
        return "memory-bound"
    if gpu_util_pct >= HIGH_PCT and memory_util_pct < LOW_PCT:
        return "compute-bound"
    if gpu_util_pct < LOW_PCT and memory_util_pct < LOW_PCT:
        return "overhead/scheduling-bound"
    return "mixed"


class UtilizationSampler:
    """Context manager: samples NVML utilization of one GPU in a daemon thread."""

    def __init__(
        self, device_kind: str, index: int = 0, interval_s: float = 0.05, nvml=None, pci_bus_id: str | None = None
    ):
        self.device_kind = device_kind
        self.index = index
        self.interval_s = interval_s
        self._nvml = nvml
        self._pci = pci_bus_id
        self._tag = "setup"
        self._samples: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self._order: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle = None
        self.reason: str | None = None

    # --------------------------------------------------------------------------- lifecycle

    def start(self) -> UtilizationSampler:
        if self.device_kind != "cuda":
            self.reason = "device is cpu: NVML samples NVIDIA GPUs only"
            return self
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                self.reason = f"pynvml is not importable ({exc}); install nvidia-ml-py"
                return self
            nvml = pynvml
        try:
            nvml.nvmlInit()
            self._handle = nvml_handle(nvml, self.index, self._pci)
            nvml.nvmlDeviceGetUtilizationRates(self._handle)  # fails here, not in the thread, if unsupported
        except Exception as exc:  # noqa: BLE001 (no NVML means no utilisation, never a failed suite)
            self.reason = f"NVML failed: {type(exc).__name__}: {exc}"
            self._handle = None
            self._shutdown(nvml)
            return self
        self._nvml = nvml
        self._thread = threading.Thread(target=self._run, name="planner-nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def tag(self, benchmark: str) -> None:
        """File the following samples under ``benchmark``."""
        self._tag = benchmark

    def _run(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(self._handle)
                tag = self._tag
                if tag not in self._samples:
                    self._order.append(tag)
                self._samples[tag].append((float(rates.gpu), float(rates.memory)))
            except Exception as exc:  # noqa: BLE001 (a driver hiccup ends sampling, not the suite)
                self.reason = f"NVML sampling stopped: {type(exc).__name__}: {exc}"
                return
            self._stop.wait(self.interval_s)

    def stop(self) -> UtilizationReport:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._shutdown(self._nvml)
            self._thread = None
        return self.report()

    def _shutdown(self, nvml) -> None:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()

    def __enter__(self) -> UtilizationSampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----------------------------------------------------------------------------- result

    def report(self) -> UtilizationReport:
        if self._handle is None:
            return UtilizationReport(
                status="unavailable", reason=self.reason or "NVML not started", interval_s=self.interval_s
            )
        readings = []
        for tag in self._order:
            samples = self._samples[tag]
            gpu = sum(s[0] for s in samples) / len(samples)
            mem = sum(s[1] for s in samples) / len(samples)
            readings.append(
                UtilizationReading(
                    benchmark=tag,
                    samples=len(samples),
                    gpu_util_pct=round(gpu, 1),
                    memory_util_pct=round(mem, 1),
                    diagnosis=diagnose(gpu, mem),
                )
            )
        return UtilizationReport(status="ok", reason=self.reason, interval_s=self.interval_s, readings=readings)


def sample_for(seconds: float, **kwargs) -> UtilizationReport:
    """Sample for ``seconds`` and report (a helper for scripts and tests)."""
    with UtilizationSampler(**kwargs) as s:
        time.sleep(seconds)
    return s.report()
