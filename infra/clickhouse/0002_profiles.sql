-- 0002_profiles: workload profiles, versioned per endpoint. One row per profile the profiler built.
--
-- Written by the profiler (`evertune.profiler.catalog`) once per build, before the `profile.ready`
-- event that announces it. `version` counts an endpoint's profiles from 1; `profile_id` is unique
-- (for a build caused by an event, derived from that event's id, so a redelivered drift.detected
-- finds its profile here instead of building another).
--
-- No text from prompts or completions: the profile holds figures and the trace holds token counts
-- and ids only (evertune's JSONL trace format, docs/workloads.md). Profiles are kept for 180 days.
-- `{database}` is replaced by the store's database when the migration runs.

CREATE TABLE IF NOT EXISTS {database}.profiles
(
    endpoint LowCardinality(String),
    -- 1, 2, 3... per endpoint.
    version UInt32,
    -- Unique id ("prof-" + hex), also ProfileReady.profile_id.
    profile_id String,
    -- When the profile was built (UTC).
    created DateTime64(6, 'UTC'),
    -- The telemetry window profiled: [window_start, window_end).
    window_start DateTime64(6, 'UTC'),
    window_end DateTime64(6, 'UTC'),
    -- Why it was built: 'schedule', 'drift', 'api'.
    trigger LowCardinality(String),
    -- Id of the event that caused it ('' when none).
    cause_id String,
    -- Requests in the window.
    request_count UInt64,
    -- The ProfileReady message announced for it, in protobuf's JSON mapping.
    ready_json String,
    -- The whole profile (distributions, rate curve, conversations, bottleneck report) as JSON.
    profile_json String CODEC(ZSTD(3)),
    -- The replayable trace (JSON lines) and its SHA-256 (hex).
    trace_jsonl String CODEC(ZSTD(3)),
    trace_sha256 String
)
ENGINE = ReplacingMergeTree(created)
ORDER BY (endpoint, version)
TTL toDateTime(created) + INTERVAL 180 DAY
SETTINGS non_replicated_deduplication_window = 1000;
