"""Loopback TCP ports: every service and driver of the platform listens on 127.0.0.1 only."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

# What `describe()` keeps of a holder's command line: enough to recognise it, one line.
COMMAND_CHARS = 160


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


@dataclass(frozen=True)
class PortHolder:
    """The process listening on a port: its pid and command line, None and empty when this user
    may not see them (another user's process, seen from an unprivileged account)."""

    port: int
    pid: int | None
    command: Sequence[str] = ()

    def describe(self) -> str:
        """`pid N (command line)`, or what is known of a holder this user cannot see."""
        if self.pid is None:
            return "a process this user cannot see"
        # One line, whatever the arguments hold (`python -c` code has newlines).
        command = " ".join(" ".join(self.command).split())
        if len(command) > COMMAND_CHARS:
            command = command[: COMMAND_CHARS - 3] + "..."
        return f"pid {self.pid} ({command or 'no command line'})"


def port_holder(port: int) -> PortHolder | None:
    """Who holds `port` of 127.0.0.1 (a listener there or on every interface, else a socket bound
    to it), or None when it is free."""
    if port_is_free(port):
        return None
    on_port = [c for c in psutil.net_connections(kind="tcp") if c.laddr and c.laddr.port == port]
    # The listener is the holder; a socket merely bound to the port (or connected from it) is one
    # only when nothing listens.
    on_port.sort(key=lambda connection: connection.status != psutil.CONN_LISTEN)
    pid = next((connection.pid for connection in on_port), None)
    if pid is None:
        return PortHolder(port, None)
    try:
        return PortHolder(port, pid, tuple(psutil.Process(pid).cmdline()))
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return PortHolder(port, pid)
