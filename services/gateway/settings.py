"""Settings of the gateway service (`EVERTUNE_GATEWAY_*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from evertune.infra.runtime.tls import check_tls_settings

#: The public development value of `prefix_secret`.
DEV_PREFIX_SECRET = "evertune-dev-prefix-secret"


class GatewaySettings(BaseSettings):
    """Settings of the gateway service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix="EVERTUNE_GATEWAY_", extra="ignore")

    #: Address the OpenAI-compatible HTTP server binds.
    host: str = "127.0.0.1"
    #: HTTP port; 0 picks a free one.
    port: int = Field(default=8080, ge=0, le=65535)
    #: Largest request body accepted, in bytes; a larger one is answered 413 and not forwarded.
    max_body_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    #: API keys file: one `<key> <tenant>` per line (`*` = an operator's), the format of the
    #: deployer's tokens. With keys, inference calls need `Authorization: Bearer <key>` and reach
    #: only their tenant's endpoints; `/metrics` needs an operator's key. No keys: open, on a
    #: loopback address only.
    api_key_file: Path | None = None
    #: API keys in the same format, entries separated by commas (added to the file's).
    api_keys: SecretStr = SecretStr("")
    #: Serve without API keys on a non-loopback address (never do this outside a closed network).
    allow_unauthenticated: bool = False
    #: Take API keys over plaintext HTTP on a non-loopback address: only when TLS is terminated in
    #: front of the gateway (an ingress, a mesh, a proxy); otherwise set the TLS files.
    allow_plaintext_keys: bool = False
    #: TLS certificate chain (PEM); with `tls_key_file` the port speaks HTTPS only.
    tls_cert_file: Path | None = None
    #: TLS private key (PEM).
    tls_key_file: Path | None = None
    #: CA (PEM) that signs client certificates: set, the port speaks mutual TLS (a client without
    #: a certificate it signed is refused). Only with the two files above.
    tls_client_ca_file: Path | None = None
    #: Seconds a client has to send a request's line and headers, counted from the connection's
    #: start or the end of its previous response (then the connection is closed: a slow sender cannot
    #: hold it). It also bounds how long an idle keep-alive connection stays open (aiohttp's
    #: `keepalive_timeout`, which is what enforces it).
    header_timeout_s: float = Field(default=10.0, gt=0)
    #: Seconds a client has to send its whole request body (then 408: a slow sender cannot hold a
    #: connection and a request slot open).
    body_read_timeout_s: float = Field(default=30.0, gt=0)
    #: Requests per second each tenant may send (the tenant of the caller's API key, `*` for an
    #: operator's key and for a gateway without keys); beyond it 429 with Retry-After. 0: no cap.
    tenant_rate_limit: float = Field(default=0.0, ge=0)
    #: Per-tenant rates replacing `tenant_rate_limit` (JSON, e.g. `{"acme": 50, "*": 0}`; 0: no cap).
    tenant_rate_limits: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    #: Seconds of its rate a tenant may send at once (the token bucket's size; at least 1 request).
    tenant_rate_burst_s: float = Field(default=1.0, gt=0)
    #: Requests one endpoint may have in flight (streams included); beyond it 429 with Retry-After.
    max_in_flight_per_endpoint: int = Field(default=1000, ge=1)
    #: KV bucket holding one serialized RouteTable per endpoint (key = endpoint name).
    routes_bucket: str = "routes"
    #: What the upstream receives in `model`: "endpoint" (the name the client sent) or
    #: "deployment" (the chosen deployment's id, for engines started with that served-model-name).
    upstream_model: Literal["endpoint", "deployment"] = "endpoint"
    #: Seconds to open a connection to an upstream before answering 502.
    upstream_connect_timeout_s: float = Field(default=5.0, gt=0)
    #: Seconds of upstream silence (no byte) before the request fails with 504.
    upstream_read_timeout_s: float = Field(default=300.0, gt=0)
    #: Model folder whose chat template and tokenizer count prompts for the prefix hashes of endpoints
    #: whose own model folder this gateway cannot read (`chat_formats.py`); empty: evertune's local
    #: model under the data dir (`evertune.domain.model.ensure_model`).
    tokenizer_dir: Path | None = None
    #: Tokens per block of the prefix-hash chain (vLLM-CPU's KV block size).
    prefix_block_tokens: int = Field(default=128, ge=1)
    #: Secret the per-endpoint prefix-hash keys derive from (HMAC(secret, endpoint)). The built-in
    #: value is public: it serves only the embedded single-machine setup (`evertune up` with its
    #: own NATS); a gateway joining a NATS of its own (`EVERTUNE_NATS_URL`) refuses to start with it.
    prefix_secret: SecretStr = SecretStr(DEV_PREFIX_SECRET)
    #: Records waiting for the publisher, at most; beyond this a record goes straight to the spool.
    queue_records: int = Field(default=50_000, ge=1)
    #: Records per published batch, at most.
    batch_records: int = Field(default=500, ge=1)
    #: Milliseconds a record waits for its batch to fill before the batch is published anyway.
    batch_ms: float = Field(default=50.0, gt=0)
    #: Seconds to wait for JetStream's ack of one batch before it is spooled.
    publish_timeout_s: float = Field(default=2.0, gt=0)
    #: Seconds between attempts to drain the spool while NATS is away.
    spool_retry_s: float = Field(default=1.0, gt=0)
    #: Spool file of batches that could not be published; empty: `<data-dir>/gateway/spool.bin`.
    spool_path: Path | None = None
    #: Bytes the spool file holds at most (and the file being drained, so twice this on disk at
    #: most); past it the oldest records are dropped and counted.
    spool_max_bytes: int = Field(default=512 * 1024 * 1024, ge=64 * 1024)
    #: Seconds a 503 (no deployment takes requests, not ready) tells the client to wait before a retry.
    retry_after_s: int = Field(default=1, ge=0)
    #: Event loop of the gateway's own process (`evertune run gateway`): "uvloop" (libuv, when
    #: installed) or "asyncio". Under `evertune up` the gateway shares the host's asyncio loop.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    #: Answer Prometheus' `GET /metrics` on the gateway's HTTP port.
    metrics: bool = True

    @model_validator(mode="after")
    def _tls(self) -> Self:
        check_tls_settings(self, "EVERTUNE_GATEWAY_")
        return self
