"""The job watch trigger: serializable, and it fires on what the supervisor's plan says."""

from __future__ import annotations

import asyncio

from ops.control.supervisor import Supervisor
from ops.spec.platform import PlatformConfig
from streamwarden_airflow.triggers import JobWatchTrigger


def first_event(trigger: JobWatchTrigger) -> dict:
    async def run() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(run())


def test_serialize_round_trip(platform_conf: PlatformConfig) -> None:
    trigger = JobWatchTrigger(
        job="router", conf_dir=str(platform_conf.conf_dir), poll_interval=0.5, timeout=7
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "streamwarden_airflow.triggers.JobWatchTrigger"
    assert JobWatchTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_fires_when_the_job_needs_a_pass_and_times_out_when_not(platform_conf: PlatformConfig) -> None:
    conf_dir = str(platform_conf.conf_dir)
    # A new job whose desired state is running has no driver: the plan is to launch it.
    event = first_event(JobWatchTrigger(job="router", conf_dir=conf_dir, poll_interval=0.1, timeout=5))
    assert event["reason"].startswith("launch")

    supervisor = Supervisor.for_platform(platform_conf)
    supervisor.request("router", "suspend", "quiet please")
    supervisor.reconcile("router")
    event = first_event(JobWatchTrigger(job="router", conf_dir=conf_dir, poll_interval=0.1, timeout=0.5))
    assert event["reason"] is None

    # An operator request from a trigger form wakes it up.
    supervisor.request("router", "resume", "back to work")
    event = first_event(JobWatchTrigger(job="router", conf_dir=conf_dir, poll_interval=0.1, timeout=5))
    assert event["reason"].startswith("launch")
