"""A SearchService client that knows only the stubs generated from proto/evertune/v1/*.proto.

Run by tests/searcher/test_proto_client.py as `python -I -S proto_client.py STUBS SITE ADDRESS
ENDPOINT`: isolated (no PYTHONPATH, no site, so not the editable evertune install), with the
generated stubs first on sys.path and the folder holding grpcio and protobuf after them. It starts a
search, follows it with WatchSearch to its end, reads it back, lists its trials a page of one at a
time, tries three bad ListTrials calls, and prints one JSON object: the wire messages as base64 (for
the test to compare byte for byte), the errors, and where every `evertune` module it loaded came
from.
"""

from __future__ import annotations

import base64
import json
import sys
import uuid
from typing import Any


def _b64(message: Any) -> str:
    return base64.b64encode(message.SerializeToString()).decode("ascii")


def main(argv: list[str]) -> int:
    stubs, site, address, endpoint = argv
    sys.path[:0] = [stubs]
    sys.path.append(site)
    import grpc

    from evertune.v1 import search_service_pb2 as pb
    from evertune.v1 import search_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.SearchServiceStub(channel)  # type: ignore[no-untyped-call]
        request = pb.StartSearchRequest(request_id=uuid.uuid4().hex, endpoint=endpoint, trial_budget=3)
        started = stub.StartSearch(request, timeout=30).search
        watch = pb.WatchSearchRequest(search_id=started.id, replay=True)
        events = list(stub.WatchSearch(watch, timeout=120))
        search = stub.GetSearch(pb.GetSearchRequest(search_id=started.id), timeout=10).search
        trials, pages, token = [], 0, ""
        while True:
            page = stub.ListTrials(
                pb.ListTrialsRequest(search_id=started.id, page_size=1, page_token=token), timeout=10
            )
            trials.extend(page.trials)
            pages += 1
            token = page.next_page_token
            if not token:
                break
        errors = {}
        for name, bad in (
            ("unknown_search", pb.ListTrialsRequest(search_id="search-nope")),
            ("bad_token", pb.ListTrialsRequest(search_id=started.id, page_token="bogus")),
            ("big_page", pb.ListTrialsRequest(search_id=started.id, page_size=5000)),
        ):
            try:
                stub.ListTrials(bad, timeout=10)
                errors[name] = "OK"
            except grpc.RpcError as err:
                errors[name] = f"{err.code().name}: {err.details()}"
    loaded = {
        name: getattr(module, "__file__", None) or list(getattr(module, "__path__", []))
        for name, module in sys.modules.items()
        if name == "evertune" or name.startswith("evertune.")
    }
    print(
        json.dumps(
            {
                "search": _b64(search),
                "events": [_b64(e) for e in events],
                "trials": [_b64(t) for t in trials],
                "pages": pages,
                "errors": errors,
                "loaded": loaded,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
