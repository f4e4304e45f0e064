"""The kernel config cache and the search: pure logic, no kernel runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from evertune.kernels import tuning
from evertune.kernels.tuning import (
    CacheEntry,
    ConfigCache,
    KernelConfig,
    ShapeKey,
    cache_path,
    hardware_key,
    load_cache,
    save_cache,
    search,
    tokens_bucket,
    tune,
)

A, B, C = (
    KernelConfig(block=256),
    KernelConfig(block=512, num_warps=8),
    KernelConfig(block=1024, num_stages=2),
)


def entry(config: KernelConfig, us: float | None = 1.0) -> CacheEntry:
    return CacheEntry(config=config, source="search", median_us=us, candidates=3, note="")


def test_tokens_are_bucketed_to_powers_of_two() -> None:
    assert [tokens_bucket(t) for t in (0, 1, 2, 3, 4, 5, 300, 512, 513)] == [1, 1, 2, 4, 4, 8, 512, 512, 1024]
    assert ShapeKey("rms_norm", 300, (4096,), "bfloat16").key == "rms_norm/bfloat16/4096/t512"
    assert (
        ShapeKey("rotary_embedding", 1, (32, 8, 128, 128), "float16").key
        == "rotary_embedding/float16/32x8x128x128/t1"
    )


def test_lookup_is_exact_then_nearest_bucket_of_the_same_op_dtype_and_dims() -> None:
    cache = ConfigCache(hardware="h", triton_version="3.9.0")
    cache.put(ShapeKey("rms_norm", 8, (4096,), "bfloat16"), entry(A))
    cache.put(ShapeKey("rms_norm", 512, (4096,), "bfloat16"), entry(B))
    cache.put(ShapeKey("rms_norm", 2, (4096,), "float16"), entry(C))
    cache.put(ShapeKey("rms_norm", 2, (8192,), "bfloat16"), entry(C))
    assert cache.get(ShapeKey("rms_norm", 7, (4096,), "bfloat16")) == A  # same bucket
    assert cache.get(ShapeKey("rms_norm", 1, (4096,), "bfloat16")) == A  # nearest: 8
    assert cache.get(ShapeKey("rms_norm", 2000, (4096,), "bfloat16")) == B  # nearest: 512
    assert cache.get(ShapeKey("rms_norm", 64, (4096,), "bfloat16")) == B  # tie 8 vs 512: the larger
    assert cache.get(ShapeKey("rms_norm", 8, (1024,), "bfloat16")) is None  # other dims
    assert cache.get(ShapeKey("silu_and_mul", 8, (4096,), "bfloat16")) is None  # other op
    assert cache.get(ShapeKey("rms_norm", 8, (4096,), "float32")) is None  # other dtype


def test_cache_round_trips_through_its_file(tmp_path: Path) -> None:
    cache = ConfigCache(hardware="nvidia-h200-sm90", triton_version="3.9.0")
    cache.put(ShapeKey("silu_and_mul", 32, (14336,), "bfloat16"), entry(B, 4.25))
    cache.put(ShapeKey("rms_norm", 1, (4096,), "bfloat16"), CacheEntry(A, "interpreter", None, 1, "untimed"))
    path = cache_path(tmp_path, cache.hardware)
    assert path == tmp_path / "kernels" / "nvidia-h200-sm90.json"
    save_cache(path, cache)
    loaded = load_cache(path, hardware="nvidia-h200-sm90", triton_version="3.9.0")
    assert loaded == cache
    assert json.loads(path.read_text())["layout"] == tuning.CACHE_LAYOUT


@pytest.mark.parametrize(
    ("content", "hardware", "triton"),
    [
        (None, "h", "3.9.0"),  # missing
        ("{not json", "h", "3.9.0"),  # unreadable
        ('{"layout": 99}', "h", "3.9.0"),  # another layout
        (
            '{"layout": 1, "hardware": "h", "triton_version": "3.9.0", "entries": {"k": {"config": {}}}}',
            "h",
            "3.9.0",
        ),
        ("SAVED", "other-gpu", "3.9.0"),  # another hardware
        ("SAVED", "h", "3.10.0"),  # another Triton
    ],
)
def test_a_bad_or_foreign_cache_loads_empty(
    tmp_path: Path, content: str | None, hardware: str, triton: str
) -> None:
    path = tmp_path / "kernels" / "h.json"
    if content == "SAVED":
        saved = ConfigCache(hardware="h", triton_version="3.9.0")
        saved.put(ShapeKey("rms_norm", 1, (64,), "float32"), entry(A))
        save_cache(path, saved)
    elif content is not None:
        path.parent.mkdir(parents=True)
        path.write_text(content)
    loaded = load_cache(path, hardware=hardware, triton_version=triton)
    assert loaded.entries == {} and loaded.hardware == hardware and loaded.triton_version == triton


def test_configs_are_checked_when_made() -> None:
    for bad in ({"block": 3}, {"block": 0}, {"block": 64, "num_warps": 3}, {"block": 64, "num_stages": 0}):
        with pytest.raises(ValueError, match="kernel config"):
            KernelConfig(**bad)


def test_hardware_key_names_the_device_and_capability() -> None:
    assert hardware_key(device_name="NVIDIA H200", capability=(9, 0)) == "nvidia-h200-sm90"
    assert (
        hardware_key(device_name="NVIDIA GeForce RTX 4090", capability=(8, 9))
        == "nvidia-geforce-rtx-4090-sm89"
    )
    assert hardware_key(device_name=None, capability=None) == tuning.INTERPRETER_HARDWARE


def test_search_keeps_the_fastest_and_records_failures() -> None:
    times = {A: 3.0, B: 1.5, C: 1.5}

    def measure(config: KernelConfig) -> float:
        if config.block == 1024 and config.num_warps == 4 and config.num_stages == 1:
            raise RuntimeError("out of resources: shared memory")
        return times[config]

    D = KernelConfig(block=1024)
    result = search([A, D, B, C], measure)
    assert result.best == B and result.best_us == 1.5  # B and C tie: the first listed wins
    assert [t.config for t in result.timings] == [A, D, B, C]
    failed = [t for t in result.timings if t.median_us is None]
    assert len(failed) == 1 and failed[0].config == D and "out of resources" in failed[0].error


def test_search_refuses_nothing_to_choose_from() -> None:
    with pytest.raises(ValueError, match="no candidate"):
        search([], lambda c: 1.0)
    with pytest.raises(ValueError, match="every candidate failed"):
        search([A, B], lambda c: math.nan)


def test_tune_searches_each_bucket_once_on_a_gpu() -> None:
    calls: list[tuple[str, KernelConfig]] = []

    def measure(shape: ShapeKey, config: KernelConfig) -> float:
        calls.append((shape.key, config))
        return {A: 2.0, B: 1.0, C: 3.0}[config]

    shapes = [
        ShapeKey("silu_and_mul", t, (1024,), "bfloat16") for t in (300, 400, 1)
    ]  # 300 and 400: bucket 512
    cache = ConfigCache(hardware="h", triton_version="3.9.0")
    results = tune(
        shapes, cache, candidates_for=lambda s: [A, B, C], default_for=lambda s: A, measure=measure
    )
    assert len(calls) == 6 and set(results) == {shapes[0].key, shapes[2].key}
    e = cache.entries[shapes[0].key]
    assert e.config == B and e.source == "search" and e.median_us == 1.0 and e.candidates == 3


def test_tune_in_the_interpreter_records_the_default_untimed() -> None:
    cache = ConfigCache(hardware=tuning.INTERPRETER_HARDWARE, triton_version="3.9.0")
    shapes = [ShapeKey("rms_norm", 1, (4096,), "float32"), ShapeKey("rms_norm", 64, (4096,), "float32")]
    results = tune(shapes, cache, candidates_for=lambda s: [A, B], default_for=lambda s: C, measure=None)
    assert results == {s.key: None for s in shapes}
    for s in shapes:
        e = cache.entries[s.key]
        assert e.config == C and e.source == "interpreter" and e.median_us is None and e.candidates == 1
        assert "nothing was timed" in e.note


def test_active_cache_loads_this_machines_file_from_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVERTUNE_DATA_DIR", str(tmp_path))
    hw = tuning.local_hardware_key()
    saved = ConfigCache(hardware=hw, triton_version=tuning.triton_version())
    shape = ShapeKey("rms_norm", 4, (128,), "float32")
    saved.put(shape, entry(B))
    save_cache(cache_path(tmp_path, hw), saved)
    tuning.set_active_cache(None)
    try:
        assert tuning.active_cache().get(shape) == B
    finally:
        tuning.set_active_cache(None)


def test_rotations_cover_the_l2_cache_within_bounds() -> None:
    from evertune.kernels.timing import MAX_ROTATIONS, rotations_for

    l2 = 50 * 2**20
    assert rotations_for(40 * 2**20, l2_bytes=l2) == 5  # 4 x L2 / 40 MiB, rounded up
    assert rotations_for(10 * 2**30, l2_bytes=l2) == 2  # at least two sets
    assert rotations_for(40_000, l2_bytes=l2) == MAX_ROTATIONS  # a decode step: capped
