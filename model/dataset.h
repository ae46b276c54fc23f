// A generated classification data set for the Tessel demo, and the rule that
// cuts it into per-rank batches.
//
// MakeClusters draws Gaussian blobs around random class centres (two blobs per
// class), with overlap and a little label noise, so that a linear model is not
// enough to be perfect and no model reaches 100% on held-out rows: a
// {64, 256, 256, 10} MLP gets above 85% after a few hundred Adam steps.
// Everything is computed with a PRNG defined in this library, so a seed gives
// the same bytes on every platform and standard library.
//
// Batch implements the data-parallel contract: global batch `step` is
// world_size * per_rank_batch consecutive rows (wrapping around the end of the
// data set), and rank r gets the r-th consecutive slice of it. Concatenating
// the slices of ranks 0..world_size-1 gives exactly the global batch a single
// process would use, so a distributed run sees the same data as a single one.
//
// Example:
//   Dataset all = MakeClusters(5120, 64, 10, /*seed=*/1);
//   DatasetSplit split = Split(all, 4096);
//   for (int64_t step = 0; step < 300; ++step) {
//     Dataset b = Batch(split.train, step, rank, world_size, 32);
//     model.LossAndGrad(params, b.x.data(), b.y.data(), 32, grads);
//   }
//
// Thread safety: the functions are pure; a Dataset is a plain value.

#ifndef TESSEL_MODEL_DATASET_H_
#define TESSEL_MODEL_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessel::model {

struct Dataset {
  int num_features = 0;
  int num_classes = 0;
  std::vector<float> x;    // Row-major [size(), num_features].
  std::vector<int32_t> y;  // [size()], each in [0, num_classes).

  size_t size() const { return y.size(); }
};

// n rows of num_features features in num_classes classes. Rows are i.i.d. (no
// ordering by class), so any run of consecutive rows is a fair sample and a
// prefix/suffix split is a fair train/test split, and the first n rows for a
// seed do not depend on how many rows are asked for. Features have roughly
// unit variance. Requires n >= 0, num_features >= 1, num_classes >= 2.
Dataset MakeClusters(int n, int num_features, int num_classes, uint64_t seed);

struct DatasetSplit {
  Dataset train;
  Dataset test;
};

// The first num_train rows and the rest. Requires num_train <= data.size().
DatasetSplit Split(const Dataset& data, size_t num_train);

// Rank `rank`'s rows of global batch `step`: rows
//   (step * world_size * per_rank_batch + rank * per_rank_batch + i) mod n
// for i in [0, per_rank_batch). A global batch larger than the data set
// repeats rows. Requires data.size() > 0, step >= 0, world_size >= 1,
// 0 <= rank < world_size, per_rank_batch >= 1.
Dataset Batch(const Dataset& data, int64_t step, int rank, int world_size, int per_rank_batch);

}  // namespace tessel::model

#endif  // TESSEL_MODEL_DATASET_H_
