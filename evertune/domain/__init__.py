"""Domain: what evertune knows about serving LLMs, as libraries every service shares.

Engines (vLLM and the simulator behind one backend), workloads and traces, the replaying client,
the performance model, the local model, the SLO, gate results and percentiles. Imports `infra` and
the wire stubs; never `apps` or a service's internals.
"""
