// softmax_regression: a user's own model, trained data-parallel through the
// Tessel worker SDK (worker/worker.h, worker/worker_flags.h) and nothing else.
//
// The model is multinomial logistic regression, p(y | x) = softmax(W x + b),
// written out below with its own forward and backward. The data are Gaussian
// blobs, one per class, generated from --seed, so every worker process holds
// the same training set. Each step every worker draws its own batch, writes
// its gradient into worker->grads() and calls Step(): the shard servers
// average the workers' gradients, run the optimizer (--optimizer, --lr, ...)
// and hand back the new parameters in worker->params().
//
// Batches: a step's global batch is world x micro_batches shards of --batch
// samples; shard s = rank * micro_batches + m draws its samples from a
// generator seeded by (seed, step, s) alone. So --world=2 and --world=1
// --micro_batches=2 see the same samples, and since the servers average
// ranks exactly as Worker::AccumulateGradients averages micro-batches
// ((g0 + g1) / 2 in float), both end with bitwise equal parameters
// (examples/softmax_regression_test.sh checks it).
//
// How to run it against a registry and shard servers: examples/README.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "examples/npy_out.h"
#include "runtime/cli.h"
#include "worker/train_flags.h"  // --steps and --micro_batches
#include "worker/worker.h"
#include "worker/worker_flags.h"

ABSL_FLAG(std::string, job, "softmax", "job name: every worker of the job passes the same");
ABSL_FLAG(int, rank, 0, "this worker's rank, in [0, --world)");
ABSL_FLAG(int, world, 1, "number of worker processes");
ABSL_FLAG(int, servers, 0, "shard servers to use (0 = every server in --pool)");
ABSL_FLAG(int, classes, 4, "classes (one Gaussian blob each)");
ABSL_FLAG(int, dim, 16, "features per sample");
ABSL_FLAG(int, samples, 4096, "size of the training set");
ABSL_FLAG(int, batch, 32, "samples per worker per micro-batch");
ABSL_FLAG(uint64_t, seed, 1, "seed of the data set and of every batch");
ABSL_FLAG(int, log_every, 50, "rank 0 prints the training-set loss every N steps");
ABSL_FLAG(std::string, out, "", "rank 0 writes the final parameters here (.npy, float32)");

namespace {

struct Dataset {
  int dim = 0;
  std::vector<float> x;  // size() x dim, row-major
  std::vector<int> y;
  int size() const { return static_cast<int>(y.size()); }
  const float* row(int i) const { return x.data() + static_cast<size_t>(i) * dim; }
};

// Class c's centre has N(0, 1) coordinates; its samples add N(0, 1) noise.
Dataset MakeBlobs(int classes, int dim, int samples, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> centres(static_cast<size_t>(classes) * dim);
  for (float& c : centres) c = normal(rng);
  Dataset d;
  d.dim = dim;
  d.x.resize(static_cast<size_t>(samples) * dim);
  d.y.resize(samples);
  for (int i = 0; i < samples; ++i) {
    d.y[i] = i % classes;
    for (int j = 0; j < dim; ++j) d.x[i * dim + j] = centres[d.y[i] * dim + j] + normal(rng);
  }
  return d;
}

// The samples of shard `shard` of step `step`: a function of these alone.
std::vector<int> Batch(uint64_t seed, int64_t step, int shard, int batch, int samples) {
  std::seed_seq seq{seed, seed >> 32, static_cast<uint64_t>(step), static_cast<uint64_t>(shard)};
  std::mt19937_64 rng(seq);
  std::vector<int> rows(batch);
  for (int& r : rows) r = static_cast<int>(rng() % static_cast<uint64_t>(samples));
  return rows;
}

// logits = W x + b; loss = mean cross-entropy. The parameters are one flat
// vector, the SDK's: W (classes x dim, row-major), then b.
class SoftmaxRegression {
 public:
  SoftmaxRegression(int classes, int dim) : classes_(classes), dim_(dim) {}

  std::vector<tessel::TensorDesc> Tensors() const {
    return {{"linear.weight", {classes_, dim_}}, {"linear.bias", {classes_}}};
  }
  size_t num_params() const { return static_cast<size_t>(classes_) * (dim_ + 1); }

  // The mean loss over `rows`. If `grad` is not null, writes the gradient of
  // that loss (num_params() floats) into it; if `correct` is not null,
  // counts the rows whose most likely class is their label.
  float Loss(const float* params, const Dataset& data, const std::vector<int>& rows, float* grad,
             int* correct) const {
    const float* w = params;
    const float* b = params + classes_ * dim_;
    if (grad != nullptr) std::fill(grad, grad + num_params(), 0.f);
    if (correct != nullptr) *correct = 0;
    const float scale = 1.f / static_cast<float>(rows.size());
    std::vector<float> p(classes_);
    double loss = 0;
    for (int i : rows) {
      const float* x = data.row(i);
      const int y = data.y[i];
      for (int c = 0; c < classes_; ++c) {
        float z = b[c];
        for (int j = 0; j < dim_; ++j) z += w[c * dim_ + j] * x[j];
        p[c] = z;
      }
      const int best = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
      if (correct != nullptr && best == y) ++*correct;
      const float top = p[best];
      float sum = 0;
      for (float& v : p) sum += (v = std::exp(v - top));
      for (float& v : p) v /= sum;
      loss -= std::log(std::max(p[y], 1e-30f));
      if (grad == nullptr) continue;
      for (int c = 0; c < classes_; ++c) {  // d loss / d logit c = p_c - [c == y]
        const float d = (p[c] - (c == y ? 1.f : 0.f)) * scale;
        for (int j = 0; j < dim_; ++j) grad[c * dim_ + j] += d * x[j];
        grad[classes_ * dim_ + c] += d;
      }
    }
    return static_cast<float>(loss / static_cast<double>(rows.size()));
  }

 private:
  int classes_;
  int dim_;
};

int UsageError(absl::string_view message) {
  std::fprintf(stderr, "softmax_regression: %s (see --help)\n", std::string(message).c_str());
  return 2;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "softmax_regression: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains softmax regression on synthetic Gaussian blobs, data-parallel over Tessel shard "
      "servers.\n\n"
      "Usage: softmax_regression --registry=HOST:PORT --rank=R --world=W [--job=softmax]\n"
      "         [--steps=1500] [--batch=32] [--micro_batches=1] [--seed=1] [--out=FINAL.npy]\n"
      "         [--strategy=zero2|zero1|ddp] [--optimizer=adam --lr=1e-3 ...] [--ucx_tls=...]\n"
      "Start one process per rank, each with the same flags but --rank. Model flags: --classes,\n"
      "--dim, --samples. Rank 0 prints the loss on the training set every --log_every steps,\n"
      "the final accuracy, and writes the parameters to --out. See examples/README.md.");
  std::vector<char*> args = tessel::ParseFlags(argc, argv);
  if (args.size() > 1) return UsageError(absl::StrCat("unexpected argument '", args[1], "'"));

  const int classes = absl::GetFlag(FLAGS_classes), dim = absl::GetFlag(FLAGS_dim);
  const int samples = absl::GetFlag(FLAGS_samples), batch = absl::GetFlag(FLAGS_batch);
  const int steps = absl::GetFlag(FLAGS_steps), log_every = absl::GetFlag(FLAGS_log_every);
  const int micro_batches = absl::GetFlag(FLAGS_micro_batches);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (absl::GetFlag(FLAGS_registry).empty()) return UsageError("--registry=HOST:PORT is required");
  if (absl::GetFlag(FLAGS_world) < 1) return UsageError("--world must be >= 1");
  if (absl::GetFlag(FLAGS_rank) < 0 || absl::GetFlag(FLAGS_rank) >= absl::GetFlag(FLAGS_world)) {
    return UsageError("--rank must be in [0, --world)");
  }
  if (classes < 2 || dim < 1) return UsageError("--classes must be >= 2 and --dim >= 1");
  if (samples < classes) return UsageError("--samples must be >= --classes");
  if (batch < 1 || micro_batches < 1) return UsageError("--batch and --micro_batches must be >= 1");
  if (steps < 0 || log_every < 1) return UsageError("--steps must be >= 0 and --log_every >= 1");

  // The SDK reads its own flags (--registry, --strategy, --optimizer, --lr,
  // --ucx_tls, ...); identity is this program's.
  absl::StatusOr<tessel::WorkerOptions> options = tessel::WorkerOptionsFromFlags();
  if (!options.ok()) return UsageError(options.status().message());
  options->job = absl::GetFlag(FLAGS_job);
  options->rank = absl::GetFlag(FLAGS_rank);
  options->world_size = absl::GetFlag(FLAGS_world);
  options->num_servers = absl::GetFlag(FLAGS_servers);
  options->shuffle_seed = tessel::ShuffleSeedFor(options->rank);
  if (options->strategy == tessel::Strategy::kFsdp) {
    return UsageError("this example writes one full gradient: --strategy=zero2, zero1 or ddp");
  }
  if (options->precision != tessel::Precision::kFp32) {
    return UsageError("this example trains in fp32 (--precision=fp32)");
  }
  if (absl::Status s = tessel::ValidateWorkerOptions(*options); !s.ok()) {
    return UsageError(s.message());
  }

  const Dataset data = MakeBlobs(classes, dim, samples, seed);
  const SoftmaxRegression model(classes, dim);
  std::vector<int> all(samples);
  for (int i = 0; i < samples; ++i) all[i] = i;
  auto report = [&](const char* what, int64_t step, const float* params) {
    int correct = 0;
    const float loss = model.Loss(params, data, all, nullptr, &correct);
    std::printf("%s %lld  loss %.4f  accuracy %.2f%%\n", what, static_cast<long long>(step), loss,
                100.0 * correct / samples);
    std::fflush(stdout);
  };

  absl::StatusOr<std::unique_ptr<tessel::Worker>> connected = tessel::Worker::Connect(*options);
  if (!connected.ok()) return Fail(connected.status());
  tessel::Worker& worker = **connected;
  // Every rank starts from the same parameters: zeros (the loss is convex).
  const std::vector<float> init(model.num_params(), 0.f);
  if (absl::Status s = worker.RegisterLayout(model.Tensors(), init); !s.ok()) return Fail(s);

  std::vector<float> micro_grad(micro_batches > 1 ? model.num_params() : 0);
  // step() is the SDK's: Step() advances it, Recover() may take it back. The
  // batches are a function of the step, so the loop simply goes on from it.
  while (worker.step() < steps) {
    const int64_t step = worker.step();
    const int rank = worker.rank();  // an elastic recovery renumbers ranks
    const float* params = worker.params().data();
    if (rank == 0 && step % log_every == 0) report("step", step, params);
    for (int m = 0; m < micro_batches; ++m) {
      const std::vector<int> rows = Batch(seed, step, rank * micro_batches + m, batch, samples);
      if (micro_batches == 1) {
        model.Loss(params, data, rows, worker.grads().data(), nullptr);
      } else {  // Step() pushes the mean over the micro-batches
        model.Loss(params, data, rows, micro_grad.data(), nullptr);
        if (absl::Status s = worker.AccumulateGradients(micro_grad); !s.ok()) return Fail(s);
      }
    }
    absl::Status s = worker.Step();
    if (tessel::Worker::IsRecoverable(s)) {  // a worker or server was lost (--recover)
      std::fprintf(stderr, "softmax_regression: %s; recovering\n",
                   std::string(s.message()).c_str());
      s = worker.Recover();  // back to the latest checkpoint (--checkpoint_every_steps)
    }
    if (!s.ok()) return Fail(s);
  }

  if (worker.rank() == 0) {
    report("final: step", worker.step(), worker.params().data());
    const std::string out = absl::GetFlag(FLAGS_out);
    if (!out.empty()) {
      if (absl::Status s = examples::WriteNpy(out, worker.params()); !s.ok()) return Fail(s);
      std::printf("wrote %zu parameters to %s\n", worker.params().size(), out.c_str());
    }
  }
  return 0;
}
