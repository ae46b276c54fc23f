"""What Tessel's metrics cost the demo's training step.

Runs tessel-demo (a real local cluster: embedded registry, shard servers
and workers as processes) in interleaved pairs:
  off  TESSEL_METRICS=off: nothing recorded, nothing served
  on   recording, every process serving /metrics (--metrics_address), and
       this script scraping every one of them at --scrape_hz (Prometheus'
       default interval is 15 s, i.e. 0.067 Hz)
and compares worker 0's ms/step (its progress lines, the first window
left out as warm-up). The machine is shared and noisy, so each arm's runs
are shown with their median; the ratio of medians is the figure.

Then the cost per operation (metrics_bench) times the operations one step
makes (counted from an "on" run's last scrapes) bounds the recording cost
analytically, below the noise of the end-to-end figure.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request


def worker_ms_per_step(stdout):
    vals = [float(m) for m in re.findall(r"([0-9.]+) ms/step", stdout)]
    return statistics.mean(vals[1:]) if len(vals) > 1 else float("nan")


class Scraper(threading.Thread):
    """Finds every process's metrics address in the run's logs and scrapes
    them all, `hz` times a second."""

    def __init__(self, run_dir_holder, demo_address, hz):
        super().__init__(daemon=True)
        self.holder = run_dir_holder
        self.addresses = {"registry": demo_address}
        self.hz = hz
        self.stop = threading.Event()
        self.scrapes = 0
        self.seconds = 0.0
        self.last = {}

    def find(self):
        d = self.holder.get("run_dir")
        if not d or not os.path.isdir(d):
            return
        for name in os.listdir(d):
            if not name.endswith(".log") or name in self.addresses:
                continue
            try:
                m = re.search(r"metrics at http://(\S+)/metrics", open(os.path.join(d, name)).read())
            except OSError:
                continue
            if m:
                self.addresses[name] = m.group(1)

    def run(self):
        while not self.stop.is_set():
            self.find()
            for name, a in list(self.addresses.items()):
                try:
                    t0 = time.perf_counter()
                    with urllib.request.urlopen("http://%s/metrics" % a, timeout=2) as r:
                        self.last[name] = r.read().decode()
                    self.seconds += time.perf_counter() - t0
                    self.scrapes += 1
                except OSError:
                    pass
            self.stop.wait(1.0 / self.hz)


def run_demo(demo, steps, on, hz):
    env = dict(os.environ)
    args = [demo, "--skip_reference", "--steps=%d" % steps]
    scraper = None
    holder = {}
    if on:
        port = 19300 + os.getpid() % 500
        args.append("--metrics_address=127.0.0.1:%d" % port)
        scraper = Scraper(holder, "127.0.0.1:%d" % port, hz)
    else:
        env["TESSEL_METRICS"] = "off"
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env)
    out = []
    started = False
    for line in p.stdout:
        out.append(line)
        m = re.search(r"logs in (\S+)", line)
        if m:
            holder["run_dir"] = m.group(1)
        if scraper is not None and not started and "registry (embedded)" in line:
            scraper.start()
            started = True
    p.wait(timeout=600)
    if scraper is not None:
        scraper.stop.set()
        if started:
            scraper.join()
    text = "".join(out)
    if p.returncode != 0:
        raise RuntimeError("tessel-demo failed:\n" + text[-2000:])
    return worker_ms_per_step(text), scraper


def sample(text, name, **labels):
    total = None
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
            total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--scrape_hz", type=float, default=1.0)
    a = ap.parse_args()

    print("tessel-demo --steps=%d (default model and strategy), %d interleaved pairs; "
          "'on' scraped at %.3g Hz" % (a.steps, a.pairs, a.scrape_hz), flush=True)
    off, on = [], []
    last_scraper = None
    for i in range(a.pairs):
        for arm in ("off", "on") if i % 2 == 0 else ("on", "off"):
            ms, scraper = run_demo(a.demo, a.steps, arm == "on", a.scrape_hz)
            (on if arm == "on" else off).append(ms)
            extra = ""
            if scraper is not None:
                last_scraper = scraper
                extra = "  (%d scrapes of %d processes, %.2f ms each round trip)" % (
                    scraper.scrapes, len(scraper.addresses),
                    1e3 * scraper.seconds / max(1, scraper.scrapes))
            print("pair %d  %-3s  %.3f ms/step%s" % (i + 1, arm, ms, extra), flush=True)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print("metrics off: median %.3f ms/step  (min %.3f, max %.3f)" % (m_off, min(off), max(off)))
    print("metrics on:  median %.3f ms/step  (min %.3f, max %.3f)" % (m_on, min(on), max(on)))
    print("end to end: on/off = %.4f  (%+.2f%% of step time; run-to-run spread of 'off' is "
          "%.1f%%)" % (m_on / m_off, 100 * (m_on / m_off - 1),
                       100 * (max(off) - min(off)) / m_off))

    # Analytic bound: operations per step x measured cost per operation.
    r = subprocess.run([a.bench, "--benchmark_format=json", "--benchmark_min_time=0.2"],
                       capture_output=True, text=True, check=True)
    cost = {b["name"]: b["real_time"] for b in json.loads(r.stdout)["benchmarks"]}
    scrapes = last_scraper.last if last_scraper else {}
    frames = 0.0
    updates = 0.0
    steps = a.steps
    for name, text in scrapes.items():
        if name.startswith("server"):
            frames += (sample(text, "tessel_server_frames_received_total") or 0)
            frames += (sample(text, "tessel_server_frames_sent_total") or 0)
            updates += (sample(text, "tessel_server_update_seconds_count") or 0)
    workers = sum(1 for n in scrapes if n.startswith("worker"))
    per_step_ns = (frames / steps * 2 * cost["BM_CounterAdd"] +  # frame + bytes counters
                   updates / steps * (cost["BM_LookupAndObserve"] + cost["BM_CounterAdd"] + 60) +
                   workers * (4 * cost["BM_HistogramObserve"] + cost["BM_CounterAdd"] + 60))
    print("per step (from the last 'on' run's scrapes): %.1f frames, %.1f bucket updates, "
          "%d workers" % (frames / steps, updates / steps, workers))
    print("cost per op: counter %.1f ns, histogram %.1f ns, lookup+observe %.1f ns, "
          "scrape of 16 jobs %.1f us (+60 ns per timed section for clock reads)" %
          (cost["BM_CounterAdd"], cost["BM_HistogramObserve"], cost["BM_LookupAndObserve"],
           cost["BM_ExposeServerSized/16"] / 1000))
    print("recording per step, all processes together: %.2f us = %.4f%% of %.3f ms/step "
          "(the 2 cores serve every process)" % (per_step_ns / 1000,
                                                100 * per_step_ns / 1e6 / m_off, m_off))
    if last_scraper and last_scraper.scrapes:
        rt = last_scraper.seconds / last_scraper.scrapes
        busy = a.scrape_hz * len(last_scraper.addresses) * rt
        print("serving at %.3g Hz: %d processes x %.2f ms per scrape (round trip, an upper bound "
              "on the server's share) = %.3f%% of one core" % (a.scrape_hz,
                                                              len(last_scraper.addresses),
                                                              1e3 * rt, 100 * busy))


if __name__ == "__main__":
    sys.exit(main())
