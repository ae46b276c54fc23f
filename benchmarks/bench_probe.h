/* What every contender of benchmarks/run_datapath and run_multihost measures
 * besides time, the same way (C and C++):
 *   - CPU: the process's CPU time, every thread (progress threads, update
 *     threads, busy polling included), CLOCK_PROCESS_CPUTIME_ID.
 *   - Host-link bytes: a network device's counters
 *     (/sys/class/net/DEV/statistics/{rx,tx}_bytes). In a network namespace
 *     used as a host (tests/netns.py) eth0 is the host's only link, so every
 *     byte that left or reached the host is counted there, headers included.
 * Each rank samples both after the barrier that starts its timed steps and
 * after a barrier that ends them; the launcher sums CPU over processes and
 * takes one rank's link counters per host. */
#ifndef TESSEL_BENCHMARKS_BENCH_PROBE_H_
#define TESSEL_BENCHMARKS_BENCH_PROBE_H_

#include <stdio.h>
#include <string.h>
#include <time.h>

static inline double bench_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The device's byte counters; -1 when `dev` is empty, "-" or unreadable. */
static inline double bench_link_counter(const char* dev, const char* which) {
  if (dev == NULL || dev[0] == '\0' || strcmp(dev, "-") == 0) return -1;
  char path[256];
  snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/%s", dev, which);
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  unsigned long long v = 0;
  int got = fscanf(f, "%llu", &v);
  fclose(f);
  return got == 1 ? (double)v : -1;
}

struct bench_sample {
  double cpu_s, rx, tx;
};

static inline struct bench_sample bench_sample_now(const char* dev) {
  struct bench_sample s;
  s.cpu_s = bench_cpu_s();
  s.rx = bench_link_counter(dev, "rx_bytes");
  s.tx = bench_link_counter(dev, "tx_bytes");
  return s;
}

#endif /* TESSEL_BENCHMARKS_BENCH_PROBE_H_ */
