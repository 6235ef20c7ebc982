"""A local Redis Cluster: redis-server processes on free loopback ports, joined
with ``redis-cli --cluster create``, stopped by pid. Used by `bench.scaling`
and by the tests (``tests/_cluster.py`` wraps it in a fixture).

``LocalCluster(workdir, masters=3, replicas=0)``; ``start()`` returns once every
node reports ``cluster_state:ok`` and agrees on the slot map; ``stop()`` kills
the processes. ``kill(port)`` kills one node (a failover test), ``url``
(``redis+cluster://`` with every node) names it for `stores.open_store`.

With ``tls=(cert, key)`` the nodes speak only TLS, to clients and to each other
(``tls-cluster``), with that certificate as their own and as the CA; ``url``
is then ``rediss+cluster://``, and clients need ``ssl_ca_certs=cert``.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

__all__ = ["LocalCluster", "cluster_tools", "free_ports"]


def cluster_tools() -> tuple[str, str] | None:
    """redis-server and redis-cli, or None when either is missing from PATH."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    return (server, cli) if server and cli else None


def _ephemeral_floor() -> int:
    try:
        text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
        return int(text.split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int, *, bus: bool = False, avoid: Iterable[int] = ()) -> list[int]:
    """`n` loopback ports nobody listens on, for servers a test or benchmark starts.

    They are picked below the kernel's ephemeral range: outgoing connections
    take their local ports from that range, so a port picked there (as
    ``bind(0)`` does) can be taken by some client's connection before the server
    binds it, and again while a test restarts that server. With ``bus`` the port
    + 10000 is free too (a cluster node listens there for its cluster bus).
    """
    rng = random.SystemRandom()
    top = _ephemeral_floor() - (10000 if bus else 0)
    taken = set(avoid)
    ports: list[int] = []
    for _ in range(10000):
        if len(ports) == n:
            return ports
        port = rng.randrange(10000, top) if top > 11000 else _any_port()
        if port in taken or (bus and port + 10000 > 65535):
            continue
        if _bindable(port) and (not bus or _bindable(port + 10000)):
            ports.append(port)
            taken.add(port)
    if len(ports) == n:
        return ports
    raise RuntimeError(f"found no {n} free loopback ports")


def _any_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalCluster:
    """`masters` masters with `replicas` replicas each, on 127.0.0.1."""

    def __init__(
        self,
        workdir: Path,
        *,
        masters: int = 3,
        replicas: int = 0,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        tools = cluster_tools()
        if tools is None:
            raise RuntimeError("redis-server and redis-cli must be on PATH")
        self._server, self._cli = tools
        self.workdir = workdir
        self.masters = masters
        self.replicas = replicas
        self.ports = free_ports(masters * (1 + replicas), bus=True)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.tls = tls

    @property
    def url(self) -> str:
        """``redis+cluster://`` (``rediss+cluster://`` with TLS) naming every node."""
        scheme = "rediss+cluster" if self.tls else "redis+cluster"
        return f"{scheme}://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def _cli_tls(self) -> list[str]:
        return [] if self.tls is None else ["--tls", "--cacert", str(self.tls[0])]

    def cli(self, port: int, *args: str, timeout: float = 30) -> str:
        """``redis-cli -p port args...``: its output (raises on failure)."""
        done = subprocess.run(
            [self._cli, "-h", "127.0.0.1", "-p", str(port), *self._cli_tls(), *args],
            capture_output=True, text=True, timeout=timeout, check=True,
        )  # fmt: skip
        return done.stdout

    def start_node(self, port: int) -> None:
        """Start (or restart) the node on `port`; raises if it does not answer."""
        folder = self.workdir / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        args = [
            self._server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", "1000", "--save", "", "--appendonly", "no",
            "--logfile", str(folder / "redis.log"),
        ]  # fmt: skip
        if self.tls is not None:
            cert, key = self.tls
            args[1:3] = ["--port", "0", "--tls-port", str(port)]
            args += [
                "--tls-cluster", "yes", "--tls-replication", "yes",
                "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                "--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no",
            ]  # fmt: skip
        self.procs[port] = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.cli(port, "PING", timeout=2).strip() == "PONG":
                    return
            except subprocess.SubprocessError:
                pass
            if time.monotonic() > deadline or self.procs[port].poll() is not None:
                self.procs.pop(port).kill()
                log = folder / "redis.log"
                tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
                raise RuntimeError(f"cluster node on port {port} did not start: {tail}")
            time.sleep(0.05)

    def start(self) -> None:
        for index in range(len(self.ports)):
            for attempt in range(5):
                try:
                    self.start_node(self.ports[index])
                    break
                except RuntimeError:
                    # Another process took the port between the pick and the
                    # bind (a parallel test's server): pick again.
                    if attempt == 4:
                        raise
                    self.ports[index] = free_ports(1, bus=True, avoid=self.ports)[0]
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        subprocess.run(
            [self._cli, *self._cli_tls(), "--cluster", "create", *nodes,
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        self.wait_ok()

    def live_ports(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def wait_ok(self, timeout: float = 30) -> None:
        """Until every live node says ``cluster_state:ok`` and all agree on the slots."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = [self.cli(p, "CLUSTER", "INFO", timeout=2) for p in self.live_ports()]
                maps = {self.cli(p, "CLUSTER", "SLOTS", timeout=2) for p in self.live_ports()}
                if all("cluster_state:ok" in s for s in states) and len(maps) == 1:
                    return
            except subprocess.SubprocessError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the local cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def master_ports(self) -> list[int]:
        """The ports of the live masters."""
        out = []
        for port in self.live_ports():
            role = self.cli(port, "ROLE", timeout=2).split("\n", 1)[0].strip()
            if role == "master":
                out.append(port)
        return out

    def kill(self, port: int) -> None:
        """SIGKILL one node."""
        proc = self.procs[port]
        proc.kill()
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            proc.wait(timeout=10)
        self.procs.clear()
