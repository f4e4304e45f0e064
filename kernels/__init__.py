"""evertune.kernels: Triton kernels for the hot memory-bound ops of a Llama step, with their PyTorch
references, a correctness harness, per-shape tuning and a vLLM plugin. See docs/kernels.md.

Modules (importing this package imports neither triton nor vLLM):
- `rmsnorm`, `silu_mul`, `rotary`: the kernels and their references (import triton);
- `harness`: every kernel against its float64 reference on random shapes, outputs NaN-poisoned;
- `tuning`: kernel configs, the search, the per-hardware config cache; `shapes`: the shapes worth
  tuning, from a workload profile; `timing`: GPU timing;
- `torch_ops`: the kernels as `torch.ops.evertune.*`; `vllm_plugin` (entry point `evertune_kernels`)
  and `vllm_ops`: the replacements of vLLM's RMSNorm, SiluAndMul and rotary embeddings.
"""
