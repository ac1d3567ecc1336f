"""GPUs side by side: ``roofprof predict --gpu a,b,c`` and ``roofprof.compare_gpus``.

The comparison a user expects: an H100 SXM has ~3.2x an A100's dense BF16 FLOP/s but only
~1.6x its bandwidth (data/gpus.json: 989.4 / 312 TFLOP/s, 3.35 / 2.039 TB/s), so a memory-bound
decode gains the bandwidth ratio and a compute-bound prefill nearly the peak ratio.
"""

import csv
import io
import json

import pytest

import roofprof
from roofprof.api import compare_gpus, parse_gpu_list
from roofprof.cli import main
from roofprof.errors import ConfigError, UnknownNameError
from roofprof.prediction.memory_fit import fit_memory
from roofprof.specs import list_gpus, load_gpu
from roofprof.workload import Parallel, Scenario

# a comparison of datasheet rows warns of nothing: a stray warning fails the test
pytestmark = pytest.mark.filterwarnings("error")


def _run(capsys, *args):
    rc = main(["predict", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_h100_over_a100_decode_follows_bandwidth_prefill_follows_peak():
    c = compare_gpus("llama-3.1-8b", ["a100-sxm-80gb", "h100-sxm"], prompt_tokens=2000)
    a100, h100 = c.rows
    assert (a100.ttft_speedup, a100.decode_speedup) == (1.0, 1.0)
    # the datasheet ratios come from data/gpus.json
    assert h100.peak_flops_ratio == pytest.approx(989.4 / 312)
    assert h100.bandwidth_ratio == pytest.approx(3.35 / 2.039)
    # batch-1 decode is memory-bound end to end: exactly the bandwidth ratio (~1.64x)
    assert h100.prediction.decode.bound == a100.prediction.decode.bound == "memory"
    assert h100.decode_speedup == pytest.approx(3.35 / 2.039, rel=1e-6)
    # a 2,000-token prefill is compute-bound: nearly the peak ratio (~3x), its memory-bound
    # ops (norms, elementwise) at the bandwidth ratio pull it a little below
    assert h100.prediction.prefill.bound == "compute"
    assert h100.bandwidth_ratio < h100.ttft_speedup < h100.peak_flops_ratio
    assert h100.ttft_speedup == pytest.approx(3.0, abs=0.1)
    assert h100.ttft_speedup == pytest.approx(a100.ttft_seconds / h100.ttft_seconds)
    # each row is the same prediction a single --gpu gives
    single = roofprof.predict("llama-3.1-8b", gpu="h100-sxm", prompt_tokens=2000)
    assert h100.decode_tokens_per_second == pytest.approx(single.tokens_per_second)
    assert h100.ttft_seconds == pytest.approx(single.prefill.seconds)
    assert h100.ridge_flops_per_byte == pytest.approx(989.4e12 / 3.35e12)


def test_cli_table_one_row_per_gpu_with_ratios_and_memory_fit(capsys):
    rc, out, err = _run(capsys, "--gpu", "h100-sxm,a100-sxm-80gb,mi300x", "--prompt", "2000")
    assert rc == 0, err
    assert "GPUs side by side" in out and "ratios to h100-sxm" in out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    h100, a100, mi = lines["h100-sxm"], lines["a100-sxm-80gb"], lines["mi300x"]
    # TTFT, bound, TTFT x, tok/s, bound, tok/s x, peak x, BW x, ridge, fits
    assert h100[1:3] == ["33.2", "ms"] and h100[3:5] == ["compute", "1.00"]
    assert a100[5] == "133.4" and a100[7] == "0.61" and a100[9] == "0.61"  # 2.039 / 3.35
    assert a100[8] == "0.32" and a100[10] == "153"  # 312 / 989.4; ridge 312 / 2.039
    assert h100[-2:] == ["yes", "24.3/80.0"] and mi[-2:] == ["yes", "35.5/192.0"]
    assert "mi300x: datasheet figures only (no device backend" in out


def test_cli_json_is_a_list_equal_to_the_api(capsys):
    rc, out, err = _run(capsys, "--gpu", "a100-sxm-80gb,h100-sxm", "-f", "json")
    assert rc == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list) and [r["gpu"] for r in rows] == ["a100-sxm-80gb", "h100-sxm"]
    api = compare_gpus("llama-3.1-8b", "a100-sxm-80gb,h100-sxm").to_list()
    assert rows == json.loads(json.dumps(api))
    h100 = rows[1]
    assert h100["vs_first"]["gpu"] == "a100-sxm-80gb"
    assert h100["vs_first"]["decode_speedup"] == pytest.approx(3.35 / 2.039)
    assert h100["memory"]["capacity_bytes"] == 80e9 and h100["memory"]["fits"] is True
    assert h100["ridge_flops_per_byte"] == pytest.approx(989.4 / 3.35)
    assert {"ttft_seconds", "decode_tokens_per_second", "prefill_bound", "decode_bound"} <= set(
        h100
    )


def test_cli_csv_one_line_per_gpu(capsys):
    rc, out, err = _run(capsys, "--gpu", "h100-sxm,h200", "-f", "csv")
    assert rc == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["gpu"] for r in rows] == ["h100-sxm", "h200"]
    assert float(rows[1]["vs_first_decode_speedup"]) == pytest.approx(4.8 / 3.35, rel=1e-6)
    assert rows[1]["memory_capacity_bytes"] == "141000000000.0"


@pytest.mark.parametrize(
    ("gpus", "says"),
    [
        ("h100-sxm,h1000", "unknown GPU 'h1000'; valid choices: h100"),
        ("h100-sxm,,a100", "empty GPU id"),
        ("h100-sxm,H100", "GPU h100-sxm is named twice"),
    ],
)
def test_bad_gpu_lists_are_one_line_exit_2(capsys, gpus, says):
    rc, out, err = _run(capsys, "--gpu", gpus)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and says in err and "Traceback" not in err
    if "unknown" in says:  # every valid id is named, the AMD rows included
        assert all(g.id in err for g in list_gpus())


@pytest.mark.parametrize(
    "extra",
    [["--estimator", "measured"], ["--roofline", "roofline.json"], ["--plot", "x.png"]],
)
def test_what_a_comparison_cannot_take_is_refused(capsys, extra):
    rc, out, err = _run(capsys, "--gpu", "h100-sxm,a100-sxm-80gb", *extra)
    assert rc == 2 and err.startswith("roofprof: error: ") and err.count("\n") == 1


def test_each_gpu_states_its_own_memory_fit():
    c = compare_gpus("llama-3.1-70b", "h100-sxm,mi300x,rtx-5090", prompt_tokens=2048)
    fits = {r.gpu.id: r.memory for r in c.rows}
    assert not fits["h100-sxm"].fits and fits["mi300x"].fits and not fits["rtx-5090"].fits
    scenario = Scenario.of("llama-3.1-70b", "decode", prompt_tokens=2048)
    for gid, fit in fits.items():
        assert fit == fit_memory(scenario, gid)
        assert fit.capacity_bytes == load_gpu(gid).memory_bytes
    # a layout is stated, not refused: TP 2 fits on two H100s, TP 2 of 5090s still does not
    c2 = compare_gpus(
        "llama-3.1-70b", "h100-sxm,rtx-5090", prompt_tokens=2048, parallel=Parallel(tp=2)
    )
    assert [r.memory.fits for r in c2.rows] == [True, False]
    assert c2.rows[0].prediction.layout == Parallel(tp=2)


def test_a_sweep_compares_each_point_with_the_first_gpu_at_that_point():
    c = compare_gpus("llama-3.1-8b", "a100-sxm-80gb,h100-sxm", batches=(1, 64), prompt_tokens=256)
    assert [(r.gpu.id, r.prediction.decode.workload.batch) for r in c.rows] == [
        ("a100-sxm-80gb", 1),
        ("a100-sxm-80gb", 64),
        ("h100-sxm", 1),
        ("h100-sxm", 64),
    ]
    for i in (2, 3):
        base = c.rows[i - 2]
        assert c.rows[i].decode_speedup == pytest.approx(
            c.rows[i].decode_tokens_per_second / base.decode_tokens_per_second
        )


def test_parse_gpu_list_and_the_facade():
    assert [g.id for g in parse_gpu_list(["H100", load_gpu("mi355x")])] == ["h100-sxm", "mi355x"]
    with pytest.raises(UnknownNameError):
        parse_gpu_list("h100-sxm,z9")
    with pytest.raises(ConfigError):
        parse_gpu_list("")
    assert roofprof.compare_gpus is compare_gpus and "compare_gpus" in roofprof.__all__
    c = roofprof.compare_gpus("llama-3.1-8b", ["h100-sxm"])
    assert len(c.rows) == 1 and c.rows[0].decode_speedup == 1.0


def test_an_empirical_comparison_uses_each_gpus_published_ceilings():
    with pytest.warns(UserWarning, match="published ceilings of"):
        emp = compare_gpus("llama-3.1-8b", "h100-sxm,a100-sxm-80gb", estimator="empirical")
    assert {r.prediction.estimator for r in emp.rows} == {"empirical"}
    spec = compare_gpus("llama-3.1-8b", "h100-sxm,a100-sxm-80gb")
    # published ceilings sit below the datasheet: each GPU is slower than its spec row
    for e, s in zip(emp.rows, spec.rows, strict=True):
        assert e.decode_tokens_per_second < s.decode_tokens_per_second


def test_ratios_over_mixed_rooflines_are_flagged():
    """The calibrated estimator starts from published ceilings where a GPU has them (H100) and
    from the datasheet where it has none (MI300X): the comparison says so."""
    with pytest.warns(UserWarning, match="start from different rooflines"):
        c = compare_gpus("llama-3.1-8b", "h100-sxm,mi300x", estimator="calibrated")
    assert [r.prediction.estimator for r in c.rows] == ["calibrated", "calibrated"]


# --------------------------------------------------------------------------- AMD: analytic only


def test_amd_rows_are_analytic_only():
    for gid in ("mi300x", "mi325x", "mi355x"):
        spec = load_gpu(gid)
        assert (spec.vendor, spec.measurable) == ("amd", False)
        assert "no amd device backend" in " ".join(spec.notes).lower()
    assert load_gpu("h100-sxm").measurable and load_gpu("rtx-5090").vendor == "nvidia"
    # the datasheet predicts them; nothing measures them
    p = roofprof.predict("llama-3.1-8b", gpu="mi300x", prompt_tokens=2000)
    assert p.estimator == "spec" and p.machine == "mi300x"
    with pytest.raises(ConfigError, match="no device backend of roofprof measures an AMD GPU"):
        roofprof.predict("llama-3.1-8b", gpu="mi300x", estimator="measured", device="cpu")


def test_the_cuda_device_refuses_a_gpu_whose_name_is_an_amd_row():
    """A CUDA-looking device (a ROCm build presents one) named like an AMD row is not measured."""
    from fakegpu import fake_cupy, fake_nvml

    from roofprof.devices.cuda.device import CudaDevice
    from roofprof.errors import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match="AMD GPU: no device backend"):
        CudaDevice(0, cupy=fake_cupy(), nvml=fake_nvml(name="AMD Instinct MI300X"))
    assert CudaDevice(0, cupy=fake_cupy(), nvml=fake_nvml()).info.spec_id == "h100-sxm"


def test_amd_collectives_use_the_infinity_fabric_links():
    from roofprof.prediction.collectives import CollectiveModel

    model = CollectiveModel.for_gpu("mi300x")
    # 7 links x 64 GB/s per direction, at the default link efficiency (no published RCCL figure)
    assert model.ring_busbw_bytes_per_s == pytest.approx(0.8 * 448e9)
    assert "Infinity Fabric" in model.notes[0]
    pcie_only = CollectiveModel.for_gpu("rtx-5090")
    assert pcie_only.ring_busbw_bytes_per_s == pytest.approx(0.8 * 16 * 3.938e9)
