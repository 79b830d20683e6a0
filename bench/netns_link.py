"""Two parties, each in its own network namespace, joined by a veth pair rate-limited by ``tc tbf``.

Used by ``secureboost_processes.py --links``: the shape of two machines on a slow link, made for the
run and removed after it. Needs root, ``ip`` and ``tc`` (iproute2). The kernel's ``netem`` (added
delay) is optional and often absent, so delay is added in user space instead: with ``delay_ms`` a
relay in the dialing party's namespace holds every chunk of bytes, each way, for ``delay_ms``
before passing it on (:func:`relay`; one-way delay, so the round trip gains ``2 * delay_ms``),
and the dialing party reaches the listening party through it (the listening party's address is a
host name that each namespace's ``/etc/netns/<ns>/hosts`` resolves: to the peer across the veth,
or to the relay). ``tbf`` shapes each end's egress, so each direction gets the rate.

Cleanup: :func:`namespaces` deletes its namespaces (which takes the veth pair with them), stops its
relay and removes its ``/etc/netns`` entries in a ``finally``, so on success, on an exception and on
SIGTERM/SIGINT (``secureboost_processes.py`` turns them into ``SystemExit``). Names carry the
process id, so concurrent runs do not collide.

    python bench/netns_link.py relay --listen 127.0.0.1:50051 --to 10.231.0.1:50051 --delay-ms 50
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PORT = 50051
HOST = "sb-listener"  # the listening party's address in the party configuration: resolved per namespace
_RECEIVER = ("import socket,sys;s=socket.create_server((sys.argv[1],int(sys.argv[2])));c,_=s.accept();"
             "n=0\nwhile (b:=c.recv(1<<20)): n+=len(b)\nc.sendall(b'ok');print(n)")
_SENDER = ("import socket,sys,time;n=int(sys.argv[3]);s=socket.create_connection((sys.argv[1],int(sys.argv[2])));"
           "t=time.perf_counter();s.sendall(bytes(n));s.shutdown(socket.SHUT_WR);s.recv(2);"
           "print(time.perf_counter()-t)")


@dataclass(frozen=True)
class Link:
    """What a run's link is: ``rate_mbit`` None for an unshaped veth, ``delay_ms`` one-way, added by the relay."""

    rate_mbit: float | None
    delay_ms: float = 0.0

    @property
    def label(self) -> str:
        rate = "veth, no limit" if self.rate_mbit is None else f"{self.rate_mbit:g} Mbit/s"
        return rate + (f", {self.delay_ms:g} ms one-way" if self.delay_ms else "")


@dataclass(frozen=True)
class Namespaces:
    """The namespace and veth address of each party; ``listener`` is the party that listens."""

    ns: dict[str, str]
    ip: dict[str, str]
    listener: str

    def prefix(self, name: str) -> list[str]:
        """The command prefix that runs a process inside ``name``'s namespace."""
        return ["ip", "netns", "exec", self.ns[name]]


def _run(*cmd: str) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip() or res.returncode}")


def _burst_bytes(rate_mbit: float) -> int:
    """tbf's bucket: a 4 ms burst at the rate (the kernel needs at least rate/HZ), at least 64 KiB (a GSO segment)."""
    return max(int(rate_mbit * 1e6 / 8 * 0.004), 65536)


@contextlib.contextmanager
def namespaces(names: tuple[str, str], link: Link, tag: str = "") -> Iterator[Namespaces]:
    """Namespaces for ``names`` (the first listens), a veth pair between them shaped as ``link``; removed on exit."""
    if os.geteuid() != 0:
        raise SystemExit("--links needs root (ip netns, tc)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise SystemExit(f"--links needs {tool} (iproute2)")
    base = f"vsb{os.getpid() % 100000}{tag}"[:12]
    ns = {n: f"{base}{'ab'[i]}" for i, n in enumerate(names)}
    ip = {n: f"10.231.0.{i + 1}" for i, n in enumerate(names)}
    created: list[str] = []
    relay_proc: subprocess.Popen[bytes] | None = None
    try:
        for n in names:
            _run("ip", "netns", "add", ns[n])
            created.append(ns[n])
            etc = Path("/etc/netns") / ns[n]
            etc.mkdir(parents=True, exist_ok=True)
        a, b = names
        _run("ip", "link", "add", ns[a], "netns", ns[a], "type", "veth", "peer", "name", ns[b], "netns", ns[b])
        for n in names:
            _run("ip", "-n", ns[n], "addr", "add", f"{ip[n]}/30", "dev", ns[n])
            _run("ip", "-n", ns[n], "link", "set", "lo", "up")
            _run("ip", "-n", ns[n], "link", "set", ns[n], "up")
            if link.rate_mbit is not None:
                _run("tc", "-n", ns[n], "qdisc", "add", "dev", ns[n], "root", "tbf", "rate", f"{link.rate_mbit}mbit",
                     "burst", str(_burst_bytes(link.rate_mbit)), "latency", "100ms")
        # the listener's name: itself in its namespace; across the veth, or the relay, in the dialer's
        (Path("/etc/netns") / ns[a] / "hosts").write_text(f"127.0.0.1 localhost\n{ip[a]} {HOST}\n")
        (Path("/etc/netns") / ns[b] / "hosts").write_text(
            f"127.0.0.1 localhost\n{'127.0.0.1' if link.delay_ms else ip[a]} {HOST}\n")
        if link.delay_ms:
            relay_proc = subprocess.Popen(
                ["ip", "netns", "exec", ns[b], sys.executable, __file__, "relay", "--listen", f"127.0.0.1:{PORT}",
                 "--to", f"{ip[a]}:{PORT}", "--delay-ms", str(link.delay_ms)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _wait_listening(ns[b], PORT)
        yield Namespaces(ns, ip, a)
    finally:
        if relay_proc is not None:
            relay_proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                relay_proc.wait(5)
            if relay_proc.poll() is None:
                relay_proc.kill()
        for name in created:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            shutil.rmtree(Path("/etc/netns") / name, ignore_errors=True)


def _wait_listening(ns: str, port: int, timeout: float = 10.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        out = subprocess.run(["ip", "netns", "exec", ns, "ss", "-Hltn", f"sport = :{port}"],
                             capture_output=True, text=True, check=False).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise RuntimeError(f"the delay relay in {ns} did not listen on port {port}")


def measure_mbit(spaces: Namespaces, names: tuple[str, str], nbytes: int) -> float:
    """Measured throughput, in Mbit/s, of one TCP stream of ``nbytes`` from the dialer to the listener."""
    a, b = names
    recv = subprocess.Popen([*spaces.prefix(a), sys.executable, "-c", _RECEIVER, spaces.ip[a], str(PORT + 1)],
                            stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(100):
            try:
                out = subprocess.run([*spaces.prefix(b), sys.executable, "-c", _SENDER, spaces.ip[a], str(PORT + 1),
                                      str(nbytes)], capture_output=True, text=True, check=True, timeout=120).stdout
                break
            except subprocess.CalledProcessError:  # the receiver is not listening yet
                time.sleep(0.05)
        else:
            raise RuntimeError("throughput probe could not connect")
        return nbytes * 8 / float(out) / 1e6
    finally:
        recv.kill()
        recv.wait()


# --------------------------------------------------------------------------- the delay relay


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Pass every chunk on ``delay`` seconds after it arrived (order kept; reading never waits on the delay)."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def forward() -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            if not data:
                with contextlib.suppress(OSError):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    task = asyncio.create_task(forward())
    loop = asyncio.get_running_loop()
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                break
        await task
    except (ConnectionError, asyncio.CancelledError):
        task.cancel()
        writer.close()


async def _relay(listen: tuple[str, int], to: tuple[str, int], delay: float, patience: float = 120.0) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        # the listening party may not listen yet: hold the client (its bytes wait in the socket) and retry,
        # rather than close it, which its TLS would take for a rejected certificate
        loop = asyncio.get_running_loop()
        give_up = loop.time() + patience
        while True:
            try:
                ur, uw = await asyncio.open_connection(*to)
                break
            except OSError:
                if loop.time() > give_up:
                    w.close()
                    return
                await asyncio.sleep(0.1)
        await asyncio.gather(_pump(r, uw, delay), _pump(ur, w, delay), return_exceptions=True)
        for x in (w, uw):
            x.close()

    server = await asyncio.start_server(handle, *listen)
    async with server:
        await server.serve_forever()


def relay(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="a TCP relay that delays each direction by --delay-ms")
    p.add_argument("--listen", required=True)
    p.add_argument("--to", required=True)
    p.add_argument("--delay-ms", type=float, required=True)
    args = p.parse_args(argv)
    lh, lp = args.listen.rsplit(":", 1)
    th, tp = args.to.rsplit(":", 1)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_relay((lh, int(lp)), (th, int(tp)), args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["relay"]:
        raise SystemExit("usage: netns_link.py relay --listen HOST:PORT --to HOST:PORT --delay-ms MS")
    raise SystemExit(relay(sys.argv[2:]))
