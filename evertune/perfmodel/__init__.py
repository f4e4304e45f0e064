"""Performance model of vLLM: a discrete-event simulation of its scheduler and a step-time model."""
