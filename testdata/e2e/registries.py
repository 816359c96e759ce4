#!/usr/bin/env python3
"""Package registries on loopback, under the real registries' own names, for the package-manager
end-to-end test (scripts/e2e/package_managers.sh). One HTTPS server answers for every name below by
its Host header; the test maps the names to 127.0.0.1 in a network and mount namespace of its own,
so the package managers run with their default registries and nothing can reach the internet.

    registries.py --out DIR [--listen 127.0.0.1:443]
    registries.py --out DIR --plain-npm [--listen 127.0.0.1:0]

--plain-npm serves only the npm registry, over plain HTTP, under whatever Host it is asked by
(e.g. 127.0.0.1:PORT, which a project's .npmrc names): the agent tests (scripts/e2e/agent_*.sh)
have an agent install a dependency from it inside `fenzi run`.

Writes DIR/test-ca.pem (the CA that signed the server's certificate; its key is never written) and
DIR/requests.log (one `HOST METHOD PATH STATUS` line per request), prints `listening on HOST:PORT`
once it serves.

What it serves, one package per ecosystem (each depends on nothing):
  npm       registry.npmjs.org, registry.yarnpkg.com: the scoped package @fenzi-test/hello 1.0.0
            (packument at /@fenzi-test%2fhello, tarball under /@fenzi-test/hello/-/)
  PyPI      pypi.org/simple/fenzi-test-hello/ (PEP 503 HTML) linking a wheel on
            files.pythonhosted.org
  crates.io index.crates.io (sparse index: config.json, /fe/nz/fenzi-test-hello), the .crate on
            static.crates.io
  Go        proxy.golang.org: module fenzi.test/hello v0.1.0 (list, .info, .mod, .zip)
Anything else is a 404 (and logged).
"""

import argparse
import base64
import datetime
import hashlib
import http.server
import io
import json
import os
import socketserver
import ssl
import sys
import tarfile
import threading
import urllib.parse
import zipfile

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

NAMES = [
    "registry.npmjs.org",
    "registry.yarnpkg.com",
    "pypi.org",
    "files.pythonhosted.org",
    "index.crates.io",
    "static.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
]

NPM_NAME, NPM_VERSION = "@fenzi-test/hello", "1.0.0"
PY_NAME, PY_VERSION = "fenzi-test-hello", "1.0.0"
CRATE, CRATE_VERSION = "fenzi-test-hello", "0.1.0"
GO_MODULE, GO_VERSION = "fenzi.test/hello", "v0.1.0"
TIME = (2026, 1, 1, 0, 0, 0)


def certs(out):
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fenzi registries test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                          key_agreement=False, encipher_only=False, decipher_only=False),
            critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, NAMES[0])]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in NAMES]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    with open(os.path.join(out, "test-ca.pem"), "wb") as f:
        f.write(ca.public_bytes(pem))
    chain, keyfile = os.path.join(out, "server.pem"), os.path.join(out, "server-key.pem")
    with open(chain, "wb") as f:
        f.write(leaf.public_bytes(pem) + ca.public_bytes(pem))
    with open(keyfile, "wb") as f:
        f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return chain, keyfile


def targz(prefix, files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{prefix}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1767225600
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def zipped(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, TIME), data)
    return buf.getvalue()


def npm_package():
    tgz = targz("package", {
        "package.json": json.dumps({"name": NPM_NAME, "version": NPM_VERSION, "main": "index.js"}).encode(),
        "index.js": b"module.exports = () => 'hello from the loopback npm registry';\n",
    })
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()

    def packument(base):
        tarball = f"{base}/{NPM_NAME}/-/hello-{NPM_VERSION}.tgz"
        return json.dumps({
            "name": NPM_NAME, "dist-tags": {"latest": NPM_VERSION},
            "versions": {NPM_VERSION: {
                "name": NPM_NAME, "version": NPM_VERSION, "main": "index.js",
                "dist": {"tarball": tarball, "shasum": hashlib.sha1(tgz).hexdigest(),
                         "integrity": integrity},
            }},
            "time": {"created": "2026-01-01T00:00:00.000Z", NPM_VERSION: "2026-01-01T00:00:00.000Z"},
        }).encode()
    return packument, tgz


def wheel():
    dist = f"fenzi_test_hello-{PY_VERSION}.dist-info"
    files = {
        "fenzi_test_hello/__init__.py": b"def hello():\n    return 'hello from the loopback PyPI'\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PY_NAME}\nVersion: {PY_VERSION}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: fenzi-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/top_level.txt": b"fenzi_test_hello\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += f"{dist}/RECORD,,\n"
    files[f"{dist}/RECORD"] = record.encode()
    return f"fenzi_test_hello-{PY_VERSION}-py3-none-any.whl", zipped(files)


def crate():
    data = targz(f"{CRATE}-{CRATE_VERSION}", {
        "Cargo.toml": (f'[package]\nname = "{CRATE}"\nversion = "{CRATE_VERSION}"\n'
                       'edition = "2021"\n\n[lib]\npath = "src/lib.rs"\n').encode(),
        "src/lib.rs": b'pub fn hello() -> &\'static str { "hello from the loopback crates.io" }\n',
    })
    line = json.dumps({"name": CRATE, "vers": CRATE_VERSION, "deps": [],
                       "cksum": hashlib.sha256(data).hexdigest(), "features": {}, "yanked": False})
    return data, (line + "\n").encode()


def go_module():
    prefix = f"{GO_MODULE}@{GO_VERSION}"
    mod = f"module {GO_MODULE}\n\ngo 1.19\n".encode()
    data = zipped({
        f"{prefix}/go.mod": mod,
        f"{prefix}/hello.go": b'package hello\n\nfunc Hello() string { return "hello from the loopback Go proxy" }\n',
    })
    return mod, data


def build():
    packument, tgz = npm_package()
    whl_name, whl = wheel()
    crate_data, index_line = crate()
    go_mod, go_zip = go_module()
    whl_path = f"/packages/fe/nz/{whl_name}"
    simple = (f'<!DOCTYPE html><html><body><a href="https://files.pythonhosted.org{whl_path}'
              f'#sha256={hashlib.sha256(whl).hexdigest()}">{whl_name}</a></body></html>\n').encode()
    routes = {}
    for host in ("registry.npmjs.org", "registry.yarnpkg.com"):
        doc = packument(f"https://{host}")
        for path in ("/@fenzi-test%2fhello", "/@fenzi-test%2Fhello", "/@fenzi-test/hello"):
            routes[(host, path)] = ("application/json", doc)
        routes[(host, f"/{NPM_NAME}/-/hello-{NPM_VERSION}.tgz")] = ("application/octet-stream", tgz)
    for path in (f"/simple/{PY_NAME}/", f"/simple/{PY_NAME}"):
        routes[("pypi.org", path)] = ("text/html", simple)
    routes[("files.pythonhosted.org", whl_path)] = ("application/octet-stream", whl)
    routes[("index.crates.io", "/config.json")] = (
        "application/json", b'{"dl":"https://static.crates.io/crates","api":"https://crates.io"}')
    routes[("index.crates.io", "/fe/nz/fenzi-test-hello")] = ("text/plain", index_line)
    routes[("static.crates.io", f"/crates/{CRATE}/{CRATE_VERSION}/download")] = (
        "application/octet-stream", crate_data)
    routes[("static.crates.io", f"/crates/{CRATE}/{CRATE}-{CRATE_VERSION}.crate")] = (
        "application/octet-stream", crate_data)
    g = f"/{GO_MODULE}/@v"
    routes[("proxy.golang.org", f"{g}/list")] = ("text/plain", f"{GO_VERSION}\n".encode())
    routes[("proxy.golang.org", f"{g}/{GO_VERSION}.info")] = (
        "application/json", json.dumps({"Version": GO_VERSION, "Time": "2026-01-01T00:00:00Z"}).encode())
    routes[("proxy.golang.org", f"{g}/{GO_VERSION}.mod")] = ("text/plain", go_mod)
    routes[("proxy.golang.org", f"{g}/{GO_VERSION}.zip")] = ("application/zip", go_zip)
    return routes


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--listen")
    ap.add_argument("--plain-npm", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.plain_npm:
        packument, tgz = npm_package()
        routes = {}
    else:
        chain, keyfile = certs(args.out)
        routes = build()
    log = open(os.path.join(args.out, "requests.log"), "a", buffering=1)
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, body):
            host_port = (self.headers.get("Host") or "").lower()
            host = host_port.split(":")[0]
            path = urllib.parse.urlsplit(self.path).path
            if args.plain_npm:
                host = host_port
                if urllib.parse.unquote(path).lower() == f"/{NPM_NAME}":
                    found = ("application/json", packument(f"http://{host_port}"))
                elif path == f"/{NPM_NAME}/-/hello-{NPM_VERSION}.tgz":
                    found = ("application/octet-stream", tgz)
                else:
                    found = None
            else:
                found = routes.get((host, path))
            status = 200 if found else 404
            with lock:
                log.write(f"{host} {self.command} {path} {status}\n")
            ctype, data = found or ("text/plain", b"not found\n")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            if found:
                # As the real registries do; pip caches only what the server says it may.
                self.send_header("Cache-Control", "public, max-age=600")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_GET(self):
            self.answer(True)

        def do_HEAD(self):
            self.answer(False)

        def do_POST(self):
            # npm's audit: read the body, answer that nothing is known.
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self.answer(True)

    listen = args.listen or ("127.0.0.1:0" if args.plain_npm else "127.0.0.1:443")
    host, port = listen.rsplit(":", 1)
    server = Server((host, int(port)), Handler)
    if not args.plain_npm:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(chain, keyfile)
        ctx.set_alpn_protocols(["http/1.1"])
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"listening on {host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
