"""Workloads: built-in scenarios, trace loaders, synthetic generators and transforms, all giving a request table.

`load_workload(spec)` gives `Request`s; `make_table(spec, ...)` gives the columnar `RequestTable` for large runs.
"""

from __future__ import annotations

from servesim.workloads.builtin import BUILTIN_WORKLOADS, builtin_table, builtin_workload
from servesim.workloads.formats import FORMATS
from servesim.workloads.loaders import load_trace
from servesim.workloads.resolve import WorkloadWarning, load_table, load_workload, make_closed_loop, make_table
from servesim.workloads.stats import workload_stats
from servesim.workloads.synthetic import ClosedLoop, LengthDist, arrival_times, parse_length
from servesim.workloads.table import RequestTable
from servesim.workloads.transforms import cap_lengths, sample, scale_rate, time_window

__all__ = [
    "BUILTIN_WORKLOADS",
    "FORMATS",
    "ClosedLoop",
    "LengthDist",
    "RequestTable",
    "WorkloadWarning",
    "arrival_times",
    "builtin_table",
    "builtin_workload",
    "cap_lengths",
    "load_table",
    "load_trace",
    "load_workload",
    "make_closed_loop",
    "make_table",
    "parse_length",
    "sample",
    "scale_rate",
    "time_window",
    "workload_stats",
]
