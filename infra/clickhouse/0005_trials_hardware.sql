-- 0005_trials_hardware: the hardware fingerprint of every trial.
--
-- "cpu" is not one kind of hardware (bf16 is fast on an AMX Xeon and emulated on an AVX2 EPYC), so
-- a trial's figures are only comparable with figures of the same fingerprint
-- (evertune.engines.fingerprint). The full fingerprint is in completed_pb (TrialCompleted.hardware);
-- these columns make it queryable. Rows written before this migration have ''.

ALTER TABLE {database}.trials ADD COLUMN IF NOT EXISTS hardware_fingerprint String DEFAULT '' AFTER runner;
ALTER TABLE {database}.trials ADD COLUMN IF NOT EXISTS hardware_tier LowCardinality(String) DEFAULT '' AFTER hardware_fingerprint;
