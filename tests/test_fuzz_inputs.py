"""Property tests of the input files: model configs, roofline files and ncu CSV exports.

Each parser, given a mutation of a real input, returns a usable value (finite, positive
sizes; predictions that are strict, finite, non-negative JSON) or raises a one-line
:class:`~roofprof.errors.RoofprofError`: never another exception, never an absurd value.

Long run: ``ROOFPROF_FUZZ=long pytest tests/test_fuzz_inputs.py`` (see tests/fuzz_support.py).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
from fuzz_support import assert_finite_non_negative, examples, numbers, strict_json, time_bound
from hypothesis import given
from hypothesis import strategies as st

import roofprof
from roofprof.errors import RoofprofError
from roofprof.units import dumps_strict

pytestmark = time_bound()  # CI bound per property test; none for long runs

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
CONFIG = json.loads((REPO / "data" / "models" / "llama-3.2-1b.json").read_text())

#: Adversarial JSON scalars: NaN, ±inf, 1e308, huge and negative integers, bools, strings.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, -1, 1, 2, 3, 7, 64, 4096, 2**31, 2**63, 10**400, -(10**30)]),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, 5e-324, 0.5]),
    st.sampled_from(["false", "true", "4096", "nan", "", "llama", "[/]", "bf16"]),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _single_line(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, repr(text)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("inputs")


# --------------------------------------------------------------------------- configs


@st.composite
def configs(draw):
    cfg = dict(CONFIG)
    keys = sorted(cfg) + [
        "head_dim",
        "num_key_value_heads",
        "rope_scaling",
        "model_type",
        "architectures",
        "_roofprof_id",
        "tie_word_embeddings",
    ]
    for _ in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from(keys))
        if draw(st.integers(0, 5)) == 0:
            cfg.pop(key, None)
        else:
            cfg[key] = draw(JSON_VALUES)
    return cfg


def _check_model(path: Path) -> None:
    from roofprof.specs import load_model

    try:
        spec = load_model(str(path))
    except RoofprofError as exc:
        _single_line(exc)
        return
    for name in (
        "hidden_size",
        "intermediate_size",
        "num_layers",
        "num_heads",
        "num_kv_heads",
        "head_dim",
        "vocab_size",
        "max_position_embeddings",
    ):
        value = getattr(spec, name)
        assert isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31, name
    assert isinstance(spec.tie_word_embeddings, bool)
    assert math.isfinite(spec.rope_theta) and spec.rope_theta > 0
    assert math.isfinite(spec.rms_norm_eps) and spec.rms_norm_eps > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            prediction = roofprof.predict(spec, gpu="h100", prompt_tokens=16, batch=1)
        except RoofprofError as exc:
            _single_line(exc)
            return
    assert_finite_non_negative(strict_json(dumps_strict(prediction.to_dict())))


@examples(120)
@given(cfg=configs())
def test_config_mutations_load_or_fail_in_one_line(folder, cfg):
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))  # allow_nan: NaN/Infinity literals reach the loader
    _check_model(path)


@examples(60)
@given(cut=st.integers(0, 2000), junk=st.binary(max_size=8), at=st.integers(0, 2000))
def test_config_byte_mutations_load_or_fail_in_one_line(folder, cut, junk, at):
    data = json.dumps(CONFIG, indent=2).encode()
    data = data[:cut] if cut < len(data) else data
    data = data[:at] + junk + data[at:]
    path = folder / "config.json"
    path.write_bytes(data)
    _check_model(path)


# --------------------------------------------------------------------------- rooflines


def _roofline_file() -> dict:
    from roofprof.roofline import Roofline
    from roofprof.specs import load_gpu

    return {
        "schema": 1,
        "complete": True,
        "roofline": Roofline.from_spec(load_gpu("h100")).to_dict(),
    }


ROOFLINE = _roofline_file()


@st.composite
def rooflines(draw):
    doc = json.loads(json.dumps(ROOFLINE))
    ceilings = doc["roofline"]["ceilings"]
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, 3))
        if where == 0:
            doc[draw(st.sampled_from(["complete", "roofline", "schema"]))] = draw(JSON_VALUES)
        elif where == 1 and isinstance(doc.get("roofline"), dict):
            doc["roofline"][draw(st.sampled_from(["device", "ceilings"]))] = draw(JSON_VALUES)
        elif isinstance(ceilings, list) and ceilings:
            c = draw(st.sampled_from(ceilings))
            if isinstance(c, dict):
                key = draw(
                    st.sampled_from(
                        ["name", "kind", "value", "dtype", "level", "source", "clock_mhz", "note"]
                    )
                )
                if draw(st.integers(0, 4)) == 0:
                    c.pop(key, None)
                else:
                    c[key] = draw(JSON_VALUES)
    return doc


@examples(150)
@given(doc=rooflines())
def test_roofline_mutations_load_or_fail_in_one_line(folder, doc):
    from roofprof.roofline import load_roofline

    path = folder / "roofline.json"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            roof = load_roofline(path)
        except RoofprofError as exc:
            _single_line(exc)
            return
        for c in roof.ceilings:
            assert isinstance(c.value, float) and math.isfinite(c.value) and c.value > 0
            assert isinstance(c.name, str) and (c.dtype is None or isinstance(c.dtype, str))
        try:
            prediction = roofprof.predict("llama-3.2-1b", roofline=roof, prompt_tokens=16)
        except RoofprofError as exc:
            _single_line(exc)
            return
    assert_finite_non_negative(strict_json(dumps_strict(prediction.to_dict())))


# --------------------------------------------------------------------------- ncu CSV

CSV_FIXTURES = sorted(p for p in FIXTURES.glob("ncu_*.csv"))
CSV_TEXTS = {p.name: p.read_text(encoding="utf-8-sig") for p in CSV_FIXTURES}
CELLS = st.one_of(
    st.sampled_from(
        [
            "",
            "n/a",
            "-1",
            "inf",
            "-inf",
            "nan",
            "1e308",
            "1,000",
            "1,0,0",
            "²",
            "0x10",
            "byte",
            "msecond",
            "%",
            "nsecond",
            "Kbyte",
            "inst",
            "[/]",
            '"',
            "9" * 400,
        ]
    ),
    st.text(max_size=6),
)


@st.composite
def ncu_texts(draw):
    name = draw(st.sampled_from(sorted(CSV_TEXTS)))
    lines = CSV_TEXTS[name].splitlines()
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 5))
        i = draw(st.integers(0, max(len(lines) - 1, 0)))
        if not lines:
            break
        if kind == 0:  # drop a line (the units row, the header, a metric row)
            lines.pop(i)
        elif kind == 1:  # cut the file there
            lines = lines[: i + 1]
        elif kind == 2:  # duplicate a line
            lines.insert(i, lines[i])
        else:  # replace one cell
            import csv
            import io

            try:
                cells = next(csv.reader([lines[i]]))
            except (csv.Error, StopIteration):
                continue
            if cells:
                cells[draw(st.integers(0, len(cells) - 1))] = draw(CELLS)
                buf = io.StringIO()
                csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="").writerow(cells)
                lines[i] = buf.getvalue()
    return name, "\n".join(lines)


@examples(150)
@given(case=ncu_texts())
def test_ncu_csv_mutations_parse_or_fail_in_one_line(case):
    from roofprof import counters

    name, text = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            records = counters.parse_ncu_csv(text, source=name)
        except RoofprofError as exc:
            _single_line(exc)
            return
        placements = counters.place_hierarchical(records, None)
        payload = counters.records_to_json(records, placements, source=name)
    assert records, "a file that parses holds at least one kernel"
    parsed = strict_json(dumps_strict(payload))
    for where, value in numbers(parsed):
        assert math.isfinite(value), (where, value)
    for kernel in parsed["kernels"]:  # metrics roofprof does not use are echoed as read
        kernel.pop("metrics", None)
    assert_finite_non_negative(parsed)


@examples(40)
@given(junk=st.binary(max_size=64))
def test_ncu_csv_bytes_read_or_fail_in_one_line(folder, junk):
    from roofprof import counters

    path = folder / "ncu.csv"
    path.write_bytes(junk)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            counters.load_counters(path)
        except RoofprofError as exc:
            _single_line(exc)


def test_every_property_test_module_is_time_bounded():
    """CI bound: each module with hypothesis properties carries ``pytestmark = time_bound()``."""
    here = Path(__file__).resolve().parent
    modules = [p for p in here.glob("test_*.py") if "@given(" in p.read_text(encoding="utf-8")]
    assert len(modules) >= 3
    unbounded = [
        p.name for p in modules if "pytestmark = time_bound()" not in p.read_text(encoding="utf-8")
    ]
    assert unbounded == []
