"""Workloads: synthetic voice-agent traffic and trace files, as plans of timed requests."""

from evertune.domain.workloads.curve import DailyCurve
from evertune.domain.workloads.errors import WorkloadError
from evertune.domain.workloads.jsonl import (
    TraceRecord,
    load_jsonl_trace,
    parse_jsonl,
    plan_records,
    read_jsonl,
    records_of_plan,
    write_jsonl,
)
from evertune.domain.workloads.plan import ChatMessage, PlannedRequest
from evertune.domain.workloads.report import BadLine, ReadReport
from evertune.domain.workloads.scaling import scale
from evertune.domain.workloads.stats import PlanStats, Quantiles, describe
from evertune.domain.workloads.text import MakeText, TextSource, WordListText, words_as_tokens
from evertune.domain.workloads.trace import TraceLoad, TraceRow, parse_azure_csv, plan_rows, read_azure_trace
from evertune.domain.workloads.voice import VoiceWorkload, plan_voice

__all__ = [
    "BadLine",
    "ChatMessage",
    "DailyCurve",
    "MakeText",
    "PlanStats",
    "PlannedRequest",
    "Quantiles",
    "ReadReport",
    "TextSource",
    "TraceLoad",
    "TraceRecord",
    "TraceRow",
    "VoiceWorkload",
    "WordListText",
    "WorkloadError",
    "describe",
    "load_jsonl_trace",
    "parse_azure_csv",
    "parse_jsonl",
    "plan_records",
    "plan_rows",
    "plan_voice",
    "read_azure_trace",
    "read_jsonl",
    "records_of_plan",
    "scale",
    "words_as_tokens",
    "write_jsonl",
]
