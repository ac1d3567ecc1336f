"""The one NVML shim (roofprof.devices._nvml): sessions, queries that return a sentinel,
error kinds from pynvml's exception classes, PCI bus ids with their domain."""

from __future__ import annotations

import sys
import types

import pytest
from fakegpu import fake_nvml

from roofprof.devices import _nvml


def nvml_with_error_classes(fail_init: str | None = None):
    """fake_nvml plus pynvml's NVMLError_* subclasses; ``fail_init`` names the one nvmlInit
    raises."""
    nv = fake_nvml(gpus=(("GPU A", "00000000:1B:00.0"), ("GPU B", "00000001:1B:00.0")))
    for suffix in (
        "LibraryNotFound",
        "DriverNotLoaded",
        "NotSupported",
        "FunctionNotFound",
        "GpuIsLost",
    ):
        setattr(nv, f"NVMLError_{suffix}", type(f"NVMLError_{suffix}", (nv.NVMLError,), {}))
    if fail_init:

        def init():
            nv.calls["init"] += 1
            raise getattr(nv, f"NVMLError_{fail_init}")("scripted")

        nv.nvmlInit = init
    return nv


def test_na_is_a_falsy_singleton():
    assert not _nvml.NA and repr(_nvml.NA) == "N/A" and type(_nvml.NA)() is _nvml.NA


def test_query_returns_the_value_decoded_or_the_sentinel():
    nv = nvml_with_error_classes()

    def busy(h):
        raise nv.NVMLError_GpuIsLost("lost")

    nv.nvmlDeviceGetSerial = lambda h: b"1234"
    nv.nvmlDeviceGetPowerUsage = busy
    assert _nvml.query("nvmlDeviceGetSerial", "h", nvml=nv) == "1234"
    assert _nvml.query("nvmlDeviceGetPowerUsage", "h", nvml=nv) is _nvml.NA
    assert _nvml.query("nvmlDeviceGetPowerUsage", "h", default=None, nvml=nv) is None
    assert _nvml.query("nvmlNoSuchFunction", nvml=nv) is _nvml.NA
    assert _nvml.query(lambda: 7, nvml=nv) == 7


def test_error_kinds_come_from_the_exception_classes():
    nv = nvml_with_error_classes()
    assert _nvml.error_kind(nv.NVMLError_NotSupported("x"), nv) == "not_supported"
    assert _nvml.error_kind(nv.NVMLError_FunctionNotFound("x"), nv) == "function_not_found"
    assert (
        _nvml.error_kind(nv.NVMLError_LibraryNotFound("Driver Not Loaded"), nv)
        == "library_not_found"
    )
    assert _nvml.error_kind(nv.NVMLError("LibraryNotFound"), nv) == "other"  # never by message text
    assert _nvml.error_kind(AttributeError("nvmlX"), nv) == "missing"
    assert set(_nvml.ERROR_KINDS) >= {
        "library_not_found",
        "driver_not_loaded",
        "not_installed",
        "other",
    }


def test_one_session_per_process_counted():
    nv = nvml_with_error_classes()
    assert _nvml.init(nv) == "" and _nvml.init(nv) == ""
    with _nvml.session(nv) as inside:
        assert inside is nv
    assert nv.calls == {"init": 1, "shutdown": 0}
    _nvml.shutdown(nv)
    assert nv.calls["shutdown"] == 0
    _nvml.shutdown(nv)
    _nvml.shutdown(nv)  # one too many: ignored
    assert nv.calls == {"init": 1, "shutdown": 1}


@pytest.mark.parametrize(
    "cls, kind, reason",
    [
        ("LibraryNotFound", "library_not_found", "no NVIDIA driver (NVML library not found)"),
        ("DriverNotLoaded", "driver_not_loaded", "NVIDIA driver not loaded"),
        ("GpuIsLost", "gpu_is_lost", "NVML unavailable: scripted"),
    ],
)
def test_start_up_failures_are_reasons_not_exceptions(cls, kind, reason):
    nv = nvml_with_error_classes(fail_init=cls)
    assert _nvml.init(nv) == reason
    with pytest.raises(_nvml.NvmlUnavailable) as err:
        with _nvml.session(nv):
            pass
    assert err.value.kind == kind and str(err.value) == reason
    assert _nvml.gpus(nv) == ([], reason)
    _nvml.shutdown(nv)  # nothing to shut down
    assert nv.calls["shutdown"] == 0


def test_a_hung_nvml_start_is_a_reason_after_the_timeout(monkeypatch):
    """A wedged driver can block nvmlInit for good: the start gives up and says so."""
    import threading

    nv = nvml_with_error_classes()
    release = threading.Event()

    def init():
        nv.calls["init"] += 1
        release.wait()

    nv.nvmlInit = init
    monkeypatch.setattr(_nvml, "INIT_TIMEOUT_S", 0.05)
    try:
        reason = _nvml.init(nv)
        assert reason == "NVML did not start within 0.05 s (a hung NVIDIA driver?)"
        assert _nvml.gpus(nv) == ([], reason)
        with pytest.raises(_nvml.NvmlUnavailable) as err:
            with _nvml.session(nv):
                pass
        assert err.value.kind == "timeout"
        # while the first start is still blocked, later ones answer at once, not queue behind it
        assert nv.calls["init"] == 1
    finally:
        release.set()
    _nvml.shutdown(nv)  # never started: nothing to shut down
    assert nv.calls["shutdown"] == 0
    # once the blocked start has returned, the next start tries again (and here succeeds)
    for t in threading.enumerate():
        if t.name == "roofprof-nvml-init":
            t.join(5)
    nv.nvmlInit = lambda: nv.calls.__setitem__("init", nv.calls["init"] + 1)
    assert _nvml.init(nv) == "" and nv.calls["init"] == 2
    _nvml.shutdown(nv)


def test_a_shutdown_from_a_finalizer_inside_a_start_does_not_deadlock(monkeypatch):
    """The garbage collector runs a device's ``weakref.finalize(..., shutdown, nvml)`` in
    whatever thread allocates: here, inside a start that holds the module's lock."""
    import threading

    held, starting = nvml_with_error_classes(), nvml_with_error_classes()
    assert _nvml.init(held) == ""  # a device's session, which its finalizer will end
    real = _nvml._init_within

    def init_with_gc(nv, timeout_s):
        _nvml.shutdown(held)  # the finalizer, run by the collector at an allocation here
        real(nv, timeout_s)

    monkeypatch.setattr(_nvml, "_init_within", init_with_gc)
    result = []
    worker = threading.Thread(target=lambda: result.append(_nvml.init(starting)), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "start and a finalizer's shutdown deadlocked"
    assert result == [""] and held.calls["shutdown"] == 1
    _nvml.shutdown(starting)


def test_without_pynvml_everything_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(_nvml.NvmlUnavailable) as err:
        _nvml.load()
    assert err.value.kind == "not_installed"
    assert _nvml.init() == "nvidia-ml-py (pynvml) is not installed"
    assert _nvml.gpus() == ([], "nvidia-ml-py (pynvml) is not installed")
    assert _nvml.query("nvmlDeviceGetCount", default=-1) == -1


def test_gpus_lists_names_and_pci_ids_then_shuts_down():
    nv = nvml_with_error_classes()
    listed, reason = _nvml.gpus(nv)
    assert reason == "" and [(g.index, g.name, g.pci_bus_id) for g in listed] == [
        (0, "GPU A", "00000000:1B:00.0"),
        (1, "GPU B", "00000001:1B:00.0"),
    ]
    assert nv.calls == {"init": 1, "shutdown": 1}
    empty = fake_nvml(gpus=())
    assert _nvml.gpus(empty) == ([], "NVML reports no GPU")


def test_pci_ids_compare_in_full_domain_included():
    assert _nvml.pci_bus_key("00000001:1B:00.0") == (1, 0x1B, 0, 0)
    assert _nvml.same_pci_bus(b"00000000:1B:00.0", "0000:1b:00.0")
    assert not _nvml.same_pci_bus("00000001:1B:00.0", "0000:1B:00.0")
    assert not _nvml.same_pci_bus("garbage", "garbage")
    nv = nvml_with_error_classes()
    with _nvml.session(nv):
        assert _nvml.index_for_pci("0001:1b:00.0", nv) == 1
        assert _nvml.index_for_pci("0000:1B:00.0", nv) == 0
        assert _nvml.index_for_pci("0002:1B:00.0", nv) is None


def test_telemetry_and_counters_start_nvml_through_the_shim(monkeypatch):
    from roofprof.counters import detect_compute_capability
    from roofprof.telemetry import NvmlSampler

    nv = fake_nvml()
    _nvml.init(nv)  # a holder (the CUDA device) keeps the session up
    try:
        for _ in range(2):
            with NvmlSampler(0, interval_s=0.001, nvml=nv):
                pass
        assert nv.calls == {"init": 1, "shutdown": 0}
    finally:
        _nvml.shutdown(nv)
    pynvml = fake_nvml()
    pynvml.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    assert detect_compute_capability() == "9.0"
    assert pynvml.calls == {"init": 1, "shutdown": 1}
    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace())  # no functions at all
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert detect_compute_capability() is None
