-- 0005_trials_hardware: the hardware fingerprint of every trial, and the golden answers' top-k.
--
-- "cpu" is not one kind of hardware (bf16 is fast on an AMX Xeon and emulated on an AVX2 EPYC), so
-- a trial's figures are only comparable with figures of the same fingerprint
-- (evertune.engines.fingerprint). The full fingerprint is in completed_pb (TrialCompleted.hardware);
-- these columns make it queryable. Rows written before this migration have ''.
--
-- golden_alternatives: per golden answer and position, the keyed hashes of the engine's top-k tokens
-- there, each hashed as the step the answer's hash chain would take with it (runner/golden.py), so
-- the correctness gate can check top-k logprob closeness without any token id stored. Empty for
-- rows written before (the gate then falls back to token agreement).

ALTER TABLE {database}.trials ADD COLUMN IF NOT EXISTS hardware_fingerprint String DEFAULT '' AFTER runner;
ALTER TABLE {database}.trials ADD COLUMN IF NOT EXISTS hardware_tier LowCardinality(String) DEFAULT '' AFTER hardware_fingerprint;
ALTER TABLE {database}.trials ADD COLUMN IF NOT EXISTS golden_alternatives Array(Array(Array(UInt64))) AFTER golden_hashes;
