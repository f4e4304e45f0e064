-- 0004_searches: configuration searches, one version of a row per change of a search.
--
-- Written by the searcher (services/searcher/records.py) whenever a search changes: accepted,
-- ranked, after each batch of trials, done. Each write is a new version (`revision` counts from 1);
-- ReplacingMergeTree keeps the highest revision, and reads use FINAL, so GetSearch and ListSearches
-- see the latest state, also after a restart. Each insert passes insert_deduplication_token
-- `search:<id>:<revision>`, so a retried write stores one copy.
--
-- The trials themselves are in `trials` (0003), by search_id. No prompt or completion text here.
-- No TTL: a search is the evidence behind a rollout. `{database}` is replaced by the store's
-- database when the migration runs.

CREATE TABLE IF NOT EXISTS {database}.searches
(
    search_id String,
    -- Increases by one with every write of the search; the row with the highest is the current one.
    revision UInt64,
    endpoint LowCardinality(String),
    -- StartSearchRequest.request_id, or "profile:<event id>" for a search a profile.ready started.
    request_id String,
    -- "api" or "profile.ready", and the id of the event that caused it ('' when none).
    trigger LowCardinality(String),
    cause_id String,
    profile_id String,
    hardware_classes Array(String),
    trial_budget UInt32,
    -- "goodput", "p50_ttft" or "cost".
    objective LowCardinality(String),
    -- SearchState name ("SEARCH_STATE_RUNNING"...) and, when done, the outcome: "winner",
    -- "no_improvement", "infeasible", "failed" or "cancelled".
    state LowCardinality(String),
    outcome LowCardinality(String),
    create_time DateTime64(6, 'UTC'),
    update_time DateTime64(6, 'UTC'),
    -- Unset (1970) until done.
    end_time DateTime64(6, 'UTC'),
    trials_started UInt32,
    trials_completed UInt32,
    -- Candidates the performance model ranked, how many it predicted to meet the SLO, and how long
    -- ranking the whole space took (seconds).
    modeled_candidates UInt32,
    feasible_predicted UInt32,
    ranking_s Float64,
    -- Best (or winning) trial so far, whether it ran on real hardware, the plain-language summary
    -- and the one-line error of a failed or cancelled search.
    best_trial_id String,
    verified Bool,
    summary String,
    error String,
    -- Evidence as JSON: winner and baseline figures and gates at the deciding fidelity, the knobs
    -- changed, model re-calibrations, every trial's figures.
    evidence_json String CODEC(ZSTD(3)),
    -- The evertune.v1.Search message as served (base64 of its serialized bytes).
    search_pb String
)
ENGINE = ReplacingMergeTree(revision)
ORDER BY search_id
SETTINGS non_replicated_deduplication_window = 1000;
