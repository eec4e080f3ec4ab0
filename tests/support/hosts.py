"""A several-host test bed on one machine: each "host" a Linux network namespace with its own address on one bridge
of the run's own, joined by a veth pair; the test process (the root namespace) holds the bridge's first address and
reaches every host, as an operator's shell would.

Names are unique per run (``ss<tag>-<host>`` namespaces, ``ssb<tag>`` bridge, ``ss<tag>h<i>`` veth ends; the tag
carries this process's pid), and so is the subnet: a 10.x.y.0/24 that no address or route of the machine uses,
chosen under a lock file that parallel runs share. ``close`` (the fixture's teardown, whatever happened) stops
every process left in the run's namespaces, by pid, then deletes the namespaces (their veth ends go with them) and
the bridge.

A host is **cut** by setting its bridge-side veth end down: the host's processes keep running, its link has no
carrier, and everything it sends or is sent is dropped silently (no RST, no FIN, no ICMP), as on a pulled cable.
One **path** is cut (``Host.cut_path``: this host to one other, the rest of its links untouched) by pinning the
other host's address, in this host's neighbour table, to a link-layer address no host has: what this host sends
there is flooded by the bridge and dropped by every host, silently, and no other path changes (no ``iptables``
needed). A whole host is **replaced** (``Bed.replace``): every process in it killed (SIGKILL), its namespace and
link deleted, and a new one made with the same name and address, as a machine that died and was rebuilt.
The kernel here has no ``netem``; slow, lossy and stalled links go through ``tests.support.fault_proxy``.

Needs root and ``ip`` (iproute2); ``unavailable`` says why a machine cannot host it (tests skip with that reason).
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

LOCK = Path("/tmp/smartsensor-hosts.lock")  # shared by parallel runs while they pick a subnet
# A locally administered unicast address no host of a bed has: frames sent to it are flooded by the bridge and dropped
# by every host (``Host.cut_path``).
NOWHERE_MAC = "02:00:5e:57:57:57"


def unavailable() -> str | None:
    """Why this machine cannot run the bed (not root, no ``ip``, no network namespaces), or None."""
    if os.geteuid() != 0:
        return "the several-host bed needs root (network namespaces, veth pairs, a bridge)"
    if shutil.which("ip") is None:
        return "the several-host bed needs iproute2's `ip`"
    probe = f"ssprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``ip *args`` (inside namespace ``ns`` if given); raises with its stderr unless it exits 0 (``check``)."""
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network the machine has an address or a route in."""
    used = []
    for line in ip("-4", "-o", "addr").stdout.splitlines() + ip("-4", "route").stdout.splitlines():
        for word in line.split():
            if "/" in word or word[:1].isdigit():
                try:
                    used.append(ipaddress.ip_network(word, strict=False))
                except ValueError:
                    continue
    return [n for n in used if isinstance(n, ipaddress.IPv4Network)]


@dataclass
class Host:
    """One host of the bed: its namespace, address and the bridge-side end of its link."""

    name: str
    ns: str
    address: str
    link: str  # the veth end on the bridge (root namespace)
    index: int = 0  # its address's last byte: the same for a host replaced under the same name
    cut_at: float | None = field(default=None)
    paths_cut: set[str] = field(default_factory=set)  # the addresses ``cut_path`` cut off

    def command(self, *argv: str) -> list[str]:
        """``argv`` run inside this host (``ip netns exec`` execs it: the pid is the program's own)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def python(self) -> list[str]:
        """This Python, inside this host (a `program` for ``CliProcess``: add ``-m smartsensor.cli``)."""
        return self.command(sys.executable)

    def run(self, *argv: str, timeout: float = 120, user: str | None = None) -> subprocess.CompletedProcess[str]:
        """``argv`` run to its end inside this host (as ``user`` if given); raises with its output unless it exits 0."""
        cmd = self.command(*(["runuser", "-u", user, "--"] if user else []), *argv)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} on {self.name} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done

    def exists(self) -> bool:
        """Whether this host's namespace is there (``Bed.kill`` deletes it)."""
        return self.ns in ip("netns", "list", check=False).stdout.split()

    def pids(self) -> list[int]:
        """Every process running inside this host."""
        out = ip("netns", "pids", self.ns, check=False).stdout
        return [int(p) for p in out.split()]

    def cut(self) -> None:
        """Cut the host off from every other: its link loses carrier; its processes keep running."""
        ip("link", "set", self.link, "down")
        self.cut_at = time.monotonic()

    def restore(self) -> None:
        """Put the cut link back, and every path cut (``cut_path``)."""
        ip("link", "set", self.link, "up")
        self.cut_at = None
        for address in list(self.paths_cut):
            self._restore_path(address)

    def cut_path(self, other: Host) -> None:
        """Cut this host off from ``other`` only (both ways: nothing this host sends there arrives), silently: no
        RST, no FIN, no ICMP, a connection open between them hangs and a new one never completes its handshake.
        ``other`` is pinned in this host's neighbour table to a link-layer address that no host has."""
        ip("neigh", "replace", other.address, "lladdr", NOWHERE_MAC, "dev", "eth0", "nud", "permanent", ns=self.ns)
        self.paths_cut.add(other.address)

    def restore_path(self, other: Host) -> None:
        """Undo ``cut_path(other)``: the neighbour entry goes, and the next packet resolves ``other`` again."""
        self._restore_path(other.address)

    def _restore_path(self, address: str) -> None:
        ip("neigh", "del", address, "dev", "eth0", ns=self.ns, check=False)
        self.paths_cut.discard(address)


class Bed:
    """The run's bridge, subnet and hosts. ``add`` a host; ``close`` removes everything (idempotent)."""

    def __init__(self) -> None:
        self.tag = f"{os.getpid() % 100000:05d}{uuid.uuid4().hex[:2]}"[:7]
        self.bridge = f"ssb{self.tag}"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._bridge_made = False
        with open(LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two runs never pick the same subnet
            try:
                self.network = self._free_network()
                ip("link", "add", self.bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0")
                self._bridge_made = True
                self.gateway = str(self.network.network_address + 1)
                ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
                ip("link", "set", self.bridge, "up")
            except BaseException:
                self.close()
                raise
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @staticmethod
    def _free_network() -> ipaddress.IPv4Network:
        used = _used_networks()
        rng = random.Random()
        for _ in range(200):
            net = ipaddress.IPv4Network(f"10.{rng.randrange(100, 250)}.{rng.randrange(0, 256)}.0/24")
            if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
                return net
        raise RuntimeError("no free 10.x.y.0/24 for the several-host bed")

    def add(self, name: str) -> Host:
        """A new host ``name`` (a few letters): its namespace, loopback up, ``eth0`` on the bridge at the next
        address of the subnet."""
        index = len(self.hosts) + 2  # .1 is the bridge (the test process)
        return self._make(name, index)

    def _make(self, name: str, index: int) -> Host:
        ns, link, peer = f"ss{self.tag}-{name}", f"ss{self.tag}h{index}", f"ss{self.tag}p{index}"
        ip("netns", "add", ns)
        if ns not in self._namespaces:
            self._namespaces.append(ns)
        ip("link", "add", link, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", ns)
        ip("link", "set", link, "master", self.bridge)
        ip("link", "set", link, "up")
        address = str(self.network.network_address + index)
        ip("link", "set", "lo", "up", ns=ns)
        ip("link", "set", peer, "name", "eth0", ns=ns)
        ip("addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
        ip("link", "set", "eth0", "up", ns=ns)
        host = Host(name, ns, address, link, index)
        self.hosts[name] = host
        return host

    def kill(self, name: str) -> list[int]:
        """Kill the host ``name`` whole: every process in it SIGKILLed at once (SIGCONT first: a stopped one dies
        too), waited for until gone, then its namespace and link deleted. Returns the pids killed."""
        host = self.hosts[name]
        pids = _kill_all(host.ns)
        ip("netns", "del", host.ns, check=False)
        ip("link", "del", host.link, check=False)  # gone with its peer already, normally
        return pids

    def replace(self, name: str) -> Host:
        """A new host in place of ``name`` (which ``kill`` removed, or is killed now): the same name and address,
        a new namespace and link, no process in it."""
        old = self.hosts[name]
        if old.exists():
            self.kill(name)
        return self._make(name, old.index)

    def close(self) -> None:
        """Stop every process left in the run's hosts (by pid: SIGCONT, SIGKILL), delete the namespaces (their
        veth ends go with them) and the bridge. Safe to call twice, and after a failed start."""
        for ns in self._namespaces:
            _kill_all(ns)
        for ns in self._namespaces:
            ip("netns", "del", ns, check=False)
        self._namespaces.clear()
        for host in self.hosts.values():
            ip("link", "del", host.link, check=False)  # gone with its peer already, normally
        if self._bridge_made:
            ip("link", "del", self.bridge, check=False)
            self._bridge_made = False


def _kill_all(ns: str) -> list[int]:
    """SIGCONT and SIGKILL every process in namespace ``ns``, by pid; wait (10 s at most) until they are gone."""
    pids = [int(p) for p in ip("netns", "pids", ns, check=False).stdout.split()]
    for pid in pids:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    left, deadline = list(pids), time.monotonic() + 10
    while left and time.monotonic() < deadline:
        left = [p for p in left if Path(f"/proc/{p}").exists() and not _zombie(p)]
        time.sleep(0.05)
    return pids


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def leftovers(tag: str) -> Sequence[str]:
    """Namespaces and links of the run ``tag`` still present (a test's check that ``close`` removed them)."""
    names = ip("netns", "list", check=False).stdout.split()
    links = ip("-o", "link", check=False).stdout
    return (
        [n for n in names if n.startswith(f"ss{tag}")]
        + [w.rstrip(":").split("@")[0] for w in links.split() if w.rstrip(":").split("@")[0].startswith(f"ss{tag}")]
        + ([f"ssb{tag}"] if f"ssb{tag}" in links else [])
    )
