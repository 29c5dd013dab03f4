"""Real TCP and UDP traffic between test namespaces: what users send, not only ping.

The same file is the program that runs inside a namespace (`python3 testbed/traffic.py ...`
through nsenter, stdlib only, no package imports):
- `serve tcp|udp ADDR PORT`: answers each TCP connection, after the client has sent everything,
  with "<client address> <bytes received> <sha256 of them>"; each UDP datagram with
  "<client address> <its length>". Prints "ready" once listening.
- `send tcp ADDR PORT NBYTES`: sends NBYTES of random data, prints the answer and checks it.
- `send udp ADDR PORT COUNT`: sends COUNT datagrams of 1200 bytes, prints the number answered and
  the client address the server saw.
- `pace tcp ADDR PORT SECONDS`: one connection, 1400 bytes every 10 ms for SECONDS, checked as
  `send tcp` checks; `pace udp ADDR PORT SECONDS`: a numbered datagram every 5 ms, prints sent,
  answered and the longest gap of unanswered ones in ms.
Sent bytes are random, or with TRAFFIC_MARKER in the environment that string over and over (the
encryption tests look for it on the wire).
The test side (`Server`, `tcp_transfer`, `udp_exchange`) starts and reads these.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

HERE = os.path.abspath(__file__)
TIMEOUT = 5.0


# --- inside the namespace -------------------------------------------------------------------

def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _serve_tcp(addr: str, port: int) -> None:
    with socket.socket(_family(addr), socket.SOCK_STREAM) as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(16)
        print("ready", flush=True)
        while True:
            conn, peer = ls.accept()
            with conn:
                digest, total = hashlib.sha256(), 0
                while chunk := conn.recv(65536):
                    digest.update(chunk)
                    total += len(chunk)
                conn.sendall(f"{peer[0]} {total} {digest.hexdigest()}".encode())


def _serve_udp(addr: str, port: int) -> None:
    with socket.socket(_family(addr), socket.SOCK_DGRAM) as s:
        s.bind((addr, port))
        print("ready", flush=True)
        while True:
            data, peer = s.recvfrom(65536)
            s.sendto(f"{peer[0]} {len(data)} {data[:8].hex()}".encode(), peer)


def _payload(nbytes: int) -> bytes:
    marker = os.environ.get("TRAFFIC_MARKER", "").encode()
    if not marker:
        return os.urandom(nbytes)
    return (marker * (nbytes // len(marker) + 1))[:nbytes]


def _send_tcp(addr: str, port: int, nbytes: int) -> int:
    data = _payload(nbytes)
    with socket.create_connection((addr, port), timeout=TIMEOUT) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    peer, total, digest = answer.decode().split()
    print(peer, total, "ok" if digest == hashlib.sha256(data).hexdigest() else "corrupt")
    return 0


def _send_udp(addr: str, port: int, count: int) -> int:
    answered, seen = 0, "-"
    with socket.socket(_family(addr), socket.SOCK_DGRAM) as s:
        s.settimeout(1.0)
        for _ in range(count):
            s.sendto(_payload(1200), (addr, port))
            try:
                reply = s.recv(4096).decode().split()
            except TimeoutError:
                continue
            if reply[1] == "1200":
                answered, seen = answered + 1, reply[0]
    print(answered, seen)
    return 0


def _pace_tcp(addr: str, port: int, seconds: float) -> int:
    """One TCP connection carrying 1400 bytes every 10 ms for `seconds`: it must survive
    whatever happens meanwhile (a key rotation), and every byte must arrive."""
    digest, total = hashlib.sha256(), 0
    with socket.create_connection((addr, port), timeout=30) as s:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            chunk = _payload(1400)
            s.sendall(chunk)
            digest.update(chunk)
            total += len(chunk)
            time.sleep(0.01)
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    peer, got, theirs = answer.decode().split()
    print(peer, got if int(got) == total else f"{got}!={total}",
          "ok" if theirs == digest.hexdigest() else "corrupt")
    return 0


def _pace_udp(addr: str, port: int, seconds: float) -> int:
    """Numbered datagrams every 5 ms for `seconds`, echoed by the server: prints how many were
    sent, how many came back, and the longest run of lost ones in milliseconds."""
    answered: set[int] = set()
    sent = 0
    with socket.socket(_family(addr), socket.SOCK_DGRAM) as s:
        s.setblocking(False)
        end = time.monotonic() + seconds
        while True:
            now = time.monotonic()
            if now < end:
                s.sendto(sent.to_bytes(8, "big") + _payload(1192), (addr, port))
                sent += 1
            elif now > end + 1.0:
                break
            _drain(s, answered)
            time.sleep(0.005)
    gap = longest = 0
    for seq in range(sent):
        gap = 0 if seq in answered else gap + 1
        longest = max(longest, gap)
    print(sent, len(answered), longest * 5)
    return 0


def _drain(s: socket.socket, answered: set[int]) -> None:
    while True:
        try:
            reply = s.recv(4096).decode().split()
        except BlockingIOError:
            return
        if len(reply) == 3:
            answered.add(int(reply[2], 16))


def main(argv: list[str]) -> int:
    verb, proto, addr, port = argv[0], argv[1], argv[2], int(argv[3])
    if verb == "serve":
        (_serve_tcp if proto == "tcp" else _serve_udp)(addr, port)
        return 0
    if verb == "pace":
        return (_pace_tcp if proto == "tcp" else _pace_udp)(addr, port, float(argv[4]))
    return (_send_tcp if proto == "tcp" else _send_udp)(addr, port, int(argv[4]))


# --- the test side --------------------------------------------------------------------------

def _in(netns: str, *args: str) -> list[str]:
    return ["nsenter", f"--net={netns}", sys.executable, HERE, *args]


def _env(marker: str) -> dict[str, str] | None:
    return {**os.environ, "TRAFFIC_MARKER": marker} if marker else None


class Server:
    """A TCP or UDP echo server in `netns`, listening once constructed; stop() ends it."""

    def __init__(self, netns: str, proto: str, addr: str, port: int) -> None:
        self.proc = subprocess.Popen(_in(netns, "serve", proto, addr, str(port)),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.stop()
            raise RuntimeError(f"server in {netns} did not start: {self.proc.stderr.read()}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Outcome:
    ok: bool  # everything arrived intact (TCP) / every datagram was answered (UDP)
    source: str  # the client address the server saw ("" when nothing arrived)
    detail: str


def tcp_transfer(netns: str, addr: str, port: int, nbytes: int = 1 << 20,
                 marker: str = "") -> Outcome:
    """Sends `nbytes` over one TCP connection from `netns` (`marker` repeated, else random)."""
    r = subprocess.run(_in(netns, "send", "tcp", addr, str(port), str(nbytes)),
                       capture_output=True, text=True, timeout=60, env=_env(marker))
    parts = r.stdout.split()
    if r.returncode != 0 or len(parts) != 3:
        return Outcome(False, "", (r.stderr.strip().splitlines() or ["no answer"])[-1])
    return Outcome(parts[1] == str(nbytes) and parts[2] == "ok", parts[0], r.stdout.strip())


def udp_exchange(netns: str, addr: str, port: int, count: int = 20,
                 marker: str = "") -> Outcome:
    """Sends `count` datagrams from `netns`; ok when every one was answered."""
    r = subprocess.run(_in(netns, "send", "udp", addr, str(port), str(count)),
                       capture_output=True, text=True, timeout=60, env=_env(marker))
    parts = r.stdout.split()
    if r.returncode != 0 or len(parts) != 2:
        return Outcome(False, "", r.stderr.strip())
    return Outcome(parts[0] == str(count), "" if parts[1] == "-" else parts[1], r.stdout.strip())


class Paced:
    """`pace tcp|udp` from `netns` in the background; `result()` waits for its line."""

    def __init__(self, netns: str, proto: str, addr: str, port: int, seconds: float,
                 marker: str = "") -> None:
        self.proc = subprocess.Popen(_in(netns, "pace", proto, addr, str(port), str(seconds)),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=_env(marker))

    def result(self, timeout: float = 60) -> list[str]:
        out, err = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise AssertionError(f"paced sender failed: {err.strip()[-500:]}")
        return out.split()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
