"""Settings of the deployer service (`EVERTUNE_DEPLOYER_*`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal, Self

import structlog
from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from evertune.deployer.kubernetes import KubernetesTarget
from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.infra.runtime.auth import LOOPBACK_HOSTS
from evertune.infra.runtime.tls import check_tls_settings

log = structlog.get_logger("evertune.deployer.settings")


ENV_PREFIX: Final = "EVERTUNE_DEPLOYER_"
#: Settings of the previous release renamed into a nested group (old flat name -> (group, field)):
#: the old environment variables (`EVERTUNE_DEPLOYER_<OLD>`) and keywords work, with a warning
#: naming the new one (`EVERTUNE_DEPLOYER_<GROUP>__<FIELD>`), for one release more.
RENAMED: Final[dict[str, tuple[str, str]]] = {
    # the rollout policy (`rollout_policy.RolloutPolicy`)
    "rollout_steps": ("rollout", "steps"),
    "rollout_step_duration_s": ("rollout", "step_duration_s"),
    "rollout_max_holds": ("rollout", "max_holds"),
    "rollout_failure_limit": ("rollout", "failures_tolerated"),
    "canary_min_requests": ("rollout", "min_requests"),
    "canary_tail_min_requests": ("rollout", "tail_min_requests"),
    "canary_max_ttft_regression": ("rollout", "max_ttft_regression"),
    "canary_ttft_slack_ms": ("rollout", "ttft_slack_ms"),
    "canary_max_itl_regression": ("rollout", "max_itl_regression"),
    "canary_itl_slack_ms": ("rollout", "itl_slack_ms"),
    "canary_max_error_share_increase": ("rollout", "max_error_share_increase"),
    "canary_p_value": ("rollout", "p_value"),
    # the kubernetes backend (`KubernetesSettings`)
    "kubernetes_kubeconfig": ("kubernetes", "kubeconfig"),
    "kubernetes_context": ("kubernetes", "context"),
    "kubernetes_dry_run_dir": ("kubernetes", "dry_run_dir"),
    "kubernetes_hardware_classes": ("kubernetes", "hardware_classes"),
    "kubernetes_namespace": ("kubernetes", "namespace"),
    "kubernetes_image": ("kubernetes", "image"),
    "kubernetes_gateway_name": ("kubernetes", "gateway_name"),
    "kubernetes_gateway_namespace": ("kubernetes", "gateway_namespace"),
    "kubernetes_hostname": ("kubernetes", "hostname"),
    "kubernetes_version": ("kubernetes", "kubernetes_version"),
    "kubernetes_accelerator_resource": ("kubernetes", "accelerator_resource"),
    "kubernetes_model_volume_claim": ("kubernetes", "model_volume_claim"),
    "kubernetes_model_mount_path": ("kubernetes", "model_mount_path"),
    "kubernetes_termination_grace_s": ("kubernetes", "termination_grace_s"),
    "kubernetes_startup_timeout_s": ("kubernetes", "startup_timeout_s"),
    "kubernetes_cpu_cores": ("kubernetes", "cpu_cores"),
    "kubernetes_cpu_memory_gib": ("kubernetes", "cpu_memory_gib"),
    "kubernetes_run_as_user": ("kubernetes", "run_as_user"),
    "kubernetes_allow_hub_downloads": ("kubernetes", "allow_hub_downloads"),
    "kubernetes_caller_labels": ("kubernetes", "caller_labels"),
    "kubernetes_caller_namespace": ("kubernetes", "caller_namespace"),
    "kubernetes_ingress_peers": ("kubernetes", "ingress_peers"),
    "kubernetes_allow_dns": ("kubernetes", "allow_dns"),
    "kubernetes_egress_cidrs": ("kubernetes", "egress_cidrs"),
}


def renamed_variable(old: str) -> str:
    """The environment variable that replaces the previous release's `EVERTUNE_DEPLOYER_<OLD>`."""
    group, field = RENAMED[old]
    return f"{ENV_PREFIX}{group}__{field}".upper()


def _warn_renamed(old: str, new: str) -> None:
    log.warning("deprecated setting: renamed, the old name goes in the next release", old=old, new=new)


class RenamedVariables(EnvSettingsSource):
    """The previous release's flat variables (`RENAMED`), read as if set under their new nested
    names (a new variable set too wins), each with a warning. An empty one counts as unset (it
    meant "none" for the optional ones)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = {k.upper(): v for k, v in os.environ.items()}
        renamed: dict[str, str | None] = {}
        for old in RENAMED:
            raw = env.get(f"{ENV_PREFIX}{old.upper()}")
            if not raw:
                continue
            _warn_renamed(f"{ENV_PREFIX}{old.upper()}", renamed_variable(old))
            new = renamed_variable(old)
            renamed[new if self.case_sensitive else new.lower()] = raw
        return renamed


class KubernetesSettings(KubernetesTarget):
    """The kubernetes backend's settings, `EVERTUNE_DEPLOYER_KUBERNETES__<FIELD>`: where deployments
    run (`KubernetesTarget`, whose defaults and bounds these are) and how the deployer reaches the
    cluster."""

    #: Kubeconfig file; none: the in-cluster service account (or ~/.kube/config outside a pod).
    kubeconfig: Path | None = None
    #: Kubeconfig context (none: its current context).
    context: str | None = None
    #: Write manifests into this folder instead of applying them (no cluster needed).
    dry_run_dir: Path | None = None
    #: Hardware classes the cluster serves (JSON list); each must be a known hardware profile.
    hardware_classes: tuple[str, ...] = ("h200",)

    def target(self) -> KubernetesTarget:
        """The `KubernetesTarget` part (already checked)."""
        return KubernetesTarget.model_construct(
            **{name: getattr(self, name) for name in KubernetesTarget.model_fields}
        )


class DeployerSettings(BaseSettings):
    """Settings of the deployer service; loaded once at start and passed down."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_nested_delimiter="__")

    #: Address of the EndpointService gRPC server.
    grpc_host: str = "127.0.0.1"
    #: gRPC port; 0 picks a free one.
    grpc_port: int = Field(default=50051, ge=0, le=65535)
    #: Address the Prometheus `/metrics` server binds (`0.0.0.0` for a scraper on another host).
    metrics_host: str = "127.0.0.1"
    #: Port of the Prometheus `/metrics` server (the deployer's own metrics and its local engines'
    #: vLLM metrics); 0 picks a free one (in the status), -1 = off.
    metrics_port: int = Field(default=9405, ge=-1, le=65535)
    #: Largest request or response message, in bytes.
    max_message_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)
    #: Token file: one `<token> <tenant>` per line (`*` = every tenant); see docs/services/deployer.md.
    token_file: Path | None = None
    #: Tokens in the same format, entries separated by commas (added to the file's).
    tokens: SecretStr = SecretStr("")
    #: Serve without tokens on a non-loopback address (never do this outside a closed network).
    allow_unauthenticated: bool = False
    #: Folders each tenant's models must lie in, JSON {"tenant": ["/folder", ...], "*": [...]}
    #: (`model_roots.py`); empty: any model (the single-machine default).
    model_roots: str = ""
    #: Serve hub ids (not local paths) as models when `model_roots` is set.
    allow_hub_models: bool = False
    #: Take tokens over plaintext gRPC on a non-loopback address: only when TLS is terminated in
    #: front of the deployer (a service mesh, a proxy); otherwise set the TLS files.
    allow_plaintext_tokens: bool = False
    #: TLS certificate chain (PEM); with `tls_key_file` the server speaks TLS only.
    tls_cert_file: Path | None = None
    #: TLS private key (PEM).
    tls_key_file: Path | None = None
    #: CA (PEM) that signs client certificates: set, the server speaks mutual TLS (a client without
    #: a certificate it signed is refused). Only with the two files above.
    tls_client_ca_file: Path | None = None
    #: Serving backend: "local" (engine processes on this machine) or "kubernetes".
    backend: Literal["local", "kubernetes"] = "local"
    #: Hardware classes the local backend serves (an engine of kind "sim" also serves "sim-*").
    local_hardware_classes: list[str] = Field(default_factory=lambda: ["cpu"])
    #: CPU cores each local vLLM-CPU replica is bound to, the least used first; 0: half the cores
    #: this process may use (at least 1), so a rollout's stable and canary engines do not share.
    local_cpu_cores_per_engine: int = Field(default=0, ge=0)
    #: Engine logs of the local backend; empty: `<data-dir>/deployer/engines`.
    engine_log_dir: Path | None = None
    #: Seconds a new deployment has to become ready before it is FAILED.
    ready_timeout_s: float = Field(default=600.0, gt=0)
    #: Seconds a replaced deployment gets to finish its in-flight requests before it is stopped.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    #: Seconds between liveness checks of a running engine.
    health_interval_s: float = Field(default=2.0, gt=0)
    #: Restarts of one engine within `restart_window_s` before the deployment is FAILED.
    max_restarts: int = Field(default=3, ge=0)
    #: Window of `max_restarts`, in seconds.
    restart_window_s: float = Field(default=600.0, gt=0)

    # -- progressive rollout -----------------------------------------------------------------
    #: Every endpoint's rollout defaults, field by field `EVERTUNE_DEPLOYER_ROLLOUT__<FIELD>`
    #: (`rollout_policy.RolloutPolicy`; an endpoint's `spec.rollout` overrides them).
    rollout: RolloutPolicy = RolloutPolicy()
    #: Requests sent straight to a new deployment once ready, before it takes traffic.
    warmup_requests: int = Field(default=3, ge=0)
    #: Seconds telemetry takes from the gateway to the store (waited before each analysis).
    telemetry_lag_s: float = Field(default=2.0, ge=0)
    #: A search.completed older than this (seconds) is not rolled out (a replayed backlog).
    search_max_age_s: float = Field(default=3600.0, gt=0)

    # -- the kubernetes backend --------------------------------------------------------------
    #: Field by field `EVERTUNE_DEPLOYER_KUBERNETES__<FIELD>` (`KubernetesSettings`: the
    #: `KubernetesTarget` and the cluster's connection; JSON for lists and label sets).
    kubernetes: KubernetesSettings = KubernetesSettings()

    @model_validator(mode="before")
    @classmethod
    def _renamed_keywords(cls, data: Any) -> Any:
        """The previous release's flat keywords (`rollout_steps=`, `kubernetes_namespace=`...) go to
        their nested group, with a warning naming the new form."""
        if not isinstance(data, dict) or not RENAMED.keys() & data.keys():
            return data
        flat = dict(data)
        for old, (group, field) in RENAMED.items():
            if old not in flat:
                continue
            _warn_renamed(old, f"{group}={{{field!r}: ...}}")
            nested = flat.get(group) or {}
            nested = dict(nested.model_dump() if isinstance(nested, BaseModel) else nested)
            nested[field] = flat.pop(old)
            flat[group] = nested
        return flat

    def kubernetes_target(self) -> KubernetesTarget:
        """Where the kubernetes backend puts deployments."""
        return self.kubernetes.target()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The environment as usual, then the renamed variables of the previous release below it."""
        return (
            init_settings,
            env_settings,
            RenamedVariables(settings_cls),
            dotenv_settings,
            file_secret_settings,
        )

    @model_validator(mode="after")
    def _tls(self) -> Self:
        check_tls_settings(self, "EVERTUNE_DEPLOYER_")
        return self

    @property
    def loopback_only(self) -> bool:
        """Whether the gRPC server binds a loopback address only."""
        return self.grpc_host in LOOPBACK_HOSTS
