-- 0001_requests: the telemetry table. One row per request the gateway saw.
--
-- Privacy: this table NEVER holds prompt or completion text, nor anything derived from it that can
-- be reversed. Prompt structure is kept only as `prefix_hashes`: keyed hashes (HMAC with a
-- per-endpoint key) of token-block prefixes, enough to profile prefix-cache reuse without content.
--
-- Written by the profiler's telemetry sink in batches through `Store.insert(..., dedup_token=...)`.
-- `non_replicated_deduplication_window` keeps the hashes/tokens of the last 1000 inserted blocks,
-- so a batch retried with the same `insert_deduplication_token` (a redelivered JetStream message,
-- a retry after a timeout) is dropped instead of counted twice.
--
-- Rows expire after 30 days (TTL). Partitions are days, so expired data goes as whole parts.
-- `{database}` is replaced by the store's database when the migration runs.

CREATE TABLE IF NOT EXISTS {database}.requests
(
    -- Which endpoint (the name clients call) and which of its deployments served the request.
    endpoint LowCardinality(String),
    deployment LowCardinality(String),
    -- Gateway-assigned id, unique per endpoint; with ts it identifies the row.
    request_id String,
    -- When the gateway received the request (start), UTC, microseconds.
    ts DateTime64(6, 'UTC'),
    -- OpenAI API the client called: 'chat.completions', 'completions', ...
    api LowCardinality(String),
    -- Model name as the client asked for it.
    model LowCardinality(String),
    stream Bool,
    -- HTTP status the client got (0 when the client went away before headers were sent).
    status_code UInt16,
    -- '' for success; otherwise a short class such as 'upstream_timeout', 'upstream_5xx',
    -- 'bad_request', 'client_disconnect'. Never an error text that could echo the prompt.
    error_class LowCardinality(String),
    -- Client-observed time to first token (request received -> first content byte sent), ms.
    ttft_ms Float64,
    -- Client-observed end to end time (request received -> last byte sent), ms.
    e2e_ms Float64,
    -- Time to first token as seen from the gateway's upstream call (what vLLM costs), ms.
    upstream_ttft_ms Float64,
    -- Inter-token latencies: gaps between consecutive streamed tokens, ms.
    itl_ms Array(Float32),
    -- Token counts from the engine's usage report.
    prompt_tokens UInt32,
    cached_tokens UInt32,
    completion_tokens UInt32,
    -- Keyed hashes (HMAC, per-endpoint key) of the prompt's token-block prefixes, in block order.
    prefix_hashes Array(UInt64),
    -- The client closed the connection before the response finished.
    client_disconnected Bool
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (endpoint, ts, request_id)
TTL toDateTime(ts) + INTERVAL 30 DAY
SETTINGS
    -- Retried batches (same insert_deduplication_token, or identical data) are dropped.
    non_replicated_deduplication_window = 1000,
    -- Expire whole parts (a day's partition) instead of rewriting them row by row.
    ttl_only_drop_parts = 1;
