"""The one SLO: wire round trip, the defaults a 0 stands for, and the values no SLO can have."""

from __future__ import annotations

import math

import pytest

from evertune.domain.slo import DEFAULT_ATTAINMENT, Slo
from evertune.errors import InvalidArgument
from evertune.v1 import endpoint_pb2


def test_zeros_on_the_wire_mean_no_itl_target_and_the_default_share() -> None:
    slo = Slo.from_proto(endpoint_pb2.Slo(ttft_p99_ms=800))
    assert slo == Slo(ttft_ms=800.0, itl_ms=math.inf, share=DEFAULT_ATTAINMENT)
    assert slo.itl_wire_ms == 0.0 and slo.budget == pytest.approx(0.1)
    assert slo.to_proto() == endpoint_pb2.Slo(ttft_p99_ms=800, attainment_target=0.9)


def test_round_trip() -> None:
    wire = endpoint_pb2.Slo(ttft_p50_ms=200, ttft_p99_ms=800, itl_p99_ms=60, attainment_target=0.99)
    slo = Slo.from_proto(wire)
    assert (slo.ttft_ms, slo.itl_ms, slo.share, slo.ttft_p50_ms) == (800, 60, 0.99, 200)
    assert Slo.from_proto(slo.to_proto()) == slo and slo.to_proto() == wire
    assert Slo(ttft_ms=500, share=1.0).budget == 0.0  # every request must be good


@pytest.mark.parametrize(
    ("wire", "field"),
    [
        (endpoint_pb2.Slo(), "ttft_p99_ms"),
        (endpoint_pb2.Slo(ttft_p99_ms=-1), "ttft_p99_ms"),
        (endpoint_pb2.Slo(ttft_p99_ms=math.nan), "ttft_p99_ms"),
        (endpoint_pb2.Slo(ttft_p99_ms=800, itl_p99_ms=-5), "itl_p99_ms"),
        (endpoint_pb2.Slo(ttft_p99_ms=800, itl_p99_ms=math.nan), "itl_p99_ms"),
        (endpoint_pb2.Slo(ttft_p99_ms=800, attainment_target=1.5), "attainment_target"),
        (endpoint_pb2.Slo(ttft_p99_ms=800, attainment_target=-0.1), "attainment_target"),
        (endpoint_pb2.Slo(ttft_p99_ms=800, ttft_p50_ms=-1), "ttft_p50_ms"),
    ],
)
def test_values_no_slo_can_have_are_refused_naming_the_field(wire: endpoint_pb2.Slo, field: str) -> None:
    with pytest.raises(InvalidArgument, match=field) as caught:
        Slo.from_proto(wire)
    assert "\n" not in str(caught.value)
