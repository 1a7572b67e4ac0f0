"""Who may control the embedded switch (issue 18 (11)): its control port answers only its
owner (a token in a file only that user can read), and P4Runtime can run over TLS and
mutual TLS with simple_switch_grpc's options."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from finsy.proto import p4r, p4r_grpc

from ecntune.switch.ctl import token_path
from ecntune.targets import EMBEDDED, SwitchSpec, free_ports, start, stop


def raw_control(port: int, *lines: str) -> str:
    """What the control port answers to `lines`, sent without the client's help."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall("".join(f"{x}\n" for x in lines).encode())
        s.shutdown(socket.SHUT_WR)
        return s.makefile().read()


@pytest.fixture
def switch() -> Iterator[SwitchSpec]:
    spec = SwitchSpec.on_free_ports({})
    proc = start(EMBEDDED, spec)
    try:
        yield spec
    finally:
        stop(proc)
    assert not token_path(spec.thrift_port).exists()  # removed when the switch stops


def test_the_control_port_obeys_only_whoever_can_read_the_token(switch: SwitchSpec):
    path = token_path(switch.thrift_port)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert path.parent.stat().st_uid == os.getuid()
    token = path.read_text().strip()
    assert len(token) == 32
    queues = EMBEDDED.control(switch, "set_queue_depth 7 3", "set_queue_rate 500 3",
                              "show_queues")  # fmt: skip
    assert "port 3: depth 0/7 rate 500 pkt/s" in queues  # the owner's client: by itself
    # without the token, or with a wrong one, nothing is executed and the connection ends
    for first in ("set_queue_rate 1 3", f"auth {'0' * 32}", "auth", f"auth {token} extra"):
        reply = raw_control(switch.thrift_port, first, "set_queue_rate 1 3", "show_queues")
        assert reply.startswith("Error: not authorised"), (first, reply)
        assert reply.count("\n") == 2  # the refusal and its end marker, nothing else
    assert "port 3: depth 0/7 rate 500 pkt/s" in EMBEDDED.control(switch, "show_queues")
    reply = raw_control(switch.thrift_port, f"auth {token}", "set_queue_depth 9 3", "show_queues")
    assert "port 3: depth 0/9" in reply


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def certificates(d: Path) -> None:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=ecntune test CA", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, ext in (("server", ["-extfile", "san.ext"]), ("client", [])):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "1", *ext, cwd=d)  # fmt: skip


def capabilities(addr: str, creds: grpc.ChannelCredentials | None) -> str:
    """The server's P4Runtime API version over a plaintext (None) or TLS channel."""
    options = [("grpc.ssl_target_name_override", "localhost")]
    with (
        grpc.secure_channel(addr, creds, options=options) if creds else grpc.insecure_channel(addr)
    ) as channel:
        stub = p4r_grpc.P4RuntimeStub(channel)
        return stub.Capabilities(p4r.CapabilitiesRequest(), timeout=5).p4runtime_api_version


@pytest.mark.skipif(not any(Path(p, "openssl").exists() for p in ("/usr/bin", "/bin")),
                    reason="needs the openssl command to make test certificates")  # fmt: skip
def test_p4runtime_over_mutual_tls_refuses_clients_without_a_certificate(tmp_path: Path):
    certificates(tmp_path)
    tls = ["--grpc-server-ssl", "--grpc-server-cert", str(tmp_path / "server.pem"),
           "--grpc-server-key", str(tmp_path / "server.key")]  # fmt: skip
    mutual = [*tls, "--grpc-server-with-client-auth", "--grpc-server-cacert",
              str(tmp_path / "ca.pem")]  # fmt: skip
    ca = (tmp_path / "ca.pem").read_bytes()
    client = grpc.ssl_channel_credentials(ca, (tmp_path / "client.key").read_bytes(),
                                          (tmp_path / "client.pem").read_bytes())  # fmt: skip
    anonymous = grpc.ssl_channel_credentials(ca)
    spec = SwitchSpec.on_free_ports({}, extra_args=mutual)
    proc = start(EMBEDDED, spec)
    try:
        assert capabilities(spec.grpc_addr, client)  # a client with a certificate: served
        for creds in (anonymous, None):  # no certificate, or no TLS at all: refused
            with pytest.raises(grpc.RpcError) as e:
                capabilities(spec.grpc_addr, creds)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        stop(proc)
    spec = SwitchSpec.on_free_ports({}, extra_args=tls)
    proc = start(EMBEDDED, spec)
    try:
        assert capabilities(spec.grpc_addr, anonymous)  # TLS without client certificates
    finally:
        stop(proc)
    for bad, says in (
        (["--grpc-server-ssl"], "needs --grpc-server-cert"),
        ([*tls, "--grpc-server-with-client-auth"], "needs --grpc-server-cacert"),
        (["--grpc-server-ssl", "--grpc-server-cert", "/nowhere", "--grpc-server-key", "/nowhere"],
         "cannot read a TLS file"),
    ):  # fmt: skip
        grpc_port, control_port = free_ports(2)
        run = subprocess.run(
            [sys.executable, "-m", "ecntune.switch", "--no-p4", "--thrift-port", str(control_port),
             "--grpc-server-addr", f"127.0.0.1:{grpc_port}", *bad],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.returncode == 2, run.stderr
        assert says in run.stderr
