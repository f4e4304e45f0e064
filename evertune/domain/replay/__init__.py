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
from evertune.domain.replay.floor import alone, floor_ratio, replay_alone
from evertune.domain.replay.goodput import GoodputResult, Probe, find_goodput
from evertune.domain.replay.lag import LagReport
from evertune.domain.replay.progress import ReplayCounts, ReplayProgress
from evertune.domain.replay.results import ReplayRun, RequestResult
from evertune.domain.replay.schedule import due_offsets, plan_rps
from evertune.domain.replay.summary import Summary, summarize, summarize_run
from evertune.domain.replay.table import goodput_table, summary_table

__all__ = [
    "GoodputResult",
    "LagReport",
    "ModelNotServed",
    "Probe",
    "ReplayCounts",
    "ReplayProgress",
    "ReplayRun",
    "RequestResult",
    "Summary",
    "TargetIncompatible",
    "TargetUnauthorized",
    "TargetUnreachable",
    "alone",
    "due_offsets",
    "find_goodput",
    "floor_ratio",
    "goodput_table",
    "list_models",
    "plan_rps",
    "replay",
    "replay_alone",
    "summarize",
    "summarize_run",
    "summary_table",
]
