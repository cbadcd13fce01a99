"""Every path of one job, in one place: its checkpoint, sink, landing directories and runtime files.

Build it once from the loaded spec (`JobPaths.of(platform, spec)`) and pass it down; nothing else
joins a root with a job name. The layout under the platform's roots:

    <checkpoint_root>/<job>/               Spark's checkpoint (offsets/, commits/, sources/, state/)
    <lake_root>/<sink.path>/               the Parquet sink; its log in _spark_metadata/
    <landing_root>/<source.path>/          each source's landing directory
    <runtime_root>/jobs/<job>/             driver log, heartbeat.json, liveness.json, replay/, preview/,
                                           udf-versions/, the lock
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ops.spec.job import JobSpec
from ops.spec.platform import PlatformConfig

# The driver writes it even when its spec does not load, so it is named apart from `JobPaths`.
HEARTBEAT_FILE = "heartbeat.json"
# Beside it, what the driver is doing meanwhile (`ops.driver.liveness`).
LIVENESS_FILE = "liveness.json"
# And the versions of the job's script UDFs each batch ran (`ops.driver.udf_versions`).
UDF_VERSIONS_DIR = "udf-versions"


@dataclass(frozen=True)
class JobPaths:
    """The paths of one job under one platform's storage roots."""

    job: str
    checkpoint: Path
    sink: Path
    runtime: Path
    landing: dict[str, Path]

    @classmethod
    def of(cls, platform: PlatformConfig, spec: JobSpec) -> JobPaths:
        """The paths of `spec`'s job under `platform`'s roots."""
        return cls(
            job=spec.name,
            checkpoint=platform.checkpoint_root / spec.name,
            sink=platform.lake_root / spec.pipeline.sink.path,
            runtime=platform.job_runtime_dir(spec.name),
            landing={
                name: platform.landing_root / source.path for name, source in spec.pipeline.inputs.items()
            },
        )

    @property
    def offsets(self) -> Path:
        return self.checkpoint / "offsets"

    @property
    def commits(self) -> Path:
        return self.checkpoint / "commits"

    @property
    def sources(self) -> Path:
        """The file sources' logs, one directory per source index (`sources/0`, ...)."""
        return self.checkpoint / "sources"

    @property
    def sink_log(self) -> Path:
        """The file sink's log: which output files each committed batch wrote."""
        return self.sink / "_spark_metadata"

    @property
    def heartbeat(self) -> Path:
        return self.runtime / HEARTBEAT_FILE

    @property
    def liveness(self) -> Path:
        return self.runtime / LIVENESS_FILE

    @property
    def udf_versions(self) -> Path:
        return self.runtime / UDF_VERSIONS_DIR

    @property
    def replay(self) -> Path:
        """The replay queue a rewind leaves: original `offsets/<k>` entries still to recompute."""
        return self.runtime / "replay"

    @property
    def preview(self) -> Path:
        return self.runtime / "preview"

    @property
    def upgrade(self) -> Path:
        """Where an upgrade keeps the previous spec until the next upgrade."""
        return self.runtime / "upgrade"

    @property
    def running_spec(self) -> Path:
        """In an upgrade's dry run: the running version's spec, which the candidate's output is
        compared with (`operations.upgrade.output_check`)."""
        return self.upgrade / "running" / f"{self.job}.yaml"

    @property
    def output_shift(self) -> Path:
        """In an upgrade's dry run: the comparison's verdict (`jobs.output_shift`)."""
        return self.upgrade / "output-shift.json"
