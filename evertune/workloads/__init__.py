"""Workloads: synthetic voice-agent traffic and trace files, as plans of timed requests."""

from evertune.workloads.plan import ChatMessage, PlannedRequest

__all__ = ["ChatMessage", "PlannedRequest"]
