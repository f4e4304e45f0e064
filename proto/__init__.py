"""evertune's contracts as `.proto` files, read as package data `evertune.contracts`
(`evertune.infra.package_data`); the stubs generated from them are `evertune.v1`."""
