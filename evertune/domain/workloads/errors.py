"""The error workloads raise: a bad setting, a bad trace line, a bad scaling factor (one line each)."""

from __future__ import annotations

from evertune.errors import InvalidArgument


class WorkloadError(InvalidArgument):
    """A workload cannot be planned or read: the message names the setting or the file and line."""
