/* triad_steps: this machine's memory bandwidth as a run_datapath contender,
 * so the physical limit is measured in the same run, interleaved with the
 * contenders it bounds, and with the same statistics (per-run median, p90,
 * the spread of the per-run medians).
 *
 * For each size S MiB: three float32 arrays of S bytes each, split evenly
 * over T threads (each first-touches its own slice); a "step" is one triad
 * a[i] = b[i] + 3 c[i] over the whole arrays (3 S bytes moved, as STREAM
 * counts it: reads of b and c, the write of a), timed between two barriers
 * with CLOCK_MONOTONIC; 3 warm-up steps, then ITERS timed. The server's
 * SGD update reads and writes about as much per byte of gradient, so the
 * triad of the gradient's size is the floor a step that moves it cannot
 * beat on these cores.
 *
 * Prints the table mpi_allreduce.c prints (bench_common.py's ROW; algbw is
 * 3 S / t, busbw the same), and "p90 S MS".
 *
 * Usage: triad_steps THREADS SIZES_MIB ITERS     e.g. triad_steps 2 1,16,64 10
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct shared {
  float *a, *b, *c;
  size_t n;
  int threads;
  int stop;
  pthread_barrier_t start, done;
};

struct worker {
  struct shared* sh;
  int id;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void slice(const struct shared* sh, int id, size_t* lo, size_t* hi) {
  const size_t per = sh->n / (size_t)sh->threads;
  *lo = per * (size_t)id;
  *hi = id == sh->threads - 1 ? sh->n : *lo + per;
}

/* Blocks of 16 with a fixed trip count: vectorized at -O2 (see membw.c). */
static void triad(float* restrict a, const float* restrict b, const float* restrict c, size_t lo,
                  size_t hi) {
  size_t i = lo;
  for (; i + 16 <= hi; i += 16) {
    for (int j = 0; j < 16; ++j) a[i + j] = b[i + j] + 3.0f * c[i + j];
  }
  for (; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
}

static void* run(void* arg) {
  struct worker* w = arg;
  struct shared* sh = w->sh;
  size_t lo, hi;
  slice(sh, w->id, &lo, &hi);
  for (size_t i = lo; i < hi; ++i) {
    sh->a[i] = 1.0f;
    sh->b[i] = 2.0f;
    sh->c[i] = 3.0f;
  }
  for (;;) {
    pthread_barrier_wait(&sh->start);
    if (sh->stop) return NULL;
    triad(sh->a, sh->b, sh->c, lo, hi);
    pthread_barrier_wait(&sh->done);
  }
}

static int by_value(const void* x, const void* y) {
  const double a = *(const double*)x, b = *(const double*)y;
  return a < b ? -1 : a > b;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s THREADS SIZES_MIB ITERS (e.g. 2 1,16,64 10)\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[1]), iters = atoi(argv[3]);
  if (threads < 1 || threads > 256 || iters < 1) {
    fprintf(stderr, "triad_steps: THREADS must be 1-256 and ITERS positive\n");
    return 2;
  }
  printf(
      "# triad a = b + 3 c over 3 arrays of S bytes, %d thread(s); step = barrier, the triad, "
      "barrier; algbw = 3 S / t\n",
      threads);
  printf("%-8s %10s %10s %10s %10s %10s\n", "S_MiB", "t_med_ms", "t_min_ms", "t_max_ms",
         "algbw_GBs", "busbw_GBs");
  char* sizes = strdup(argv[2]);
  for (char* tok = strtok(sizes, ","); tok != NULL; tok = strtok(NULL, ",")) {
    const int mib = atoi(tok);
    if (mib < 1) {
      fprintf(stderr, "triad_steps: bad size '%s'\n", tok);
      return 2;
    }
    struct shared sh;
    memset(&sh, 0, sizeof(sh));
    sh.n = ((size_t)mib << 20) / sizeof(float);
    sh.threads = threads;
    sh.a = aligned_alloc(64, sh.n * sizeof(float));
    sh.b = aligned_alloc(64, sh.n * sizeof(float));
    sh.c = aligned_alloc(64, sh.n * sizeof(float));
    if (sh.a == NULL || sh.b == NULL || sh.c == NULL) {
      fprintf(stderr, "triad_steps: cannot allocate 3 x %d MiB\n", mib);
      return 1;
    }
    pthread_barrier_init(&sh.start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&sh.done, NULL, (unsigned)threads + 1);
    struct worker* ws = calloc((size_t)threads, sizeof(*ws));
    pthread_t* tids = calloc((size_t)threads, sizeof(*tids));
    for (int t = 0; t < threads; ++t) {
      ws[t].sh = &sh;
      ws[t].id = t;
      pthread_create(&tids[t], NULL, run, &ws[t]);
    }
    double* t_s = calloc((size_t)iters, sizeof(double));
    for (int k = 0; k < iters + 3; ++k) {
      const double t0 = now_s();
      pthread_barrier_wait(&sh.start);
      pthread_barrier_wait(&sh.done);
      if (k >= 3) t_s[k - 3] = now_s() - t0;
    }
    sh.stop = 1;
    pthread_barrier_wait(&sh.start);
    for (int t = 0; t < threads; ++t) pthread_join(tids[t], NULL);
    qsort(t_s, (size_t)iters, sizeof(double), by_value);
    const double med = t_s[iters / 2];
    const double gbs = 3.0 * (double)((size_t)mib << 20) / med / 1e9;
    printf("%-8d %10.2f %10.2f %10.2f %10.3f %10.3f\n", mib, med * 1e3, t_s[0] * 1e3,
           t_s[iters - 1] * 1e3, gbs, gbs);
    printf("p90 %d %.3f\n", mib, t_s[(9 * iters + 9) / 10 - 1] * 1e3);
    fflush(stdout);
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.done);
    free(t_s);
    free(tids);
    free(ws);
    free(sh.a);
    free(sh.b);
    free(sh.c);
  }
  free(sizes);
  return 0;
}
