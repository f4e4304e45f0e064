-- 0003_trials: every trial a runner finished (or failed), one row per trial job.
--
-- Written by the runner after a trial, before it publishes trial.completed and acks the job.
-- Idempotent on redelivery: each insert passes insert_deduplication_token
-- `trial:<trial_id>:job:<job_id>` and the table keeps the tokens of its last 1000 inserts
-- (non_replicated_deduplication_window), so a job delivered again (its runner died after the
-- insert, before the ack) stores nothing new; the runner also looks the job up before running it
-- and republishes the stored result instead of running it twice. A trial run again after an error
-- is a new job (new job_id) and gets its own row. ReplacingMergeTree on the same key is the second
-- line of defence, for tokens that fell out of the window.
--
-- Privacy: no prompt or completion text. The correctness gate's golden answers are kept as keyed
-- hash chains (`golden_hashes`, one UInt64 per answer token; see services/runner/golden.py), the
-- engine log's tail holds vLLM's own log lines (vLLM does not log prompts unless told to).
--
-- No TTL: trials are the evidence behind every rollout. `{database}` is replaced by the store's
-- database when the migration runs.

CREATE TABLE IF NOT EXISTS {database}.trials
(
    -- Identity: the trial, the job that ran it, the search it belongs to ('' when run by hand).
    trial_id String,
    job_id String,
    search_id String,
    endpoint LowCardinality(String),
    profile_id String,
    -- Hardware class the job was sent to ('cpu', 'h200', 'sim-h200', ...) and the runner instance
    -- (host:pid) that ran it.
    hardware_class LowCardinality(String),
    runner String,
    -- The endpoint's current config (its golden answers are the correctness reference).
    baseline Bool,
    -- Figures from the performance model (sim-* hardware), not an engine.
    simulated Bool,
    -- 'ok', 'error' (engine failed to start or crashed, invalid job, unreadable trace),
    -- 'timeout' (deadline passed) or 'cancelled'.
    status LowCardinality(String),
    -- status 'ok' and every gate passed.
    passed Bool,
    -- One line when status is not 'ok'.
    error String,
    -- Last lines of the engine log when the trial failed ('' otherwise).
    log_tail String,
    started_at DateTime64(6, 'UTC'),
    finished_at DateTime64(6, 'UTC'),
    -- Seconds from taking the job to its end, engine start included; engine start to ready.
    duration_s Float64,
    startup_s Float64,
    -- Deliveries of the job when this row was written (> 1: an earlier runner died on it).
    deliveries UInt32,
    -- Engine config actually started (runner defaults filled in), canonical JSON of
    -- evertune.v1.EngineConfig with proto field names; config_key: first 16 hex of its SHA-256.
    engine_config String,
    config_key String,
    -- Trace replayed and its SHA-256 as the job named it; the replay's seed.
    trace_uri String,
    trace_sha256 String,
    seed UInt64,
    -- The job's SLO (0 = no target), attainment share in force.
    slo_ttft_p50_ms Float64,
    slo_ttft_p99_ms Float64,
    slo_itl_p99_ms Float64,
    slo_attainment Float64,
    -- Rate of the headline figures (the profile's peak) and of the slo/stability gates (x headroom).
    target_rate_rps Float64,
    gate_rate_rps Float64,
    -- Headline figures at the target rate, over all repeats (NaN when not measured).
    ttft_p50_ms Float64,
    ttft_p90_ms Float64,
    ttft_p99_ms Float64,
    itl_p99_ms Float64,
    attainment Float64,
    -- Highest replayed rate meeting the SLO below the lowest failing one (0 = none).
    goodput_rps Float64,
    -- Every replayed rate, ascending, pooled over repeats.
    rates Array(Tuple(
        rate_rps Float64,
        requests UInt64,
        errors UInt64,
        ttft_p50_ms Float64,
        ttft_p90_ms Float64,
        ttft_p99_ms Float64,
        itl_p99_ms Float64,
        attainment Float64)),
    -- Rates not replayed because a lower rate at or above the gate rate missed the SLO.
    skipped_rates Array(Float64),
    -- Gate outcomes in the job's order (value and threshold in the gate's unit).
    gates Array(Tuple(name String, passed Bool, value Float64, threshold Float64, detail String)),
    -- Golden set answered ('' when none) and its answers as keyed hash chains (one per prompt).
    golden_set String,
    golden_hashes Array(Array(UInt64)),
    -- Trial whose golden answers the correctness gate compared with, and the agreement (share of
    -- reference tokens reproduced before the first difference; NaN when not compared).
    golden_reference String,
    agreement Float64,
    -- The replay client fell behind in some run (its figures are partly the client's).
    client_fell_behind Bool,
    -- The trial.completed payload as published: base64 of the serialized evertune.v1.TrialCompleted.
    completed_pb String
)
ENGINE = ReplacingMergeTree(finished_at)
PARTITION BY toYYYYMM(finished_at)
ORDER BY (endpoint, search_id, trial_id, job_id)
SETTINGS non_replicated_deduplication_window = 1000;
