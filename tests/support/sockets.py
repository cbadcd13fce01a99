"""Listening sockets of given process trees, read from /proc (what `ss -ltnup` shows, per process).

A socket is "listening" when it is a TCP socket in LISTEN state or a bound UDP socket; each is
matched to the processes holding it through the socket inodes in `/proc/<pid>/fd`.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TCP_LISTEN = "0A"
# An unconnected UDP socket reports state 07 (TCP_CLOSE) in /proc/net/udp*.
UDP_UNCONNECTED = "07"
PROTOCOLS = {
    "tcp": (socket.AF_INET, TCP_LISTEN),
    "tcp6": (socket.AF_INET6, TCP_LISTEN),
    "udp": (socket.AF_INET, UDP_UNCONNECTED),
    "udp6": (socket.AF_INET6, UDP_UNCONNECTED),
}


@dataclass(frozen=True)
class ListeningSocket:
    pid: int
    command: str
    protocol: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        address = ipaddress.ip_address(self.address)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            return address.ipv4_mapped.is_loopback
        return address.is_loopback

    def line(self) -> str:
        return f"{self.protocol:<4} {self.address}:{self.port:<5}  pid {self.pid}  {self.command}"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ... (None if gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def process_trees(roots: Iterable[int]) -> set[int]:
    """The live processes among `roots` and all their descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and fields[0] not in ("Z", "X"):
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    pending = [pid for pid in roots if _stat_fields(pid) is not None]
    while pending:
        pid = pending.pop()
        if pid not in found:
            found.add(pid)
            pending.extend(children.get(pid, ()))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for descriptor in descriptors:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def _address(hex_address: str, family: int) -> str:
    raw = bytes.fromhex(hex_address)
    # The kernel prints each 32-bit word in host (little-endian) order.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, words)


def _bound_sockets() -> dict[int, tuple[str, str, int]]:
    """Listening TCP and bound UDP sockets of this network namespace: inode -> (protocol, address, port)."""
    bound = {}
    for protocol, (family, state) in PROTOCOLS.items():
        table = Path(f"/proc/net/{protocol}")
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            hex_address, hex_port = fields[1].split(":")
            if fields[3] == state and int(fields[9]) != 0:
                bound[int(fields[9])] = (protocol, _address(hex_address, family), int(hex_port, 16))
    return bound


def listening_sockets(pids: Iterable[int]) -> list[ListeningSocket]:
    """The listening sockets held by `pids`, sorted by process and port."""
    bound = _bound_sockets()
    found = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for inode in _socket_inodes(pid):
            if inode in bound:
                protocol, address, port = bound[inode]
                found.append(ListeningSocket(pid, command.strip()[:120], protocol, address, port))
    return sorted(set(found), key=lambda s: (s.pid, s.protocol, s.port))
