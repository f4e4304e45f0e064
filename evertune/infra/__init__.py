"""Infrastructure: how evertune's parts run and talk, knowing nothing of tuning.

The bus (NATS/JetStream), the event kinds and their subjects, the store (ClickHouse), the service
runtime (hosting, gRPC, shutdown), settings, logging, the embedded nats-server, the data dir, the
outbound URL policy, the contracts' stub generator and the package data evertune reads
(`package_data`). Imports nothing from `domain`, `apps` or a service.
"""
