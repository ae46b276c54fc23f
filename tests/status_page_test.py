"""The registry's status page in headless Chromium (Debian's chromium): a
real cluster (registry with --metrics_address, two shard servers, two
tessel-train workers reporting their loss) is shown at /status. While the
job trains, /status.json has its step rate and a growing loss curve; after,
its final step and newest checkpoint with its age. Chromium runs the page's
script: the DOM it renders names the job and holds its loss plot, and the
screenshot (kept as a test output) has the plot's red line in it.

Usage: status_page_test.py REGISTRY SERVER TRAIN
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_util import check, finish, log, spawn  # noqa: E402

UCX = "--ucx_tls=posix,sysv,self"
STEPS = 800
JOB = "statusjob"


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode(), r.headers.get("Content-Type")


def wait_for(pattern, path, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path):
            m = re.search(pattern, open(path).read())
            if m:
                return m.group(1)
        time.sleep(0.05)
    raise RuntimeError("%r not in %s" % (pattern, path))


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB/RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6), "8-bit RGB(A) expected"
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def main():
    registry, server, train = sys.argv[1:4]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not check(chromium is not None, "chromium on PATH (scripts/install_deps.sh)"):
        return 1
    d = tempfile.mkdtemp(prefix="tessel-status-")
    outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", d)
    try:
        port_file = os.path.join(d, "registry.port")
        reg_log = os.path.join(d, "registry.log")
        spawn([registry, "--insecure", "--listen=127.0.0.1:0", "--port_file=" + port_file,
               "--metrics_address=127.0.0.1:0"], reg_log)
        http = wait_for(r"metrics at http://(\S+)/metrics", reg_log)
        reg = wait_for(r"(\S+)", port_file)
        for shard in range(2):
            spawn([server, "--insecure", "--registry=" + reg, "--shard=%d" % shard, UCX,
                   "--checkpoint_dir=" + os.path.join(d, "ck")],
                  os.path.join(d, "server%d.log" % shard))
        procs = [spawn([train, "--registry=" + reg, "--job=" + JOB, "--rank=%d" % r, "--world=2",
                        "--servers=2", "--steps=%d" % STEPS, "--layers=64,512,512,10",
                        "--samples=1024", "--batch=64", "--optimizer=adam", "--lr=0.001",
                        "--checkpoint_every_steps=200", "--lease_ttl_ms=600", UCX,
                        "--log_every=1000000", "--out=" + os.path.join(d, "out.npy")],
                       os.path.join(d, "worker%d.log" % r)) for r in range(2)]
        best_rate, most_points = 0.0, 0
        while any(p.poll() is None for p in procs):
            try:
                s = json.loads(get("http://%s/status.json" % http)[0])
                for j in s["jobs"]:
                    if j["name"] == JOB:
                        best_rate = max(best_rate, j["steps_per_s"] or 0)
                        most_points = max(most_points, len(j["loss"]))
            except OSError:
                pass
            time.sleep(0.3)
        check(all(p.returncode == 0 for p in procs), "the job trained %d steps" % STEPS)
        check(best_rate > 0, "while training: a step rate (%.0f steps/s at best)" % best_rate)
        check(most_points >= 5, "while training: the loss curve grows (%d points)" % most_points)
        time.sleep(1.1)  # past the page's 1 s cache
        text, ctype = get("http://%s/status.json" % http)
        s = json.loads(text)
        jobs = [j for j in s["jobs"] if j["name"] == JOB]
        ok = len(jobs) == 1
        j = jobs[0] if ok else {}
        check(ok and j["step"] == STEPS and j["strategy"] == "zero2" and j["shards"] == 2,
              "after: the job at step %s on 2 shards" % j.get("step"))
        ck = j.get("checkpoint") or {}
        check(ck.get("step") == STEPS and 0 <= ck.get("age_s", -1) < 60,
              "after: newest checkpoint step %s, age %.1f s" % (ck.get("step"), ck.get("age_s", -1)))
        losses = [p[1] for p in j.get("loss", [])]
        check(len(losses) >= 5 and losses[-1] < losses[0],
              "after: %d loss points, falling (%.4f -> %.4f)" %
              (len(losses), losses[0] if losses else 0, losses[-1] if losses else 0))
        check(sum(1 for m in s["members"] if m["role"] == "server") == 2 and s["registry"] == reg,
              "members: the two servers; the registry's address")
        check(s.get("security") == "insecure",
              "security: 'insecure' (this registry runs with --insecure): %r" % s.get("security"))
        html, ctype = get("http://%s/status" % http)
        check(ctype.startswith("text/html") and "status.json" in html, "/status is the HTML page")

        url = "http://%s/status" % http
        common = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                  "--window-size=1300,900", "--virtual-time-budget=6000",
                  "--user-data-dir=" + os.path.join(d, "chromium")]
        dom = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True,
                             timeout=120)
        check(dom.returncode == 0 and "<td>%s</td>" % JOB in dom.stdout,
              "chromium: the rendered page names the job in its jobs table")
        banner = re.search(r'<div id="insecure"[^>]*>', dom.stdout)
        check(banner is not None and "display: none" not in banner.group(0) and
              "display:none" not in banner.group(0) and "callers: insecure" in dom.stdout,
              "chromium: the page shows the INSECURE banner and 'callers: insecure' (%s)" %
              (banner.group(0) if banner else None))
        poly = re.search(r'<svg class="loss" data-job="%s".*?<polyline[^>]*points="([^"]+)"' % JOB,
                         dom.stdout, re.S)
        npts = len(poly.group(1).split()) if poly else 0
        check(npts == len(losses), "chromium: the job's loss plot has its %d points (%d)" %
              (len(losses), npts))
        shot = os.path.join(outputs, "status_page.png")
        sc = subprocess.run(common + ["--screenshot=" + shot, url], capture_output=True,
                            text=True, timeout=120)
        if check(sc.returncode == 0 and os.path.exists(shot), "chromium: screenshot taken"):
            w, h, rows = png_pixels(shot)
            red = sum(1 for row in rows for (r, g, b) in row
                      if r > 180 and g < 90 and b < 90)
            check(w == 1300 and h == 900 and red > 300,
                  "screenshot %dx%d holds the plot: %d pixels of its red line (%s)" %
                  (w, h, red, shot))
    finally:
        status = finish(d)
    return status


if __name__ == "__main__":
    sys.exit(main())
