"""A run's output on the pod: its output directory, the spill entries left there
(criterion `disk_clean`) and the quality judge on its output text."""

from __future__ import annotations

from typing import Any

from spillover_operator.client import Connection

from spillover_harness.checks import judge_output
from spillover_harness.cluster.observe import look_for_spill, read_output
from spillover_harness.cluster.starters import RunHandle
from spillover_harness.drivers.base import RunJob
from spillover_harness.drivers.cluster.status import first
from spillover_harness.fixtures import FixtureSet
from spillover_harness.profile import Profile, render_template

MAX_NOTES_PER_CHECK = 5


class RunOutput:
    """The disk and quality checks of one run (exec into `target`, or the newest
    running pod of `disk.pod` when it is None)."""

    def __init__(self, profile: Profile, cluster: Connection, fixtures: FixtureSet) -> None:
        self.profile = profile
        self.cluster = cluster
        self.fixtures = fixtures

    def directory(self, job: RunJob, handle: RunHandle, status: dict[str, Any] | None) -> str:
        disk = self.profile.disk
        if status is not None and disk.output_dir_path is not None:
            found = first(disk.output_dir_path, status)
            if isinstance(found, str) and found.startswith("/"):
                return found
        return str(
            render_template(
                disk.output_dir,
                {
                    "run_id": handle.run_id,
                    "platform_run_id": handle.platform_run_id,
                    "namespace": self.profile.namespace,
                    "recipe": job.recipe,
                    "input": job.input.name,
                },
            )
        )

    def disk_after(
        self,
        job: RunJob,
        directory: str,
        during: set[str],
        notes: list[str],
        target: tuple[str, str] | None,
    ) -> bool | None:
        look = look_for_spill(
            self.cluster,
            self.profile.namespace,
            self.profile.disk.pod,
            directory,
            self.profile.disk.spill_name,
            target,
        )
        if look.entries is None:
            notes.append(f"after the run: {look.note}")
            if during:
                return False
            return None
        if look.note:
            notes.append(f"after the run: {look.note}")
        if not look.present and not during:
            notes.append(
                f"disk: the output directory {directory} does not exist in the pod (not checked)"
            )
            return None
        found = sorted(during | set(look.entries))
        notes += [f"disk: spill entry {path}" for path in found[:MAX_NOTES_PER_CHECK]]
        if len(found) > MAX_NOTES_PER_CHECK:
            notes.append(f"disk: {len(found) - MAX_NOTES_PER_CHECK} more spill entries")
        return not found

    def quality(
        self,
        job: RunJob,
        outcome: str,
        status: dict[str, Any] | None,
        directory: str,
        notes: list[str],
        target: tuple[str, str] | None,
    ) -> bool | None:
        if outcome == "aborted":
            return None
        fixture = self.fixtures.get(job.recipe, job.input.name)
        text = first(self.profile.fields.output_text, status or {})
        output = text if isinstance(text, str) else None
        if output is None:
            look = read_output(
                self.cluster,
                self.profile.namespace,
                self.profile.disk.pod,
                directory,
                self.profile.disk.output_files,
                target,
            )
            if look.note:
                notes.append(look.note)
            if not look.checked:
                return None
            output = look.text
        if output is None and outcome == "succeeded":
            notes.append("quality: the step succeeded but no output file was found (not judged)")
            return None
        return judge_output(output, fixture)
