/* MPI_Allreduce baseline for benchmarks/run_datapath.sh: float32 sum over
 * S bytes, median over iterations of (max over ranks) time after a barrier,
 * printed with the same columns as datapath_bench.
 * Usage: mpirun -np W mpi_allreduce SIZES_MIB ITERS */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  char* copy = strdup(sizes);
  if (rank == 0) {
    printf("# MPI_Allreduce float32 sum, %d ranks\n", n);
    printf("%-8s %10s %10s %10s %10s %10s\n", "S_MiB", "t_med_ms", "t_min_ms", "t_max_ms",
           "algbw_GBs", "busbw_GBs");
  }
  for (char* tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    int mib = atoi(tok);
    size_t count = (size_t)mib << 18;
    float* in = malloc(count * sizeof(float));
    float* out = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) in[i] = 1e-3f * (rank + 1);
    double* t = malloc(sizeof(double) * iters);
    for (int i = 0; i < 3 + iters; i++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      double dt = MPI_Wtime() - t0, mx;
      MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (i >= 3) t[i - 3] = mx;
    }
    if (rank == 0) {
      qsort(t, iters, sizeof(double), cmp);
      double med = t[iters / 2], algbw = (double)count * 4 / med / 1e9;
      printf("%-8d %10.2f %10.2f %10.2f %10.3f %10.3f\n", mib, med * 1e3, t[0] * 1e3,
             t[iters - 1] * 1e3, algbw, algbw * 2.0 * (n - 1) / n);
    }
    free(in);
    free(out);
    free(t);
  }
  free(copy);
  MPI_Finalize();
  return 0;
}
