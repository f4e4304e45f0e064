"""evertune: keeps self-hosted vLLM endpoints tuned for voice-agent time to first token."""

__version__ = "0.1.0"
