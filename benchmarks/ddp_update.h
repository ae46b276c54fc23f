/* What a DDP step does after its all-reduce, for the baselines of
 * benchmarks/run_datapath (mpi_allreduce's and gloo_allreduce's
 * "allreduce-<opt>" modes): every rank turns the all-reduced sum into the
 * mean and runs the optimizer's update over the whole vector, with the very
 * kernels Tessel's shard servers run (core/reduce.h ReduceAndApply: the mean
 * and the update fused in one pass, torch's update rules). So the baseline's
 * step and Tessel's step do the same arithmetic: Tessel's servers each update
 * their share, every DDP rank updates everything.
 *
 * C linkage, so the C MPI baseline and the Gloo baseline (built outside Bazel
 * against libtessel_ddp_update.so) share it.
 *
 * Example:
 *   struct ddp_update* u = ddp_update_new("adam", n);    // NULL: unknown kind
 *   MPI_Allreduce(grad, sum, n, MPI_FLOAT, MPI_SUM, comm);
 *   ddp_update_apply(u, sum, world);                      // params updated
 *   ddp_update_free(u); */
#ifndef TESSEL_BENCHMARKS_DDP_UPDATE_H_
#define TESSEL_BENCHMARKS_DDP_UPDATE_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ddp_update;

/* Parameters, optimizer state (initialised as torch does) and the step count
 * for n floats, updated by `kind`: "sgd" (lr 1e-3, no momentum) or "adam"
 * (lr 1e-3, torch's defaults): the settings of datapath_bench's Tessel
 * contenders. NULL for another kind or n == 0. */
struct ddp_update* ddp_update_new(const char* kind, size_t n);

/* One step: params -= update(sum / world), the mean divided as Tessel's
 * servers divide it (ReduceMean's rule). `sum` holds n floats. */
void ddp_update_apply(struct ddp_update* u, const float* sum, int world);

void ddp_update_free(struct ddp_update* u);

#ifdef __cplusplus
}
#endif

#endif /* TESSEL_BENCHMARKS_DDP_UPDATE_H_ */
