"""Loopback ports for servers a test configures now and starts later (a driver's metrics endpoint,
Airflow's api-server, a Slack stand-in that must be unreachable for a while).

A port the kernel picks (`ops.ports.free_loopback_port`) comes from its ephemeral range
(32768+), the same range every client socket and JVM on the machine draws from: with several
xdist workers running Spark, one of their sockets can take the port before the test's server binds
it. `free_test_port` hands out ports below that range instead, from a block of its own per xdist
worker, so two workers of one run never hand out the same port.
"""

from __future__ import annotations

import itertools
import os
import random
import re

from ops.ports import port_is_free

# 8 blocks of 1,000 ports from 10000: clear of the jobs' own metrics ports (94xx), Prometheus and
# friends (9xxx) and the SeaweedFS blocks tests start (`free_seaweed_ports`, 20000 and up).
FIRST_PORT = 10000
PORTS_PER_WORKER = 1000
WORKER_BLOCKS = 8


def _worker_block() -> range:
    """This process's block: by xdist worker number (`gw3` -> the fourth), the first one outside xdist."""
    worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    index = int(worker[1]) % WORKER_BLOCKS if worker else 0
    start = FIRST_PORT + index * PORTS_PER_WORKER
    return range(start, start + PORTS_PER_WORKER)


_block = _worker_block()
# Walk round the block from a random place: ports of earlier tests were released long before the
# walk comes back to them, and two test runs at once (other worktrees) rarely meet.
_start = random.choice(_block)
_ports = itertools.cycle([*range(_start, _block.stop), *range(_block.start, _start)])


def free_test_port() -> int:
    """A port on 127.0.0.1 nothing listens on now, from this worker's block below the ephemeral range."""
    for port in itertools.islice(_ports, PORTS_PER_WORKER):
        if port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {_block}: {PORTS_PER_WORKER} ports in use on 127.0.0.1")
