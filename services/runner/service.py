"""The runner service: runs trials on the hardware it sits on.

One runner process per hardware class; it will take trial jobs from `evertune.jobs.<hardware>`
once the search/verify work lands (see docs/services/runner.md). Today it runs the shared
lifecycle and reports its hardware class.
"""

from __future__ import annotations

from typing import Any, ClassVar

from evertune.runner.settings import RunnerSettings

from evertune.runtime import Service


class RunnerService(Service):
    name: ClassVar[str] = "runner"
    description: ClassVar[str] = "Runs trial jobs on its hardware class: engine, replay, measure, gates"

    def __init__(self, settings: RunnerSettings) -> None:
        super().__init__()
        self.settings = settings

    def details(self) -> dict[str, Any]:
        return {"hardware": self.settings.hardware, "jobs_subject": f"evertune.jobs.{self.settings.hardware}"}
