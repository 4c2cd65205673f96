#!/usr/bin/env python3
"""What a keyed run puts on the wire, captured (docs/security.md, docs/wire-format.md).

    wire_sealed_test.py GRAPEVINE_BIN

The same 4-peer CHOCO run over tcp, without a key, MAC-only and encrypted, each in a network
namespace of its own (nothing else on its loopback) while a packet socket captures every TCP byte.
The bytes of each connection are put back in order and searched for envelopes (magic "GVME",
version 1) and for frames (magic "GVCF"):
  - off: envelopes with the sealed flag (bit5) clear, frames readable;
  - mac: every envelope sealed, frames still readable (MAC-only authenticates, hides nothing);
  - encrypt: every envelope sealed and not one frame readable anywhere in the capture, with the
    cipher the peers negotiated (AES-256-GCM where both have AES-NI; encrypt-chacha: peers told
    they have none, ChaCha20-Poly1305);
and every mode trains the same models.
Comparing the runs' models (security_test) cannot see a driver that never installs the edge keys;
this can. Needs root (a network namespace, a packet socket): exit 77 without it, or 1 when
GRAPEVINE_TEST_REQUIRE names root.
"""

import ctypes
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "test_util"))
from gv_skip import exit_missing  # noqa: E402

ENVELOPE_MAGIC = struct.pack("<I", 0x47564D45)
FRAME_MAGIC = struct.pack("<I", 0x46435647)
SEALED = 1 << 5
CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003
PACKET_HOST = 0

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def enter_private_network():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        exit_missing("wire_sealed_test.py", "root",
                     f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())} (needs root)")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


class Capture:
    """Every TCP segment received on lo (each appears twice there; the incoming copy is kept)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        # Room for a whole run: a segment the kernel drops for a full buffer is lost to the check.
        self.sock.setsockopt(socket.SOL_SOCKET, 33, 256 << 20)  # SO_RCVBUFFORCE (root)
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.segments = []  # (flow, seq, payload)
        self.stop = False
        self.thread = threading.Thread(target=self.run)
        self.thread.start()

    def run(self):
        while not self.stop:
            try:
                data, addr = self.sock.recvfrom(1 << 17)
            except socket.timeout:
                continue
            if addr[2] != PACKET_HOST or len(data) < 14 + 20:
                continue
            ip = data[14:]
            if ip[0] >> 4 != 4 or ip[9] != 6:  # IPv4, TCP
                continue
            ihl = (ip[0] & 0xF) * 4
            total = struct.unpack("!H", ip[2:4])[0]
            tcp = ip[ihl:total]
            sport, dport, seq = struct.unpack("!HHI", tcp[:8])
            off = (tcp[12] >> 4) * 4
            payload = tcp[off:]
            if payload:
                self.segments.append(((sport, dport), seq, bytes(payload)))

    def streams(self):
        self.stop = True
        self.thread.join()
        self.sock.close()
        flows = {}
        for flow, seq, payload in self.segments:
            flows.setdefault(flow, {})[seq] = payload  # a retransmission replaces its copy
        out = []
        for parts in flows.values():
            out.append(b"".join(parts[s] for s in sorted(parts)))
        return out


def envelopes(stream):
    """Flags of each envelope header in a byte stream (magic, then version 1)."""
    found = []
    at = stream.find(ENVELOPE_MAGIC)
    while at >= 0:
        if at + 8 <= len(stream) and struct.unpack("<H", stream[at + 4:at + 6])[0] == 1:
            found.append(struct.unpack("<H", stream[at + 6:at + 8])[0])
        at = stream.find(ENVELOPE_MAGIC, at + 1)
    return found


def run(grapevine, work, mode):
    out = os.path.join(work, mode)
    cmd = [grapevine, "launch", os.path.join(work, "config.yaml"), "--out", out, "--quiet"]
    if mode != "off":
        cmd += ["--set", "security.key_file=" + os.path.join(work, "run.key")]
    env = dict(os.environ)
    if mode.startswith("encrypt"):
        cmd += ["--set", "security.encrypt=true"]
    if mode == "encrypt-chacha":
        env["GRAPEVINE_SEAL_NO_AES"] = "1"  # peers without AES: ChaCha20-Poly1305 is chosen
    cap = Capture()
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    streams = cap.streams()
    check(result.returncode == 0, f"{mode}: launch exits 0 ({result.stdout[-400:]}{result.stderr[-400:]})")
    flags = [f for s in streams for f in envelopes(s)]
    frames = sum(s.count(FRAME_MAGIC) for s in streams)
    total = sum(len(s) for s in streams)
    print(f"{mode}: {total} TCP bytes in {len(streams)} streams, {len(flags)} envelopes "
          f"({sum(1 for f in flags if f & SEALED)} sealed), {frames} readable frames")
    # 4 peers on a ring, 40 rounds: each peer sends 2 envelopes a round.
    check(len(flags) >= 4 * 2 * 40, f"{mode}: every round's envelopes were captured ({len(flags)})")
    if mode == "off":
        check(all(f & SEALED == 0 for f in flags), "off: no envelope is sealed")
        check(frames >= 4 * 2 * 40, f"off: the frames are readable ({frames})")
    else:
        check(all(f & SEALED for f in flags), f"{mode}: every envelope is sealed")
    if mode == "mac":
        check(frames >= 4 * 2 * 40, f"mac: MAC-only leaves the frames readable ({frames})")
    if mode.startswith("encrypt"):
        check(frames == 0, f"{mode}: no frame is readable anywhere on the wire ({frames})")
        # The cipher the peers chose in their handshakes (each peer logs it): AES-256-GCM when
        # both ends have AES-NI (this machine, unless told otherwise), else ChaCha20-Poly1305.
        want = "chacha20-poly1305" if mode == "encrypt-chacha" or not aes_here() else "aes-256-gcm"
        for r in range(4):
            with open(os.path.join(out, f"peer-{r}.log")) as f:
                log = f.read()
            check(f"messages encrypted with {want} (2 edges)" in log,
                  f"{mode}: peer {r} encrypts with {want}")
    return [read_model(os.path.join(out, f"model-{r}.bin")) for r in range(4)]


def aes_here():
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return " aes " in flags and " pclmulqdq " in flags


def read_model(path):
    with open(path, "rb") as f:
        return f.read()[16:]


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    grapevine = sys.argv[1]
    if os.geteuid() != 0:
        exit_missing("wire_sealed_test.py", "root", "a network namespace and a packet socket need root")
    enter_private_network()
    with tempfile.TemporaryDirectory() as work:
        subprocess.run([grapevine, "keygen", "-o", os.path.join(work, "run.key")], check=True,
                       capture_output=True)
        with open(os.path.join(work, "config.yaml"), "w") as f:
            f.write("run: { seed: 3, rounds: 40 }\n"
                    "peers: { count: 4, host: 127.0.0.1, base_port: 21000 }\n"
                    "topology: { kind: ring }\n"
                    "transport: { backend: tcp }\n"
                    "workload: { name: consensus, dim: 4096 }\n"
                    "algorithm: { name: choco, consensus_step: 0.5, round_timeout: 120 }\n"
                    "compression: { method: int8 }\n")
        models = {mode: run(grapevine, work, mode)
                  for mode in ("off", "mac", "encrypt", "encrypt-chacha")}
        # A seal changes no value: every mode trains the same models, bit for bit.
        check(all(models[m] == models["off"] for m in models),
              "every mode trains the same models, bit for bit")
    if failures:
        print(f"{len(failures)} failed")
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
