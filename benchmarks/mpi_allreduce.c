/* Open MPI baselines for benchmarks/run_datapath: float32 sum over S bytes,
 * timed as every side of that comparison is: MPI_Barrier, then the
 * collective, and the iteration's time is the maximum over ranks. The median
 * (min, max) over iterations is printed with the same columns as
 * datapath_bench.
 *   allreduce  MPI_Allreduce of S bytes.
 *   rs_ag      MPI_Reduce_scatter_block of S bytes then MPI_Allgather back to
 *              S bytes: the same two phases as a parameter server's push
 *              (reduce-scatter) and pull (all-gather), in one timed window.
 *   allreduce-sgd, allreduce-adam
 *              MPI_Allreduce, then every rank turns the sum into the mean and
 *              runs the optimizer's update over the whole vector, with the
 *              kernels Tessel's servers run (ddp_update.h): what a DDP step
 *              does, timed in the same window.
 * After each size's row rank 0 prints the CPU every rank spent per timed
 * step, summed ("cpu S_MiB MS"), and with a device (DEV, e.g. eth0 in a
 * namespace used as a host) each rank's device bytes per step ("link S_MiB
 * RANK RX TX"); bench_probe.h says how.
 * Usage: mpirun -np W mpi_allreduce SIZES_MIB ITERS
 *          [allreduce|rs_ag|allreduce-sgd|allreduce-adam] [DEV] */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchmarks/bench_probe.h"
#include "benchmarks/ddp_update.h"

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* sizes = argc > 1 ? argv[1] : "1,16,64";
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  const char* mode = argc > 3 ? argv[3] : "allreduce";
  const char* dev = argc > 4 ? argv[4] : "-";
  int rs_ag = strcmp(mode, "rs_ag") == 0;
  /* allreduce-<opt>: the optimizer's name after the dash */
  const char* update = strncmp(mode, "allreduce-", 10) == 0 ? mode + 10 : NULL;
  struct ddp_update* probe = update ? ddp_update_new(update, 1) : NULL;
  int known = rs_ag || strcmp(mode, "allreduce") == 0 || probe != NULL;
  ddp_update_free(probe);
  if (iters < 1 || !known) {
    if (rank == 0) {
      fprintf(stderr,
              "usage: mpi_allreduce SIZES_MIB ITERS "
              "[allreduce|rs_ag|allreduce-sgd|allreduce-adam] [DEV]\n");
    }
    MPI_Finalize();
    return 2;
  }
  char* copy = strdup(sizes);
  if (rank == 0) {
    printf("# MPI %s float32 sum%s%s, %d ranks; step = barrier, then the slowest rank\n",
           rs_ag ? "Reduce_scatter_block + Allgather" : "Allreduce",
           update ? ", then the mean and the update on every rank: " : "", update ? update : "", n);
    printf("%-8s %10s %10s %10s %10s %10s\n", "S_MiB", "t_med_ms", "t_min_ms", "t_max_ms",
           "algbw_GBs", "busbw_GBs");
  }
  for (char* tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    int mib = atoi(tok);
    size_t count = (size_t)mib << 18;
    size_t part = count / n;
    float* in = malloc(count * sizeof(float));
    float* out = malloc(count * sizeof(float));
    float* mine = malloc((part > 0 ? part : 1) * sizeof(float));
    for (size_t i = 0; i < count; i++) in[i] = 1e-3f * (rank + 1);
    struct ddp_update* u = update ? ddp_update_new(update, count) : NULL;
    double* t = malloc(sizeof(double) * iters);
    struct bench_sample start = {0, 0, 0};
    for (int i = 0; i < 3 + iters; i++) {
      MPI_Barrier(MPI_COMM_WORLD);
      if (i == 3) start = bench_sample_now(dev);
      double t0 = MPI_Wtime();
      if (rs_ag) {
        MPI_Reduce_scatter_block(in, mine, (int)part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allgather(mine, (int)part, MPI_FLOAT, out, (int)part, MPI_FLOAT, MPI_COMM_WORLD);
      } else {
        MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (u) ddp_update_apply(u, out, n);
      }
      double dt = MPI_Wtime() - t0, mx;
      MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (i >= 3) t[i - 3] = mx;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    struct bench_sample end = bench_sample_now(dev);
    double mine3[3] = {(end.cpu_s - start.cpu_s) / iters,
                       start.rx < 0 ? -1 : (end.rx - start.rx) / iters,
                       start.tx < 0 ? -1 : (end.tx - start.tx) / iters};
    double* all3 = malloc(sizeof(double) * 3 * n);
    MPI_Gather(mine3, 3, MPI_DOUBLE, all3, 3, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      qsort(t, iters, sizeof(double), cmp);
      double med = t[iters / 2], algbw = (double)count * 4 / med / 1e9;
      printf("%-8d %10.2f %10.2f %10.2f %10.3f %10.3f\n", mib, med * 1e3, t[0] * 1e3,
             t[iters - 1] * 1e3, algbw, algbw * 2.0 * (n - 1) / n);
      double cpu = 0;
      for (int r = 0; r < n; r++) cpu += all3[3 * r];
      printf("cpu %d %.3f\n", mib, cpu * 1e3);
      /* p90 of the steps, nearest rank (bench_common.py's P90) */
      printf("p90 %d %.3f\n", mib, t[(9 * iters + 9) / 10 - 1] * 1e3);
      for (int r = 0; r < n && all3[1] >= 0; r++) {
        printf("link %d %d %.0f %.0f\n", mib, r, all3[3 * r + 1], all3[3 * r + 2]);
      }
      fflush(stdout);
    }
    free(in);
    free(out);
    free(mine);
    free(t);
    free(all3);
    ddp_update_free(u);
  }
  free(copy);
  MPI_Finalize();
  return 0;
}
