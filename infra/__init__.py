"""evertune's deployment definitions, read as package data `evertune.definitions`
(`evertune.infra.package_data`): NATS, ClickHouse, Kubernetes, Prometheus, Grafana, the image."""
