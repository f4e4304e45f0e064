"""The demo endpoint's plan: where the loop starts from and what its searches optimise."""

from __future__ import annotations

from pathlib import Path

from evertune.demo.driver import endpoint_spec
from evertune.demo.stack import DemoOptions, endpoint_plan
from evertune.v1 import endpoint_pb2


def test_the_sim_demo_starts_without_prefix_caching_and_vllm_from_its_defaults() -> None:
    sim = endpoint_spec(endpoint_plan(DemoOptions(engine="sim")), Path("/m"))
    assert sim.initial_engine_config.HasField("enable_prefix_caching")
    assert not sim.initial_engine_config.enable_prefix_caching
    assert sim.objective == endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT
    vllm = endpoint_spec(endpoint_plan(DemoOptions(engine="vllm")), Path("/m"))
    assert not vllm.initial_engine_config.HasField("enable_prefix_caching")
    assert vllm.initial_engine_config.kv_cache_space_gib == 2.0
    assert vllm.objective == endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT


def test_the_start_can_be_chosen_either_way() -> None:
    defaults = endpoint_spec(endpoint_plan(DemoOptions(engine="sim", untuned=False)), Path("/m"))
    assert not defaults.initial_engine_config.HasField("enable_prefix_caching")
    untuned = endpoint_spec(endpoint_plan(DemoOptions(engine="vllm", untuned=True)), Path("/m"))
    assert untuned.initial_engine_config.HasField("enable_prefix_caching")
    assert not untuned.initial_engine_config.enable_prefix_caching
