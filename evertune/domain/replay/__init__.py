"""evertune.domain.replay: the open-loop replay client, its summaries, goodput search, progress and tables.

See docs/replay.md for what is measured and how.
"""

from evertune.domain.replay.client import (
    ModelNotServed,
    TargetIncompatible,
    TargetUnauthorized,
    TargetUnreachable,
    list_models,
    replay,
)
from evertune.domain.replay.goodput import GoodputResult, Probe, find_goodput
from evertune.domain.replay.lag import LagReport
from evertune.domain.replay.progress import Progress
from evertune.domain.replay.results import ReplayRun, RequestResult
from evertune.domain.replay.schedule import due_offsets, plan_rps
from evertune.domain.replay.summary import Summary, summarize, summarize_run
from evertune.domain.replay.table import render_goodput, render_summary

__all__ = [
    "GoodputResult",
    "LagReport",
    "ModelNotServed",
    "Probe",
    "Progress",
    "ReplayRun",
    "RequestResult",
    "Summary",
    "TargetIncompatible",
    "TargetUnauthorized",
    "TargetUnreachable",
    "due_offsets",
    "find_goodput",
    "list_models",
    "plan_rps",
    "render_goodput",
    "render_summary",
    "replay",
    "summarize",
    "summarize_run",
]
