"""Loopback TCP ports: every service and driver of the platform listens on 127.0.0.1 only."""

from __future__ import annotations

import socket


def port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:`port` right now."""
    with socket.socket() as probe:
        # As the servers that will bind it do (Python's http.server, Go): connections of an earlier
        # listener still in TIME_WAIT do not make the port taken; a listener does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the kernel's choice)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
