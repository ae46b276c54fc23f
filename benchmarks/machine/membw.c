/* membw: the memory bandwidth this machine sustains, measured the way
 * docs/machine.md quotes it.
 *
 * Kernels, over float32 arrays of N elements (S = N * 4 bytes, ONE array):
 *   copy   b[i] = a[i]                          counts 2 S (read a, write b)
 *   triad  a[i] = b[i] + s * c[i]               counts 3 S (read b, c, write a)
 *   adam   the traffic of a fused Adam update:  counts 7 S = 28 B/parameter
 *          read p, g, m, v; write p, m, v (one multiply-add per array, no
 *          square root: the memory-bound floor of the server's optimizer)
 * Bytes are counted as STREAM does: the write-allocate read of a written
 * line is not counted, so a loop that stores normally really moves a bit
 * more than it is credited with. GB/s = 10^9 bytes per second.
 *
 * Each sample runs the kernel once over the whole arrays, split evenly over
 * T threads (each thread first-touches its own slice); samples are timed
 * between two barriers with CLOCK_MONOTONIC. Printed per (kernel, size):
 * min / median / max GB/s over the samples.
 *
 * Usage: membw [-t THREADS] [-s SIZES_MIB] [-n SAMPLES] [-k KERNELS]
 *   -t 1            threads (default 1)
 *   -s 1,64         comma-separated array sizes in MiB (default 64)
 *   -n 10           timed samples per (kernel, size), after 2 warm-up runs
 *   -k copy,triad,adam   kernels to run (default all three)
 * Build: cc -O2 -pthread -o membw membw.c      (benchmarks/machine/run.sh)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kCopy, kTriad, kAdam, kKernels };
static const char* const kNames[kKernels] = {"copy", "triad", "adam"};
static const int kCounted[kKernels] = {2, 3, 7}; /* arrays of S bytes credited */

struct shared {
  float* arr[4]; /* copy: a, b; triad: a, b, c; adam: p, g, m, v */
  size_t n;
  int threads;
  int kernel; /* what the next run executes; -1 = exit */
  pthread_barrier_t start, done;
};

struct worker {
  struct shared* sh;
  int id;
  pthread_t tid;
};

static void slice(const struct shared* sh, int id, size_t* lo, size_t* hi) {
  size_t per = sh->n / (size_t)sh->threads;
  *lo = per * (size_t)id;
  *hi = id == sh->threads - 1 ? sh->n : *lo + per;
}

/* The loops run in blocks of kBlock elements with a fixed trip count, so
 * that a plain -O2 build (GCC's "very cheap" vectorizer, which will not add
 * a remainder loop) still vectorizes them; the tail is scalar. */
enum { kBlock = 16 };

static void copy_range(const float* restrict a, float* restrict b, size_t lo, size_t hi) {
  size_t i = lo;
  for (; i + kBlock <= hi; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) b[i + j] = a[i + j];
  }
  for (; i < hi; ++i) b[i] = a[i];
}

static void triad_range(float* restrict a, const float* restrict b, const float* restrict c,
                        size_t lo, size_t hi) {
  const float s = 3.0f;
  size_t i = lo;
  for (; i + kBlock <= hi; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) a[i + j] = b[i + j] + s * c[i + j];
  }
  for (; i < hi; ++i) a[i] = b[i] + s * c[i];
}

/* p, g, m, v: Adam's reads and writes with simple math (no square root). */
static void adam_range(float* restrict p, const float* restrict g, float* restrict m,
                       float* restrict v, size_t lo, size_t hi) {
  const float b1 = 0.9f, b2 = 0.999f, lr = 1e-3f;
  size_t i = lo;
  for (; i + kBlock <= hi; i += kBlock) {
    float* restrict pb = p + i;
    const float* restrict gb = g + i;
    float* restrict mb = m + i;
    float* restrict vb = v + i;
    for (int j = 0; j < kBlock; ++j) {
      float mj = b1 * mb[j] + (1.0f - b1) * gb[j];
      float vj = b2 * vb[j] + (1.0f - b2) * gb[j] * gb[j];
      mb[j] = mj;
      vb[j] = vj;
      pb[j] -= lr * (mj + vj);
    }
  }
  for (; i < hi; ++i) {
    float mi = b1 * m[i] + (1.0f - b1) * g[i];
    float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * (mi + vi);
  }
}

static void run_kernel(struct shared* sh, int id) {
  size_t lo, hi;
  slice(sh, id, &lo, &hi);
  float** x = sh->arr;
  switch (sh->kernel) {
    case kCopy:
      copy_range(x[0], x[1], lo, hi);
      break;
    case kTriad:
      triad_range(x[0], x[1], x[2], lo, hi);
      break;
    case kAdam:
      adam_range(x[0], x[1], x[2], x[3], lo, hi);
      break;
  }
}

static void first_touch(struct shared* sh, int id) {
  size_t lo, hi;
  slice(sh, id, &lo, &hi);
  for (int k = 0; k < 4; ++k) {
    for (size_t i = lo; i < hi; ++i) sh->arr[k][i] = 1.0f + (float)(k + 1) * 1e-3f;
  }
}

static void* worker_main(void* p) {
  struct worker* w = p;
  struct shared* sh = w->sh;
  first_touch(sh, w->id);
  pthread_barrier_wait(&sh->done);
  for (;;) {
    pthread_barrier_wait(&sh->start);
    if (sh->kernel < 0) return NULL;
    run_kernel(sh, w->id);
    pthread_barrier_wait(&sh->done);
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One timed run of `kernel` by every thread (thread 0 is the caller). */
static double timed_run(struct shared* sh, int kernel) {
  sh->kernel = kernel;
  double t0 = now_s();
  pthread_barrier_wait(&sh->start);
  run_kernel(sh, 0);
  pthread_barrier_wait(&sh->done);
  return now_s() - t0;
}

static int cmp_double(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

static int parse_list(const char* s, long* out, int max) {
  int n = 0;
  char* copy = strdup(s);
  for (char* tok = strtok(copy, ","); tok != NULL && n < max; tok = strtok(NULL, ",")) {
    char* end;
    long v = strtol(tok, &end, 10);
    if (*end != '\0' || v <= 0) {
      free(copy);
      return -1;
    }
    out[n++] = v;
  }
  free(copy);
  return n;
}

static int usage(const char* msg) {
  fprintf(stderr, "membw: %s\nusage: membw [-t THREADS] [-s SIZES_MIB] [-n SAMPLES] "
                  "[-k copy,triad,adam]\n", msg);
  return 2;
}

int main(int argc, char** argv) {
  int threads = 1, samples = 10;
  long sizes[16] = {64};
  int nsizes = 1;
  int want[kKernels] = {1, 1, 1};
  for (int i = 1; i < argc; ++i) {
    const char* opt = argv[i];
    if (i + 1 >= argc) return usage("an option needs a value");
    const char* val = argv[++i];
    if (strcmp(opt, "-t") == 0) {
      threads = atoi(val);
      if (threads < 1 || threads > 256) return usage("-t: 1 to 256 threads");
    } else if (strcmp(opt, "-n") == 0) {
      samples = atoi(val);
      if (samples < 1) return usage("-n: at least one sample");
    } else if (strcmp(opt, "-s") == 0) {
      nsizes = parse_list(val, sizes, 16);
      if (nsizes <= 0) return usage("-s: sizes in MiB, e.g. 1,64");
    } else if (strcmp(opt, "-k") == 0) {
      memset(want, 0, sizeof(want));
      char* copy = strdup(val);
      for (char* tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ",")) {
        int found = 0;
        for (int k = 0; k < kKernels; ++k) {
          if (strcmp(tok, kNames[k]) == 0) want[k] = found = 1;
        }
        if (!found) return usage("-k: kernels are copy, triad, adam");
      }
      free(copy);
    } else {
      return usage("unknown option");
    }
  }

  printf("membw: %d thread(s), %d samples; S = one float32 array; GB/s = 1e9 B/s, STREAM "
         "counting (copy 2S, triad 3S, adam 7S = 28 B/param)\n", threads, samples);
  printf("%-6s %8s %9s %9s %9s %12s\n", "kernel", "S_MiB", "min", "median", "max", "Mparam/s");
  double* t = calloc((size_t)samples, sizeof(double));
  for (int si = 0; si < nsizes; ++si) {
    struct shared sh;
    memset(&sh, 0, sizeof(sh));
    sh.n = (size_t)sizes[si] * 1024 * 1024 / sizeof(float);
    sh.threads = threads;
    if (sh.n < (size_t)threads) return usage("-s: size too small for the thread count");
    for (int k = 0; k < 4; ++k) {
      if (posix_memalign((void**)&sh.arr[k], 4096, sh.n * sizeof(float)) != 0) {
        fprintf(stderr, "membw: cannot allocate 4 x %ld MiB\n", sizes[si]);
        return 1;
      }
    }
    pthread_barrier_init(&sh.start, NULL, (unsigned)threads);
    pthread_barrier_init(&sh.done, NULL, (unsigned)threads);
    struct worker* w = calloc((size_t)threads, sizeof(struct worker));
    for (int i = 1; i < threads; ++i) {
      w[i].sh = &sh;
      w[i].id = i;
      if (pthread_create(&w[i].tid, NULL, worker_main, &w[i]) != 0) {
        fprintf(stderr, "membw: pthread_create: %s\n", strerror(errno));
        return 1;
      }
    }
    first_touch(&sh, 0);
    pthread_barrier_wait(&sh.done);

    for (int k = 0; k < kKernels; ++k) {
      if (!want[k]) continue;
      timed_run(&sh, k); /* warm-up */
      timed_run(&sh, k);
      for (int s = 0; s < samples; ++s) t[s] = timed_run(&sh, k);
      qsort(t, (size_t)samples, sizeof(double), cmp_double);
      double bytes = (double)kCounted[k] * (double)sh.n * sizeof(float);
      double med = samples % 2 ? t[samples / 2] : 0.5 * (t[samples / 2 - 1] + t[samples / 2]);
      /* min GB/s is the slowest sample. */
      printf("%-6s %8ld %9.2f %9.2f %9.2f", kNames[k], sizes[si], bytes / t[samples - 1] / 1e9,
             bytes / med / 1e9, bytes / t[0] / 1e9);
      if (k == kAdam) {
        printf(" %12.0f", (double)sh.n / med / 1e6);
      } else {
        printf(" %12s", "-");
      }
      printf("\n");
      fflush(stdout);
    }

    sh.kernel = -1;
    pthread_barrier_wait(&sh.start);
    for (int i = 1; i < threads; ++i) pthread_join(w[i].tid, NULL);
    /* Keep the results observable so no kernel is optimised away. */
    volatile float sink = sh.arr[0][sh.n / 2] + sh.arr[1][sh.n / 3] + sh.arr[2][1] + sh.arr[3][0];
    (void)sink;
    free(w);
    for (int k = 0; k < 4; ++k) free(sh.arr[k]);
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.done);
  }
  free(t);
  return 0;
}
