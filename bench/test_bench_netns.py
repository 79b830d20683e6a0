"""The slow-link machinery of ``secureboost_processes.py --links``: the delay relay, namespace cleanup, a tiny run."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


def _can_shape_links() -> bool:
    """Root, iproute2, and a kernel that lets this process make a namespace, a veth pair and a tbf qdisc
    (a container without CAP_NET_ADMIN, or without the veth or tbf modules, has root but cannot)."""
    if os.geteuid() != 0 or shutil.which("tc") is None or shutil.which("ip") is None:
        return False
    ns = f"vsbprobe{os.getpid() % 100000}"
    steps = (["ip", "netns", "add", ns], ["ip", "-n", ns, "link", "add", "pa", "type", "veth", "peer", "name", "pb"],
             ["tc", "-n", ns, "qdisc", "add", "dev", "pa", "root", "tbf", "rate", "10mbit", "burst", "65536",
              "latency", "100ms"])
    try:
        return all(subprocess.run(cmd, capture_output=True, check=False, timeout=10).returncode == 0 for cmd in steps)
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=10)


ROOTED = pytest.mark.skipif(not _can_shape_links(),
                            reason="needs root, iproute2 and a kernel that allows namespaces, veth and tbf here")


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _relay(port: int, delay_ms: int) -> Iterator[socket.socket]:
    """A delay relay on a free loopback port in front of ``port``, and a client connected to it."""
    listen = _port()
    relay = subprocess.Popen([sys.executable, str(HERE / "netns_link.py"), "relay", "--listen", f"127.0.0.1:{listen}",
                              "--to", f"127.0.0.1:{port}", "--delay-ms", str(delay_ms)])
    try:
        for _ in range(200):
            try:
                conn = socket.create_connection(("127.0.0.1", listen))
                break
            except ConnectionRefusedError:
                time.sleep(0.02)
        else:
            pytest.fail("the relay did not listen within 4 s")
        with conn:
            yield conn
    finally:
        relay.terminate()
        relay.wait(5)


def test_relay_delays_each_direction_and_keeps_the_bytes() -> None:
    echo = socket.create_server(("127.0.0.1", 0))
    port = echo.getsockname()[1]

    def serve() -> None:
        conn, _ = echo.accept()
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    try:
        with _relay(port, 60) as conn:
            payload = os.urandom(300_000)
            t0 = time.perf_counter()
            conn.sendall(payload)
            got = b""
            while len(got) < len(payload):
                got += conn.recv(1 << 16)
            rtt = time.perf_counter() - t0
    finally:
        echo.close()
    assert got == payload
    assert 0.12 <= rtt < 2.0  # 60 ms each way


def test_relay_holds_a_client_until_the_listener_is_up() -> None:
    port = _port()
    with _relay(port, 1) as conn:
        conn.sendall(b"early")  # nothing listens upstream yet
        time.sleep(0.4)
        with socket.create_server(("127.0.0.1", port)) as server:
            up, _ = server.accept()
            with up:
                assert up.recv(5) == b"early"


def test_link_specs() -> None:
    mod = _load("secureboost_processes")
    assert mod.parse_link("loopback") is None
    assert mod.parse_link("veth").rate_mbit is None
    link = mod.parse_link("10+50")
    assert (link.rate_mbit, link.delay_ms, link.label) == (10.0, 50.0, "10 Mbit/s, 50 ms one-way")


@ROOTED
def test_namespaces_are_removed_after_a_failure() -> None:
    netns_link = _load("netns_link")
    with pytest.raises(RuntimeError, match="boom"), \
            netns_link.namespaces(("active", "passive-0"), netns_link.Link(50.0, 5.0), tag="t") as spaces:
        names = set(spaces.ns.values())
        assert names <= set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
        raise RuntimeError("boom")
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert not names & set(left)
    assert not any((Path("/etc/netns") / n).exists() for n in names)


@ROOTED
def test_processes_bench_runs_tiny_over_a_shaped_link(capsys: pytest.CaptureFixture[str]) -> None:
    mod = _load("secureboost_processes")
    assert mod.main(["--rows", "300", "--trees", "1", "--depth", "2", "--max-bin", "8", "--key-bits", "768",
                     "--allow-insecure", "--schemes", "ou", "--modes", "online", "--links", "loopback,20+5"]) == 0
    out = capsys.readouterr().out
    assert '"slow_link_table"' in out and '"20 Mbit/s, 5 ms one-way"' in out and '"slowdown"' in out
    assert out.count('"identical_trees": true') == 2
