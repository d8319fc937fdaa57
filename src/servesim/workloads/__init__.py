"""Workloads: built-in scenarios, trace loaders and synthetic generators, all giving a list of `Request`s."""

from __future__ import annotations

from servesim.workloads.builtin import BUILTIN_WORKLOADS, builtin_workload
from servesim.workloads.resolve import load_workload

__all__ = ["BUILTIN_WORKLOADS", "builtin_workload", "load_workload"]
