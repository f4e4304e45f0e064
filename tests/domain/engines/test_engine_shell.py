"""The process shell without vLLM: stand-in "python" scripts that hang, ignore SIGTERM or fail.

They check what does not need a real engine to be checked: failures carry the log tail, a hung
start times out, stop kills a whole process group even when it ignores SIGTERM, and a refused
knob raises before any process starts.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

import pytest

from evertune.apps.harness.waiting import eventually
from evertune.domain.engines import (
    EngineNotRunning,
    EngineSpec,
    EngineStartFailed,
    KnobRefused,
    VllmEngine,
    get_profile,
    make_replicas,
)
from evertune.domain.engines.hardware import HardwareProfile, cpu_profile
from evertune.domain.engines.process import process_group_pids, start_failure_cause

CPU = cpu_profile(cores=2, memory_gib=10.0)
SPEC = EngineSpec(model="/models/none", enforce_eager=True)


def fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


async def test_a_process_that_exits_fails_at_once_with_the_log_tail(tmp_path: Path) -> None:
    python = fake_python(
        tmp_path,
        'for i in $(seq 1 40); do echo "loading line $i"; done\n'
        'echo "ValueError: No such model: $4"\n'
        'echo "shutting down"\nexit 3',
    )
    engine = VllmEngine(SPEC, log_dir=tmp_path / "logs", python=python, hardware=CPU)
    await engine.start()
    started = time.monotonic()
    with pytest.raises(EngineStartFailed) as info:
        await engine.wait_ready(timeout_s=60)
    assert time.monotonic() - started < 5
    err = info.value
    message = str(err)
    assert "\n" not in message
    assert message.startswith(
        "vllm exited with code 3 before it was ready: ValueError: No such model: /models/none"
    )
    assert str(engine.log_file) in message
    assert len(err.log_tail) == 30
    assert err.log_tail[-1] == "shutting down"
    assert err.log_file == str(engine.log_file)
    assert err.grpc_status.name == "UNAVAILABLE"
    assert not engine.running
    # the command line heads the log
    assert engine.log_file.read_text().startswith(f"$ {python} -m vllm.entrypoints.openai.api_server --model")


async def test_an_engines_temp_files_go_to_its_own_folder_removed_at_stop(tmp_path: Path) -> None:
    """vLLM leaves its IPC sockets and rendezvous files in the temp folder; each engine gets one of
    its own (TMPDIR, VLLM_RPC_BASE_PATH), gone when it stops."""
    python = fake_python(
        tmp_path,
        # the cache dir is written before the socket appears, so seeing the socket means both exist
        'echo "$TORCHINDUCTOR_CACHE_DIR" > "$0.inductor"\n'
        'touch "$TMPDIR/vllm_dist_x" "$VLLM_RPC_BASE_PATH/socket"\nsleep 300',
    )
    engine = VllmEngine(SPEC, log_dir=tmp_path / "logs", python=python, hardware=CPU)
    await engine.start()
    scratch = engine.scratch
    assert scratch is not None and scratch.is_dir()
    await eventually(lambda: (scratch / "socket").exists(), timeout_s=10)
    assert {p.name for p in scratch.iterdir()} == {"vllm_dist_x", "socket"}
    inductor = await asyncio.to_thread(Path(python + ".inductor").read_text)
    assert "torchinductor_" in inductor  # the compile cache stays where it was
    await engine.stop(timeout_s=5)
    assert not scratch.exists() and engine.scratch is None


async def test_an_engine_started_again_after_its_process_exited_keeps_one_temp_folder(
    tmp_path: Path,
) -> None:
    python = fake_python(tmp_path, "exit 3")
    engine = VllmEngine(SPEC, log_dir=tmp_path / "logs", python=python, hardware=CPU)
    await engine.start()
    first = engine.scratch
    assert first is not None
    await eventually(lambda: not engine.running, timeout_s=10)
    await engine.start()  # no stop in between: the first run's folder goes, not leaked
    assert not first.exists() and engine.scratch is not None and engine.scratch.is_dir()
    await engine.stop(timeout_s=5)
    assert engine.scratch is None


async def test_a_hung_start_times_out_and_nothing_of_the_group_is_left(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "echo starting\nsleep 300 &\nsleep 300")
    engine = VllmEngine(SPEC, log_dir=tmp_path, python=python, hardware=CPU)
    await engine.start()
    pgid = engine.pid
    assert pgid is not None
    with pytest.raises(
        EngineStartFailed, match=r"vllm not ready after 1 s on http://127\.0\.0\.1:\d+: starting"
    ):
        await engine.wait_ready(timeout_s=1)
    assert process_group_pids(pgid) == []


async def test_stop_kills_a_group_that_ignores_sigterm(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "trap '' TERM\nsleep 300 &\nsleep 300 &\nwait")
    engine = VllmEngine(SPEC, log_dir=tmp_path, python=python, hardware=CPU)
    await engine.start()
    pgid = engine.pid
    assert pgid is not None
    for _ in range(100):  # let the script fork its children
        if len(process_group_pids(pgid)) >= 3:
            break
        await asyncio.sleep(0.01)
    assert len(process_group_pids(pgid)) == 3
    assert os.getpgid(pgid) == pgid  # its own group, not ours
    assert os.getpgid(pgid) != os.getpgid(0)
    started = time.monotonic()
    await engine.stop(timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert process_group_pids(pgid) == []
    await engine.stop()  # twice is fine
    assert not await engine.health()


async def test_a_refused_knob_raises_before_any_process_starts(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    python = fake_python(tmp_path, f"touch {marker}")
    with pytest.raises(KnobRefused, match="tensor_parallel_size 2"):
        VllmEngine(
            EngineSpec(model="m", tensor_parallel_size=2), log_dir=tmp_path, python=python, hardware=CPU
        )
    with pytest.raises(KnobRefused, match="replicas > 1 on cpu need kv_cache_space_gib"):
        make_replicas(EngineSpec(model="m", replicas=2), log_dir=tmp_path, hardware=CPU)
    with pytest.raises(KnobRefused, match="engine kind 'sim'"):
        VllmEngine(EngineSpec(kind="sim", model="m"), log_dir=tmp_path, python=python, hardware=CPU)
    assert _nothing_ran(tmp_path, marker)


def _nothing_ran(tmp_path: Path, marker: Path) -> bool:
    return not marker.exists() and not list(tmp_path.glob("vllm-*.log"))


async def test_a_missing_interpreter_fails_in_one_line(tmp_path: Path) -> None:
    engine = VllmEngine(SPEC, log_dir=tmp_path, python=str(tmp_path / "no-python"), hardware=CPU)
    with pytest.raises(EngineStartFailed, match=r"cannot run .*no-python"):
        await engine.start()


async def test_scrape_before_start_is_a_precondition_error(tmp_path: Path) -> None:
    engine = VllmEngine(SPEC, log_dir=tmp_path, hardware=CPU)
    with pytest.raises(EngineNotRunning):
        await engine.scrape_metrics()
    assert not await engine.health()


def test_environment_owns_knob_variables_and_stays_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")
    monkeypatch.setenv("VLLM_PLUGINS", "someone_elses")
    default = VllmEngine(SPEC, log_dir=tmp_path, hardware=CPU, port=8111)
    argv, env = default.command()
    assert "VLLM_CPU_KVCACHE_SPACE" not in env  # unset knob = vLLM's default, not the parent's value
    assert "VLLM_PLUGINS" not in env
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    assert argv[argv.index("--port") + 1] == "8111"
    assert default.base_url == "http://127.0.0.1:8111"

    sized = VllmEngine(
        SPEC.model_copy(update={"kv_cache_space_gib": 2.0}),
        log_dir=tmp_path,
        hardware=CPU,
        extra_env={"HF_HUB_OFFLINE": "0", "OMP_NUM_THREADS": "1"},
        served_model_name="tiny",
    )
    _, env = sized.command()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert env["HF_HUB_OFFLINE"] == "0"
    assert env["OMP_NUM_THREADS"] == "1"
    assert sized.model_name == "tiny"


def test_cpu_engines_skip_the_aot_compile_cache_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM-CPU 0.32 cannot load its AOT cache; its ordinary compile cache works (docs/engines.md)."""
    monkeypatch.delenv("VLLM_USE_AOT_COMPILE", raising=False)
    _, env = VllmEngine(SPEC, log_dir=tmp_path, hardware=CPU).command()
    assert env["VLLM_USE_AOT_COMPILE"] == "0"
    monkeypatch.setenv("VLLM_USE_AOT_COMPILE", "1")
    _, env = VllmEngine(SPEC, log_dir=tmp_path, hardware=CPU).command()
    assert env["VLLM_USE_AOT_COMPILE"] == "1"
    _, env = VllmEngine(SPEC, log_dir=tmp_path, hardware=get_profile("h200")).command()
    assert env["VLLM_USE_AOT_COMPILE"] == "1"  # the parent's, on an accelerator untouched


def test_a_cpu_engine_on_one_core_runs_its_worker_in_the_engine_core_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One core has no OpenMP threads to bind, so no worker process of its own (16 s less to start
    here); on more cores, or unbound, vLLM keeps its binding worker; the environment wins."""
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)

    def env_of(cores: list[int], hardware: HardwareProfile = CPU) -> dict[str, str]:
        return VllmEngine(SPEC, log_dir=tmp_path, hardware=hardware, cpu_cores=cores).command()[1]

    assert env_of([1])["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env_of([0, 1])
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env_of([])
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in env_of([0], get_profile("h200"))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    assert env_of([1])["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"


def test_group_gives_each_replica_its_port_and_cores(tmp_path: Path) -> None:
    spec = EngineSpec(model="m", replicas=2, kv_cache_space_gib=1.0)
    group = make_replicas(spec, log_dir=tmp_path, hardware=CPU, served_model_name="m")
    assert len(set(group.urls)) == 2 and group.base_url == group.urls[0]
    replicas = [replica for replica in group.replicas if isinstance(replica, VllmEngine)]
    assert len(replicas) == 2
    binds = [replica.command()[1].get("VLLM_CPU_OMP_THREADS_BIND") for replica in replicas]
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        assert binds[0] != binds[1]
        assert all(bind is not None for bind in binds)
        # each server keeps to its share of the cores (process affinity), disjoint from the other's
        first, second = (set(replica.cpu_cores) for replica in replicas)
        assert first and second and not first & second
        assert binds == [",".join(map(str, replica.cpu_cores)) for replica in replicas]
    for replica in replicas:
        assert replica.spec.replicas is None
        assert replica.command()[1]["VLLM_CPU_KVCACHE_SPACE"] == "1"  # KV space per replica


def test_failure_cause_prefers_the_last_error_line() -> None:
    tail = ["INFO loading", "Traceback (most recent call last):", "OSError: cannot open x", "INFO bye", ""]
    assert start_failure_cause(tail) == "OSError: cannot open x"
    assert start_failure_cause(["INFO a", "INFO b"]) == "INFO b"
    assert start_failure_cause([]) == "empty log"
    assert start_failure_cause(["api_server.py: error: unrecognized arguments: --bogus"]).endswith("--bogus")


def test_failure_cause_skips_vllms_wrapper_for_the_root_cause() -> None:
    log = [
        "(Worker pid=18577) ERROR 11-29 22:28:37 [multiproc_executor.py:953] Traceback (most recent call):",
        "(Worker pid=18577) ERROR 11-29 22:28:37 [multiproc_executor.py:953] RuntimeError: "
        "_C::static_scaled_fp8_quant() expected at most 0 argument(s) but received 4 argument(s).",
        "(EngineCore pid=18518) ERROR 11-29 22:28:39 [core.py:1510] EngineCore failed to start.",
        '  File "/x/vllm/v1/engine/utils.py", line 1431, in wait_for_engine_startup',
        "    raise RuntimeError(",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    assert start_failure_cause(log) == (
        "RuntimeError: _C::static_scaled_fp8_quant() expected at most 0 argument(s) "
        "but received 4 argument(s)."
    )
    assert start_failure_cause(log[-1:]).startswith("RuntimeError: Engine core initialization failed")
