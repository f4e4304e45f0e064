"""The demo endpoint's plan: where the loop starts from and what its searches optimise."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from evertune.apps.demo.choices import DemoOptions, endpoint_plan, traffic_plan
from evertune.apps.demo.driver import endpoint_spec
from evertune.v1 import endpoint_pb2


def test_both_demos_start_without_prefix_caching_and_say_why() -> None:
    for engine in ("sim", "vllm"):
        plan = endpoint_plan(DemoOptions(engine=engine))
        spec = endpoint_spec(plan, Path("/m"))
        assert spec.initial_engine_config.HasField("enable_prefix_caching")
        assert not spec.initial_engine_config.enable_prefix_caching
        assert spec.objective == endpoint_pb2.SEARCH_OBJECTIVE_P50_TTFT
        assert plan.start_note.startswith("prefix caching off")
    vllm = endpoint_plan(DemoOptions(engine="vllm"))
    assert vllm.model_size == "smollm2-135m"
    # vLLM-CPU engines start eager: every trial and the canary start one on 2 cores
    assert endpoint_spec(vllm, Path("/m")).initial_engine_config.enforce_eager
    assert "eager mode" in vllm.start_note
    sim = endpoint_spec(endpoint_plan(DemoOptions(engine="sim")), Path("/m")).initial_engine_config
    assert not sim.HasField("enforce_eager")
    assert endpoint_spec(vllm, Path("/m")).initial_engine_config.kv_cache_space_gib == 2.0


def test_the_vllm_demo_shifts_early_and_leaves_the_first_profile_to_drift() -> None:
    options = DemoOptions(engine="vllm", duration_s=600)
    assert options.shift_at_s == 0.12 * 600 and options.profile_at_s is None
    assert DemoOptions(engine="vllm", duration_s=600, drift=False).profile_at_s is not None
    sim = DemoOptions(engine="sim", duration_s=60)
    assert sim.shift_at_s == 30 and sim.profile_at_s is not None
    traffic = traffic_plan(options)
    assert traffic.shifted is not None
    assert traffic.shifted.system_prompt_words == 3 * traffic.baseline.system_prompt_words


def test_a_demo_alert_route_points_at_the_local_webhook() -> None:
    spec = endpoint_spec(endpoint_plan(DemoOptions()), Path("/m"), alert_url="http://127.0.0.1:9/alerts")
    (route,) = spec.alert_routes
    assert route.kind == endpoint_pb2.ALERT_ROUTE_KIND_WEBHOOK and route.url == "http://127.0.0.1:9/alerts"
    assert list(route.event_kinds) == ["sla.breach", "sla.resolved"]
    assert not endpoint_spec(endpoint_plan(DemoOptions()), Path("/m")).alert_routes


def test_the_start_can_be_chosen_either_way() -> None:
    defaults = endpoint_spec(endpoint_plan(DemoOptions(engine="sim", untuned=False)), Path("/m"))
    assert not defaults.initial_engine_config.HasField("enable_prefix_caching")
    untuned = endpoint_spec(endpoint_plan(DemoOptions(engine="vllm", untuned=True)), Path("/m"))
    assert untuned.initial_engine_config.HasField("enable_prefix_caching")
    assert not untuned.initial_engine_config.enable_prefix_caching


def test_the_vllm_demo_times_both_dtypes_for_its_hand_set_start_and_the_sim_demo_none() -> None:
    """Which dtype was right at launch flips with the CPU's ISA, so the vLLM demo measures it;
    starting from the engine's defaults (or on sim) it chooses nothing and sets no dtype."""
    vllm = endpoint_plan(DemoOptions(engine="vllm"))
    assert set(vllm.launch_dtypes) == {"bfloat16", "float32"}
    assert not endpoint_spec(vllm, Path("/m")).initial_engine_config.HasField("dtype")
    chosen = dataclasses.replace(vllm, dtype="float32")
    assert endpoint_spec(chosen, Path("/m")).initial_engine_config.dtype == "float32"
    assert endpoint_plan(DemoOptions(engine="sim")).launch_dtypes == ()
    assert endpoint_plan(DemoOptions(engine="vllm", untuned=False)).launch_dtypes == ()
