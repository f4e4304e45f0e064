-- 0006_endpoint_uid: rows belong to an endpoint's immutable id, not only to its name.
--
-- An endpoint's name can be deleted by one tenant and created again by another; the new endpoint
-- has a new id (Endpoint.uid). Requests, profiles and searches carry the id they were recorded
-- under, and every reader that acts for an endpoint filters on it, so a re-created name inherits
-- none of the old endpoint's telemetry, profiles or searches. Rows written before this migration
-- have '' and belong to no endpoint id.

ALTER TABLE {database}.requests ADD COLUMN IF NOT EXISTS endpoint_uid LowCardinality(String) DEFAULT '' AFTER endpoint;
ALTER TABLE {database}.profiles ADD COLUMN IF NOT EXISTS endpoint_uid LowCardinality(String) DEFAULT '' AFTER endpoint;
ALTER TABLE {database}.searches ADD COLUMN IF NOT EXISTS endpoint_uid LowCardinality(String) DEFAULT '' AFTER endpoint;
