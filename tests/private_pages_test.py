"""Private by default, end to end with the real binaries (issue 42, part 6):

- tessel-registry with --metrics_address on the wildcard address (0.0.0.0)
  and no token to require refuses to start and says what to do; with
  --metrics_token_file (a reader token) and --admin_token_file, /metrics,
  /status and /status.json answer 401 without a token or with a wrong one,
  200 with the reader token or the admin token (over real HTTP);
  --metrics_address=:PORT listens on loopback only and answers without one.
- A token file others may read (0644) is refused at start-up by
  tessel-registry (--admin_token_file, --metrics_token_file) and
  tessel-server (--admin_token_file), naming the file and `chmod 600`.
- tessel-server --data_auth=on without TLS logs a warning that the frame key
  crosses plaintext gRPC.

Usage: private_pages_test.py REGISTRY SERVER
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, read, spawn  # noqa: E402

READER = "tessel-reader-token-0123456789"
ADMIN = "tessel-admin-token-01234567890"


def secret(path, text, mode=0o600):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


def wait_for(pattern, path, proc, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = re.search(pattern, read(path))
        if m:
            return m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError("%r not in %s:\n%s" % (pattern, path, read(path)))


def get(url, token=None):
    """(HTTP status, body) of GET url, with `authorization: Bearer token`."""
    req = urllib.request.Request(url)
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def refused(args, log_path, *needles):
    """Runs args to its exit (at most 20 s): True when it exited non-zero
    and its output holds every needle."""
    p = subprocess.run(args, capture_output=True, text=True, timeout=20)
    with open(log_path, "w") as f:
        f.write(p.stdout + p.stderr)
    out = p.stdout + p.stderr
    return p.returncode != 0 and all(n in out for n in needles), out.strip()[-300:]


def main():
    registry, server = sys.argv[1:3]
    d = tempfile.mkdtemp(prefix="tessel-private-")
    try:
        reader = secret(os.path.join(d, "metrics.tokens"), "# prometheus\n%s\n" % READER)
        admin = secret(os.path.join(d, "admin.token"), ADMIN + "\n")
        base = [registry, "--listen=127.0.0.1:0", "--lease_ttl_ms=1500"]

        ok, out = refused(base + ["--insecure", "--metrics_address=0.0.0.0:0"],
                          os.path.join(d, "open.log"), "--metrics_token_file", "--metrics_open")
        check(ok, "registry: a wildcard --metrics_address with no token is refused (%s)" % out)

        rlog = os.path.join(d, "registry.log")
        p = spawn(base + ["--admin_token_file=" + admin, "--metrics_token_file=" + reader,
                          "--metrics_address=0.0.0.0:0"], rlog)
        address = wait_for(r"metrics at http://(\S+)/metrics", rlog, p)
        port = address.rsplit(":", 1)[1]
        url = "http://127.0.0.1:%s" % port
        for path in ("/metrics", "/status", "/status.json"):
            status, _ = get(url + path)
            check(status == 401, "registry %s on 0.0.0.0: 401 without a token (%d)" % (path, status))
            status, _ = get(url + path, "not-a-token-of-this-registry")
            check(status == 401, "registry %s: 401 with a wrong token (%d)" % (path, status))
            status, body = get(url + path, READER)
            check(status == 200, "registry %s: 200 with the reader token (%d)" % (path, status))
            status, _ = get(url + path, ADMIN)
            check(status == 200, "registry %s: 200 with the admin token (%d)" % (path, status))
        status, body = get(url + "/status.json", READER)
        check('"members"' in body, "registry /status.json: the page itself behind the token")

        llog = os.path.join(d, "loopback.log")
        p = spawn(base + ["--insecure", "--metrics_address=:0"], llog)
        address = wait_for(r"metrics at http://(\S+)/metrics", llog, p)
        check(address.startswith("127.0.0.1:"), "registry --metrics_address=:0 is loopback (%s)"
              % address)
        status, _ = get("http://%s/status.json" % address)
        check(status == 200, "registry on loopback: 200 without a token (%d)" % status)

        loose = secret(os.path.join(d, "loose.token"), ADMIN + "\n", 0o644)
        ok, out = refused(base + ["--admin_token_file=" + loose], os.path.join(d, "loose1.log"),
                          "--admin_token_file '%s' has mode 0644" % loose, "chmod 600 " + loose)
        check(ok, "registry: a 0644 --admin_token_file is refused (%s)" % out)
        loose_reader = secret(os.path.join(d, "loose.tokens"), READER + "\n", 0o604)
        ok, out = refused(base + ["--admin_token_file=" + admin, "--metrics_address=0.0.0.0:0",
                                  "--metrics_token_file=" + loose_reader],
                          os.path.join(d, "loose2.log"), "chmod 600 " + loose_reader)
        check(ok, "registry: a 0604 --metrics_token_file is refused (%s)" % out)
        ok, out = refused([server, "--registry=127.0.0.1:1", "--listen=127.0.0.1:0", "--shard=0",
                           "--admin_token_file=" + loose], os.path.join(d, "loose3.log"),
                          "has mode 0644", "chmod 600 " + loose)
        check(ok, "server: a 0644 --admin_token_file is refused (%s)" % out)

        slog = os.path.join(d, "server.log")
        p = spawn([server, "--registry=127.0.0.1:1", "--listen=127.0.0.1:0", "--shard=0",
                   "--admin_token_file=" + admin, "--data_auth=on", "--join_timeout_s=1",
                   "--ucx_tls=posix,sysv,self"], slog)
        try:
            wait_for(r"(data-path authentication is on without TLS.*plaintext gRPC)", slog, p)
            check(True, "server: --data_auth=on without TLS warns about plaintext gRPC")
        except RuntimeError as e:
            check(False, "server: --data_auth=on without TLS warns (%s)" % e)
    finally:
        status = finish(d)
    return status


if __name__ == "__main__":
    sys.exit(main())
