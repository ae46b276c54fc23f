"""The OCI images, built and run: deploy/image/build.sh builds tessel:<release>
and tessel:<release>-gpu from the Bazel-built binaries (mmdebstrap from
Debian's mirror, umoci); each image is unpacked from the OCI layout with
umoci and run from its root with chroot as the image's own user:

  - every binary answers --version with the line of the binaries it was
    built from, and the release is the image's tag;
  - the dynamic loader inside the root resolves every library of every
    binary and shared object in the image (nothing "not found");
  - a tessel-registry and a tessel-server started inside the root answer
    grpc.health.v1 Check with SERVING (a plaintext HTTP/2 gRPC call made
    here), and tesselctl run from the root lists the server as a member;
  - the CPU image holds no libcudart anywhere and its tessel-server says it
    found no CUDA runtime; the GPU image's tessel-server loads libcudart
    through the image's loader cache (and, with no GPU here, says why none
    is usable);
  - the config's user is not root, PATH and WorkingDir are set, the labels
    carry the release; /etc/ssl/certs/ca-certificates.crt holds CA roots.

Sizes (compressed blobs, unpacked) and build times are printed. Needs root,
mmdebstrap, umoci, unshare and chroot, and the host's apt sources.

Usage: image_test.py BUILD_SH TESSEL_REGISTRY TESSEL_SERVER TESSEL_TRAIN TESSELCTL
"""
import atexit
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import proc_util
DEADLINE = time.time() + 840  # under the Bazel timeout ("long": 900 s)
procs = proc_util.procs  # what cleanup() kills
failures = []


def log(*a):
    print(*a, flush=True)


def check(cond, what):
    log(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)
    return cond


def left(cap):
    """Seconds a step may take: `cap`, but never past the test's deadline."""
    return max(1.0, min(cap, DEADLINE - time.time()))


def run(args, cap=60, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=left(cap), **kw)


def cleanup(tmp):
    proc_util.cleanup()
    # Mounts made for the image's processes live in their own mount
    # namespaces and are gone with them; --one-file-system guards the host
    # should one have survived.
    subprocess.run(["rm", "-rf", "--one-file-system", tmp])


# --- grpc.health.v1 over plaintext HTTP/2 -----------------------------------
def _hpack_int(value, prefix_bits, first):
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def _hpack_str(s):
    b = s.encode()
    return _hpack_int(len(b), 7, 0) + b


def _frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(
        ">I", stream) + payload


def grpc_health(address, service="", timeout=5.0):
    """grpc.health.v1.Health/Check(service) on a plaintext gRPC server:
    returns the status (1 SERVING, 2 NOT_SERVING, 3 SERVICE_UNKNOWN), or a
    string saying why there was no answer."""
    host, port = address.rsplit(":", 1)
    try:
        s = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as e:
        return "connect %s: %s" % (address, e)
    try:
        # HPACK: :method POST (static 3), :scheme http (6), then literals
        # without indexing: :path (name 4), :authority (1), content-type (31), te.
        headers = (b"\x83\x86" + _hpack_int(4, 4, 0) + _hpack_str("/grpc.health.v1.Health/Check")
                   + _hpack_int(1, 4, 0) + _hpack_str(address)
                   + _hpack_int(31, 4, 0) + _hpack_str("application/grpc")
                   + b"\x00" + _hpack_str("te") + _hpack_str("trailers"))
        request = b"" if not service else b"\x0a" + bytes([len(service)]) + service.encode()
        message = b"\x00" + struct.pack(">I", len(request)) + request
        s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0, b"")
                  + _frame(1, 0x4, 1, headers) + _frame(0, 0x1, 1, message))
        buf = b""
        data = b""

        def read(n):
            nonlocal buf
            while len(buf) < n:
                chunk = s.recv(65536)
                if not chunk:
                    raise EOFError("connection closed")
                buf += chunk
            out, buf = buf[:n], buf[n:]
            return out

        while True:
            h = read(9)
            length = int.from_bytes(h[0:3], "big")
            ftype, flags = h[3], h[4]
            stream = int.from_bytes(h[5:9], "big") & 0x7FFFFFFF
            payload = read(length)
            if ftype == 4 and not flags & 0x1:  # SETTINGS: acknowledge
                s.sendall(_frame(4, 0x1, 0, b""))
            elif ftype == 6 and not flags & 0x1:  # PING: answer
                s.sendall(_frame(6, 0x1, 0, payload))
            elif ftype == 7:
                return "GOAWAY from %s" % address
            elif stream == 1 and ftype == 3:
                return "RST_STREAM from %s" % address
            elif stream == 1 and ftype == 0:
                if flags & 0x8:  # PADDED
                    payload = payload[1:len(payload) - payload[0]]
                data += payload
                if flags & 0x1:
                    break
            elif stream == 1 and ftype == 1 and flags & 0x1:  # trailers
                break
        if len(data) < 5:
            return "no response message (the call failed; see grpc-status)"
        body = data[5:5 + int.from_bytes(data[1:5], "big")]
        # HealthCheckResponse { ServingStatus status = 1; }: absent means 0 (UNKNOWN).
        if len(body) >= 2 and body[0] == 0x08:
            return body[1]
        return 0
    except (OSError, EOFError) as e:
        return "%s: %s" % (address, e)
    finally:
        s.close()


# --- the image --------------------------------------------------------------
def read_layout(layout):
    def blob(digest):
        algo, h = digest.split(":")
        return os.path.join(layout, "blobs", algo, h)

    index = json.load(open(os.path.join(layout, "index.json")))
    images = {}
    for m in index["manifests"]:
        tag = m.get("annotations", {}).get("org.opencontainers.image.ref.name")
        manifest = json.load(open(blob(m["digest"])))
        config = json.load(open(blob(manifest["config"]["digest"])))
        images[tag] = {"descriptor": m, "manifest": manifest, "config": config}
    return images


def tree_bytes(root):
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def elf_files(root):
    """Paths (inside `root`) of the ELF executables and shared objects."""
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                if fh.read(4) != b"\x7fELF":
                    continue
            out.append("/" + os.path.relpath(p, root))
    return sorted(out)


def in_image(root, uid, gid, argv, mounts=False):
    """argv run from the image root as uid:gid. With mounts, in a mount
    namespace of its own with /proc, /sys and /dev as a container runtime
    provides them (UCX reads /proc and /sys, and uses /dev/shm; without
    /proc it logs "failed to get boot id" as it loads)."""
    cmd = ["chroot", "--userspec=%d:%d" % (uid, gid), root] + argv
    if not mounts:
        return cmd
    script = ('set -e; for d in proc sys dev; do mkdir -p "$0/$d"; done; '
              'mount -t proc proc "$0/proc"; mount --rbind /sys "$0/sys"; '
              'mount --rbind /dev "$0/dev"; exec "$@"')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script,
            root] + cmd


def spawn(cmd, logfile):
    p = subprocess.Popen(cmd, stdout=open(logfile, "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=left(10))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, fn, cap=30):
    end = time.time() + left(cap)
    last = None
    while time.time() < end:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    log("       gave up waiting for %s" % what)
    return last


def check_image(tag, image, layout, tmp, host_version, release, variant):
    log("--- tessel:%s" % tag)
    config = image["config"].get("config", {})
    user = config.get("User", "")
    ids = user.split(":") if user else ["0"]
    if not all(x.isdigit() for x in ids):
        check(False, "config User is numeric uid[:gid] (got %r)" % user)
        return
    uid, gid = int(ids[0]), int(ids[-1])
    check(uid != 0 and gid != 0, "config User is a non-root uid:gid (%r)" % user)
    env = dict(e.split("=", 1) for e in config.get("Env", []))
    check("/usr/local/bin" in env.get("PATH", "").split(":"), "config Env PATH has /usr/local/bin")
    check(bool(config.get("WorkingDir")), "config WorkingDir set (%r)" % config.get("WorkingDir"))
    labels = config.get("Labels", {})
    check(labels.get("org.opencontainers.image.version") == release,
          "label org.opencontainers.image.version = %s" % release)
    check(labels.get("tessel.image.variant") == variant, "label tessel.image.variant = " + variant)

    root = os.path.join(tmp, "root-" + tag)
    r = run(["umoci", "raw", "unpack", "--image", "%s:%s" % (layout, tag), root], cap=120)
    if not check(r.returncode == 0, "umoci raw unpack %s" % tag):
        log(r.stderr)
        return
    layers = [l["size"] for l in image["manifest"]["layers"]]
    unpacked = tree_bytes(root)
    log("       size: %d layer(s) %s MB compressed, %.1f MB unpacked" % (
        len(layers), " + ".join("%.1f" % (l / 1e6) for l in layers), unpacked / 1e6))

    passwd = open(os.path.join(root, "etc/passwd")).read()
    check(any(line.split(":")[2] == str(uid) for line in passwd.splitlines() if line.count(":") >= 6),
          "/etc/passwd names uid %d" % uid)
    bundle = os.path.join(root, "etc/ssl/certs/ca-certificates.crt")
    certs = open(bundle).read().count("BEGIN CERTIFICATE") if os.path.isfile(bundle) else 0
    check(certs >= 50, "/etc/ssl/certs/ca-certificates.crt holds CA roots (%d)" % certs)
    check(not os.path.exists(os.path.join(root, "bin/sh")) and
          not os.path.exists(os.path.join(root, "usr/bin/apt")), "no shell, no apt")

    cudart = [os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if "libcudart" in f]
    if variant == "cpu":
        check(not cudart, "no libcudart anywhere in the CPU image %s" % cudart[:3])
    else:
        check(any(p.startswith(os.path.join(root, "usr/local/cuda/lib64/")) for p in cudart),
              "libcudart under /usr/local/cuda/lib64 in the GPU image")

    # The image's own loader resolves every library of every ELF file inside.
    elves = [e for e in elf_files(root) if "/ld-linux" not in e]
    missing = []
    for e in elves:
        r = run(["chroot", root, "/lib64/ld-linux-x86-64.so.2", "--list", e])
        if r.returncode != 0 or "not found" in r.stdout + r.stderr:
            missing.append("%s: %s" % (e, (r.stdout + r.stderr).strip().splitlines()[-1:]))
    check(len(elves) >= 4 and not missing,
          "ld.so --list inside the root resolves every library of all %d ELF files%s" % (
              len(elves), "" if not missing else ": " + "; ".join(missing[:5])))

    for name in ("tessel-registry", "tessel-server", "tessel-train", "tesselctl"):
        r = run(in_image(root, uid, gid, ["/usr/local/bin/" + name, "--version"], mounts=True))
        out = r.stdout.strip()
        check(r.returncode == 0 and out == host_version,
              "%s --version as %d:%d inside the image: %r" % (name, uid, gid, out))

    # A registry and a shard server run from the image, as its user.
    d = os.path.join(tmp, "logs-" + tag)
    os.makedirs(d)
    port_file = os.path.join(root, "tmp/registry.port")
    registry = spawn(in_image(root, uid, gid, [
        "/usr/local/bin/tessel-registry", "--insecure", "--listen=127.0.0.1:0",
        "--port_file=/tmp/registry.port", "--lease_ttl_ms=3000"], mounts=True),
        os.path.join(d, "registry.log"))
    address = wait_for("the registry's port file", lambda: os.path.exists(port_file) and open(
        port_file).read().strip())
    if not check(bool(address), "tessel-registry started inside the image (%s)" % address):
        log(open(os.path.join(d, "registry.log")).read()[-3000:])
        stop(registry)
        return
    status = wait_for("registry SERVING", lambda: grpc_health(address) == 1 or None, cap=15)
    check(status is True, "registry %s: grpc.health.v1 Check(\"\") = SERVING (got %r)" % (
        address, grpc_health(address)))

    server = spawn(in_image(root, uid, gid, [
        "/usr/local/bin/tessel-server", "--insecure", "--registry=" + address, "--shard=0",
        "--listen=127.0.0.1:0", "--ucx_tls=tcp", "--lease_ttl_ms=3000"], mounts=True),
        os.path.join(d, "server.log"))

    def server_member():
        r = run(in_image(root, uid, gid, ["/usr/local/bin/tesselctl", "--registry=" + address,
                                          "members", "-o", "json"]), cap=20)
        if r.returncode != 0:
            return None
        for view in json.loads(r.stdout or "[]"):
            for m in view.get("members", []):
                if m.get("role") == "server" and int(m.get("rank", -1)) == 0:
                    return m
        return None

    member = wait_for("the server in tesselctl members", server_member, cap=30)
    if not check(bool(member), "tesselctl members (run from the image) lists the shard server "
                 "started inside the image"):
        log(open(os.path.join(d, "server.log")).read()[-3000:])
    else:
        server_address = member.get("grpc_address", "")
        status = wait_for("server SERVING", lambda: grpc_health(server_address) == 1 or None,
                          cap=15)
        check(status is True, "shard server %s: grpc.health.v1 Check(\"\") = SERVING (got %r)" % (
            server_address, grpc_health(server_address)))
    server_log = open(os.path.join(d, "server.log")).read()
    cuda_lines = [l for l in server_log.splitlines() if "CUDA" in l]
    log("       server: %s" % (cuda_lines[0].strip() if cuda_lines else "(no CUDA line)"))
    if variant == "cpu":
        check(any("no CUDA runtime library" in l for l in cuda_lines),
              "tessel-server in the CPU image: no CUDA runtime, CPU path")
    else:
        check(any("from libcudart.so" in l for l in cuda_lines),
              "tessel-server in the GPU image loads libcudart through the image's loader cache")
    stop(server)
    stop(registry)
    check(server.returncode == 0 and registry.returncode == 0,
          "server and registry exit 0 on SIGTERM (%s, %s)" % (server.returncode,
                                                             registry.returncode))


def main():
    build_sh, binaries = sys.argv[1], sys.argv[2:6]
    # Bazel runs tests with a PATH without sbin (chroot, ldconfig, mount).
    os.environ["PATH"] = os.environ.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    if os.geteuid() != 0:
        log("FAIL  image_test needs root (mmdebstrap --mode=root, chroot, mount namespaces)")
        return 1
    for tool in ("mmdebstrap", "umoci", "unshare", "chroot"):
        if shutil.which(tool) is None:
            log("FAIL  %s not found: run scripts/install_deps.sh" % tool)
            return 1
    tmp = tempfile.mkdtemp(prefix="tessel-image-test.", dir=os.environ.get("TEST_TMPDIR"))
    atexit.register(cleanup, tmp)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    # The binaries as Bazel built them: none links CUDA, all print one version.
    versions = set()
    for b in binaries:
        r = run(["ldd", b])
        check("libcudart" not in r.stdout, "%s links no libcudart" % os.path.basename(b))
        versions.add(run([b, "--version"]).stdout.strip())
    if not check(len(versions) == 1, "the four binaries print one --version line %s" % versions):
        return 1
    host_version = versions.pop()
    release = host_version.split()[1]

    out = os.path.join(tmp, "out")
    cmd = ["bash", build_sh, "--out", out, "--variant", "all"]
    for b in binaries:
        cmd += ["--bin", b]
    t = time.time()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=left(600))
    build_s = time.time() - t
    log(r.stdout)
    if not check(r.returncode == 0, "deploy/image/build.sh --variant all (%.1f s)" % build_s):
        return 1

    layout = os.path.join(out, "tessel-oci")
    images = read_layout(layout)
    cpu_tag, gpu_tag = release, release + "-gpu"
    check(set(images) == {cpu_tag, gpu_tag}, "layout tags %s = {%s, %s}" % (
        sorted(images), cpu_tag, gpu_tag))
    for tag in (cpu_tag, gpu_tag):
        archive = os.path.join(out, "tessel-%s.tar" % tag)
        names = run(["tar", "-tf", archive]).stdout.split() if os.path.exists(archive) else []
        refs = []
        if "index.json" in names:
            index = json.loads(run(["tar", "-xOf", archive, "index.json"]).stdout)
            refs = [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
                    for m in index["manifests"]]
        check("oci-layout" in names and refs == ["tessel:" + tag],
              "OCI archive %s holds one image, tessel:%s (%s)" % (os.path.basename(archive), tag,
                                                                   refs))
    cpu_layers = images[cpu_tag]["manifest"]["layers"]
    gpu_layers = images[gpu_tag]["manifest"]["layers"]
    check(gpu_layers[:len(cpu_layers)] == cpu_layers and len(gpu_layers) == len(cpu_layers) + 1,
          "the GPU image is the CPU image plus one layer")
    check_image(cpu_tag, images[cpu_tag], layout, tmp, host_version, release, "cpu")
    check_image(gpu_tag, images[gpu_tag], layout, tmp, host_version, release, "gpu")

    log("image build %.1f s; test %.1f s" % (build_s, time.time() - (DEADLINE - 840)))
    if failures:
        log("%d check(s) failed:\n  %s" % (len(failures), "\n  ".join(failures)))
        return 1
    log("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
