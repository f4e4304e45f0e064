"""The client's tests run against a real deployer (stand-in engines) on the session's NATS."""

from tests.deployer.conftest import stack

__all__ = ["stack"]
