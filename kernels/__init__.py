"""evertune.kernels: Triton kernels for the hot ops of a Llama step (see docs/kernels.md when they land)."""
