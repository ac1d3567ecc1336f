"""Rendering at the edge: rich tables, payloads and files, the HTML report.

Formatting only: every number shown or written was computed elsewhere (rollup, probes,
profile, validate, counters, doctor); the numbers' formats come from :mod:`roofprof.units`.

- :mod:`roofprof.report.tables`: the tables of predictions, specs, profiles and validation.
- :mod:`roofprof.report.hardware_tables`: the measured roofline, counters and doctor tables.
- :mod:`roofprof.report.files`: JSON payloads, CSVs, pandas frames, ``write_run_report``.
- :mod:`roofprof.report.html`: the self-contained ``index.html`` of ``roofprof run``.

>>> from roofprof.report import si
>>> si(3.35e12, "B/s")
'3.35 TB/s'
"""

from __future__ import annotations

from roofprof.report.files import (
    ops_frame,
    roofline_summary_payload,
    run_payload,
    specs_payload,
    write_run_report,
)
from roofprof.report.hardware_tables import (
    counters_comparison_tables,
    counters_table,
    doctor_table,
    print_counters,
    print_counters_comparison,
    print_doctor,
    print_roofline_summary,
    roofline_table,
)
from roofprof.report.html import render_html
from roofprof.report.tables import (
    comparison_table,
    op_table,
    print_gpu_comparison,
    print_predictions,
    print_profiles,
    print_run_summary,
    print_specs,
    print_validation,
    profile_table,
)
from roofprof.units import clean, si

__all__ = [
    "clean",
    "comparison_table",
    "print_gpu_comparison",
    "counters_comparison_tables",
    "counters_table",
    "doctor_table",
    "op_table",
    "ops_frame",
    "print_counters",
    "print_counters_comparison",
    "print_doctor",
    "print_predictions",
    "print_profiles",
    "print_roofline_summary",
    "print_run_summary",
    "print_specs",
    "print_validation",
    "profile_table",
    "render_html",
    "roofline_summary_payload",
    "roofline_table",
    "run_payload",
    "si",
    "specs_payload",
    "write_run_report",
]
