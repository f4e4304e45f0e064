"""Settings of the deployer service (`EVERTUNE_DEPLOYER_*`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final, Literal, Self

import structlog
from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from evertune.deployer.kubernetes import DEFAULT_CALLER_LABELS, KubernetesTarget
from evertune.deployer.rollout_policy import RolloutPolicy
from evertune.infra.runtime.auth import LOOPBACK_HOSTS
from evertune.infra.runtime.tls import check_tls_settings

log = structlog.get_logger("evertune.deployer.settings")


ENV_PREFIX: Final = "EVERTUNE_DEPLOYER_"
#: Settings of the previous release renamed into the nested `rollout` (old flat name -> field of
#: `RolloutPolicy`): the old environment variables and keywords work, with a warning, for one
#: release more.
RENAMED_ROLLOUT: Final = {
    "rollout_steps": "steps",
    "rollout_step_duration_s": "step_duration_s",
    "rollout_max_holds": "max_holds",
    "rollout_failure_limit": "failures_tolerated",
    "canary_min_requests": "min_requests",
    "canary_tail_min_requests": "tail_min_requests",
    "canary_max_ttft_regression": "max_ttft_regression",
    "canary_ttft_slack_ms": "ttft_slack_ms",
    "canary_max_itl_regression": "max_itl_regression",
    "canary_itl_slack_ms": "itl_slack_ms",
    "canary_max_error_share_increase": "max_error_share_increase",
    "canary_p_value": "p_value",
}


def renamed_variable(old: str) -> str:
    """The environment variable that replaces the previous release's `EVERTUNE_DEPLOYER_<OLD>`."""
    return f"{ENV_PREFIX}ROLLOUT__{RENAMED_ROLLOUT[old].upper()}"


def _warn_renamed(old: str, new: str) -> None:
    log.warning("deprecated setting: renamed, the old name goes in the next release", old=old, new=new)


class RenamedRolloutVariables(PydanticBaseSettingsSource):
    """The previous release's `EVERTUNE_DEPLOYER_ROLLOUT_*` / `_CANARY_*` variables, read into
    `rollout` under the new ones (a new variable set too wins), each with a warning."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the variables itself

    def __call__(self) -> dict[str, Any]:
        env = {k.upper(): v for k, v in os.environ.items()}
        nested: dict[str, Any] = {}
        for old, new in RENAMED_ROLLOUT.items():
            raw = env.get(f"{ENV_PREFIX}{old.upper()}")
            if raw is None:
                continue
            _warn_renamed(f"{ENV_PREFIX}{old.upper()}", renamed_variable(old))
            try:
                nested[new] = json.loads(raw)  # "[1000, 10000]", "30", "0.01"
            except ValueError:
                nested[new] = raw  # left for the field's own check to refuse, by name
        return {"rollout": nested} if nested else {}


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

    # -- the kubernetes backend (KubernetesTarget's fields) ------------------------------------
    #: Kubeconfig file; none: the in-cluster service account (or ~/.kube/config outside a pod).
    kubernetes_kubeconfig: Path | None = None
    #: Kubeconfig context (none: its current context).
    kubernetes_context: str | None = None
    #: Write manifests into this folder instead of applying them (no cluster needed).
    kubernetes_dry_run_dir: Path | None = None
    #: Hardware classes the cluster serves (JSON list); each must be a known hardware profile.
    kubernetes_hardware_classes: list[str] = Field(default_factory=lambda: ["h200"])
    #: Namespace of every object the deployer applies.
    kubernetes_namespace: str = Field(
        default="evertune", pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$", max_length=63
    )
    #: vLLM OpenAI-server container image.
    kubernetes_image: str = "vllm/vllm-openai:v0.32.0"
    #: Gateway (Gateway API) the HTTPRoutes attach to, and its namespace (none: the namespace above).
    kubernetes_gateway_name: str = "evertune"
    kubernetes_gateway_namespace: str | None = None
    #: Host name the HTTPRoutes answer for (none: every host of the Gateway's listener).
    kubernetes_hostname: str | None = None
    #: Kubernetes version whose schemas manifests are validated against.
    kubernetes_version: str = "1.33"
    #: Extended resource of one accelerator.
    kubernetes_accelerator_resource: str = "nvidia.com/gpu"
    #: PersistentVolumeClaim with the model weights (mounted read-only), and where.
    kubernetes_model_volume_claim: str | None = None
    kubernetes_model_mount_path: str = "/models"
    #: Seconds a pod gets to finish its streams when told to stop.
    kubernetes_termination_grace_s: int = Field(default=120, ge=1)
    #: Seconds a pod may take to load the model.
    kubernetes_startup_timeout_s: int = Field(default=1800, ge=10)
    #: CPU cores and memory (GiB) per replica on a CPU hardware class.
    kubernetes_cpu_cores: int = Field(default=8, ge=1)
    kubernetes_cpu_memory_gib: int = Field(default=32, ge=1)
    #: User id the vLLM pods run as, non-root (empty: the image's own user).
    kubernetes_run_as_user: int | None = Field(default=None, ge=1)
    #: Let pods download hub models (the hub's offline mode is set otherwise).
    kubernetes_allow_hub_downloads: bool = False
    #: Pods that may connect to engines, JSON list of label sets (one per caller); default: the
    #: gateway, deployer and profiler as labelled in infra/kubernetes/base/services/.
    kubernetes_caller_labels: list[dict[str, str]] = Field(
        default_factory=lambda: [dict(labels) for labels in DEFAULT_CALLER_LABELS]
    )
    #: Namespace those callers run in (empty: the engines' namespace).
    kubernetes_caller_namespace: str | None = None
    #: Further NetworkPolicy peers allowed in, JSON list in Kubernetes' form (Gateway API proxies,
    #: the cluster's Prometheus).
    kubernetes_ingress_peers: list[dict[str, Any]] = Field(default_factory=list)
    #: Let engine pods query the cluster DNS (kube-dns in kube-system, UDP and TCP 53).
    kubernetes_allow_dns: bool = False
    #: Networks engine pods may connect to, JSON list of CIDRs (none: no egress at all).
    kubernetes_egress_cidrs: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _renamed_keywords(cls, data: Any) -> Any:
        """The previous release's flat keywords (`rollout_steps=`, `canary_p_value=`...) go to
        `rollout`, with a warning naming the new form."""
        if not isinstance(data, dict) or not RENAMED_ROLLOUT.keys() & data.keys():
            return data
        rollout = data.get("rollout") or {}
        nested = dict(rollout.model_dump() if isinstance(rollout, RolloutPolicy) else rollout)
        flat = dict(data)
        for old, new in RENAMED_ROLLOUT.items():
            if old in flat:
                _warn_renamed(old, f"rollout={{{new!r}: ...}}")
                nested[new] = flat.pop(old)
        return {**flat, "rollout": nested}

    @field_validator(
        "kubernetes_caller_labels",
        "kubernetes_caller_namespace",
        "kubernetes_ingress_peers",
        "kubernetes_egress_cidrs",
    )
    @classmethod
    def _network_policy(cls, value: Any, info: ValidationInfo) -> Any:
        """Checked as KubernetesTarget checks it, so a bad value names its own variable."""
        field = (info.field_name or "").removeprefix("kubernetes_")
        try:
            KubernetesTarget.model_validate(
                {field: tuple(value) if isinstance(value, list) else value or None}
            )
        except ValidationError as err:
            raise ValueError(str(err.errors()[0]["msg"]).removeprefix("Value error, ")) from None
        return value

    def kubernetes_target(self) -> KubernetesTarget:
        """Where the kubernetes backend puts deployments."""
        return KubernetesTarget(
            namespace=self.kubernetes_namespace,
            image=self.kubernetes_image,
            gateway_name=self.kubernetes_gateway_name,
            gateway_namespace=self.kubernetes_gateway_namespace,
            hostname=self.kubernetes_hostname,
            kubernetes_version=self.kubernetes_version,
            accelerator_resource=self.kubernetes_accelerator_resource,
            model_volume_claim=self.kubernetes_model_volume_claim,
            model_mount_path=self.kubernetes_model_mount_path,
            termination_grace_s=self.kubernetes_termination_grace_s,
            startup_timeout_s=self.kubernetes_startup_timeout_s,
            cpu_cores=self.kubernetes_cpu_cores,
            cpu_memory_gib=self.kubernetes_cpu_memory_gib,
            run_as_user=self.kubernetes_run_as_user,
            allow_hub_downloads=self.kubernetes_allow_hub_downloads,
            caller_labels=tuple(self.kubernetes_caller_labels),
            caller_namespace=self.kubernetes_caller_namespace or None,
            ingress_peers=tuple(self.kubernetes_ingress_peers),
            allow_dns=self.kubernetes_allow_dns,
            egress_cidrs=tuple(self.kubernetes_egress_cidrs),
        )

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
            RenamedRolloutVariables(settings_cls),
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
