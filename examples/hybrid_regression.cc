// hybrid_regression: a user's own C++ model trained with hybrid data x tensor
// x pipeline parallelism through the SDK (worker/hybrid.h's HybridSession,
// core/partition.h, worker/pipeline_stage.h): the model describes its
// tensors once and supplies forward and backward; it never builds a message.
//
// The model is a two-layer regression network,
//   y = W2 tanh(W1 x + b1) + b2,   loss = 0.5 * mean over rows of |y - target|^2,
// fitted to a random "teacher" network of the same shape (--seed). Its cut:
//   hidden.weight [H, D]  split along dim 0 (column-parallel)   stage 0
//   hidden.bias   [H]     split along dim 0                     stage 0
//   out.weight    [O, H]  split along dim 1 (row-parallel)      stage pp-1
//   out.bias      [O]     replicated                            stage pp-1
// so tensor rank t computes its H/tp hidden units, and the output is the sum
// of the ranks' partial products in rank order, rank 0's starting from the
// bias (PipelineStage::SumOverTensorGroup). With pp = 2 the hidden
// activations cross the stage boundary split, rank t to rank t.
//
// Worker mode: --registry, --rank, --world = dp*tp*pp, --dp/--tp/--pp,
// --micro_batches; each replica takes --batch rows per step, as micro-batches
// of batch/micro_batches rows, and the partitions' jobs average the replicas'
// gradients and run the optimizer on the shard servers. Rank 0 writes the
// reassembled final parameters to --out.
//
// --reference: the same training in this one process, no cluster: per step,
// per replica and micro-batch, each tensor rank's share computed with the
// same functions and the output's partial sums added in rank order; the
// replicas' mean as the servers take it ((g_0 + g_1 + ...) / dp) and plain
// SGD (--optimizer=sgd, no momentum or weight decay) as the servers apply
// it. Its --out equals the hybrid run's bit for bit
// (examples/hybrid_regression_test.sh checks it); with --tp=1 it is the
// unsplit model.
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
#include "absl/types/span.h"
#include "core/partition.h"
#include "core/status_macros.h"
#include "examples/npy_out.h"
#include "runtime/cli.h"
#include "worker/hybrid.h"
#include "worker/pipeline_stage.h"
#include "worker/train_flags.h"  // --steps, --micro_batches, --optimizer, --lr
#include "worker/worker_flags.h"

ABSL_FLAG(std::string, job, "hybrid-regression", "base job name (partitions: <job>.p<p>.t<t>)");
ABSL_FLAG(int, rank, 0, "this process's global rank, in [0, --world)");
ABSL_FLAG(int, world, 1, "number of processes: dp*tp*pp");
ABSL_FLAG(int, dp, 1, "data-parallel replicas");
ABSL_FLAG(int, tp, 1, "tensor-parallel ranks per stage (divides --hidden)");
ABSL_FLAG(int, pp, 1, "pipeline stages (1 or 2: the model has two layers)");
ABSL_FLAG(int, servers, 0, "shard servers to use (0 = every server in --pool)");
ABSL_FLAG(int, inputs, 8, "input features D");
ABSL_FLAG(int, hidden, 32, "hidden units H");
ABSL_FLAG(int, outputs, 2, "outputs O");
ABSL_FLAG(int, batch, 16, "rows per replica per step");
ABSL_FLAG(uint64_t, seed, 1, "seed of the teacher, the initial parameters and every batch");
ABSL_FLAG(int, log_every, 50, "print the loss every N steps");
ABSL_FLAG(bool, reference, false, "train in this one process instead (no cluster)");
ABSL_FLAG(std::string, out, "", "rank 0 (or the reference) writes the final parameters (.npy)");

namespace {

using tessel::TensorSplit;

struct Shape {
  int inputs = 0, hidden = 0, outputs = 0;
};

// The model's tensors, once: everything about the cut follows from this.
std::vector<tessel::TensorSpec> Tensors(const Shape& s, int pp) {
  return {{"hidden.weight", {s.hidden, s.inputs}, TensorSplit::kDim0, 0},
          {"hidden.bias", {s.hidden}, TensorSplit::kDim0, 0},
          {"out.weight", {s.outputs, s.hidden}, TensorSplit::kDim1, pp - 1},
          {"out.bias", {s.outputs}, TensorSplit::kReplicated, pp - 1}};
}

std::vector<float> Gaussian(size_t n, float scale, std::mt19937_64* rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (float& e : v) e = scale * normal(*rng);
  return v;
}

// Weights N(0, 1/fan_in), biases 0; `seed` picks the network.
std::vector<float> RandomNetwork(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> w1 = Gaussian(static_cast<size_t>(s.hidden) * s.inputs,
                                   1.f / std::sqrt(static_cast<float>(s.inputs)), &rng);
  std::vector<float> w2 = Gaussian(static_cast<size_t>(s.outputs) * s.hidden,
                                   1.f / std::sqrt(static_cast<float>(s.hidden)), &rng);
  std::vector<float> full = w1;
  full.resize(full.size() + s.hidden, 0.f);
  full.insert(full.end(), w2.begin(), w2.end());
  full.resize(full.size() + s.outputs, 0.f);
  return full;
}

// --- the model's arithmetic, on one tensor rank's share -------------------

// hid [m, h] = tanh(x W1^T + b1): x [m, D], W1 [h, D], b1 [h].
void HiddenForward(int m, int d, int h, const float* x, const float* w, const float* b,
                   float* hid) {
  for (int r = 0; r < m; ++r) {
    for (int k = 0; k < h; ++k) {
      float acc = b[k];
      for (int i = 0; i < d; ++i) acc += x[r * d + i] * w[k * d + i];
      hid[r * h + k] = std::tanh(acc);
    }
  }
}

// y [m, O] = hid W2^T (+ b2 where b is not null): hid [m, h], W2 [O, h].
void OutPartial(int m, int h, int o, const float* hid, const float* w, const float* b, float* y) {
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < o; ++j) {
      float acc = b != nullptr ? b[j] : 0.f;
      for (int k = 0; k < h; ++k) acc += hid[r * h + k] * w[j * h + k];
      y[r * o + j] = acc;
    }
  }
}

// Returns 0.5 * mean_r |y_r - target_r|^2; dy = (y - target) / m.
float LossGrad(int m, int o, const float* y, const float* target, float* dy) {
  float loss = 0.f;
  for (int i = 0; i < m * o; ++i) {
    const float e = y[i] - target[i];
    loss += 0.5f * e * e;
    dy[i] = e / static_cast<float>(m);
  }
  return loss / static_cast<float>(m);
}

// gW2 [O, h] = dy^T hid, gb2 [O] = sum_r dy, dhid [m, h] = dy W2.
void OutBackward(int m, int h, int o, const float* dy, const float* hid, const float* w, float* gw,
                 float* gb, float* dhid) {
  for (int j = 0; j < o; ++j) {
    float acc = 0.f;
    for (int r = 0; r < m; ++r) acc += dy[r * o + j];
    gb[j] = acc;
    for (int k = 0; k < h; ++k) {
      float g = 0.f;
      for (int r = 0; r < m; ++r) g += dy[r * o + j] * hid[r * h + k];
      gw[j * h + k] = g;
    }
  }
  for (int r = 0; r < m; ++r) {
    for (int k = 0; k < h; ++k) {
      float acc = 0.f;
      for (int j = 0; j < o; ++j) acc += dy[r * o + j] * w[j * h + k];
      dhid[r * h + k] = acc;
    }
  }
}

// dz = dhid * (1 - hid^2); gW1 [h, D] = dz^T x, gb1 [h] = sum_r dz.
void HiddenBackward(int m, int d, int h, const float* x, const float* hid, const float* dhid,
                    float* gw, float* gb) {
  std::vector<float> dz(static_cast<size_t>(m) * h);
  for (size_t i = 0; i < dz.size(); ++i) dz[i] = dhid[i] * (1.f - hid[i] * hid[i]);
  for (int k = 0; k < h; ++k) {
    float acc = 0.f;
    for (int r = 0; r < m; ++r) acc += dz[r * h + k];
    gb[k] = acc;
    for (int i = 0; i < d; ++i) {
      float g = 0.f;
      for (int r = 0; r < m; ++r) g += dz[r * h + k] * x[r * d + i];
      gw[k * d + i] = g;
    }
  }
}

// Micro-batch j's gradient g into the step's: g_0, + g_1, ... in order, then
// divided by the count.
void Accumulate(int j, int micro_batches, const std::vector<float>& g, std::vector<float>* acc) {
  if (j == 0) {
    *acc = g;
  } else {
    for (size_t i = 0; i < g.size(); ++i) (*acc)[i] += g[i];
  }
  if (j + 1 == micro_batches) {
    for (float& v : *acc) v /= static_cast<float>(micro_batches);
  }
}

struct Batch {
  std::vector<float> x;       // [batch, D]
  std::vector<float> target;  // [batch, O]
};

// Replica d's rows of step k: a function of (seed, k, d) alone.
Batch MakeBatch(const Shape& s, const std::vector<float>& teacher, uint64_t seed, int64_t k, int d,
                int rows) {
  std::seed_seq seq{seed, static_cast<uint64_t>(k), static_cast<uint64_t>(d)};
  std::mt19937_64 rng(seq);
  Batch b;
  b.x = Gaussian(static_cast<size_t>(rows) * s.inputs, 1.f, &rng);
  b.target.resize(static_cast<size_t>(rows) * s.outputs);
  std::vector<float> hid(static_cast<size_t>(rows) * s.hidden);
  const float* w1 = teacher.data();
  const float* b1 = w1 + s.hidden * s.inputs;
  const float* w2 = b1 + s.hidden;
  HiddenForward(rows, s.inputs, s.hidden, b.x.data(), w1, b1, hid.data());
  OutPartial(rows, s.hidden, s.outputs, hid.data(), w2, w2 + s.outputs * s.hidden, b.target.data());
  return b;
}

// Where a partition holds each tensor (null: not on this stage).
struct Params {
  const float *w1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr;
};
struct Grads {
  float *w1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr;
};
template <typename P, typename T>
P Locate(const tessel::PartitionPlan& plan, int stage, T* base) {
  auto at = [&](const char* name) -> T* {
    const int i = plan.Find(name);
    return plan.tensors()[i].stage == stage ? base + plan.entry(i).offset : nullptr;
  };
  return P{at("hidden.weight"), at("hidden.bias"), at("out.weight"), at("out.bias")};
}

struct Run {
  Shape shape;
  tessel::HybridConfig config;
  int batch = 0;
  int steps = 0;
  uint64_t seed = 0;
  int rows() const { return batch / config.micro_batches; }  // per micro-batch
};

// One process of the hybrid job: partition (p, t) of replica d.
absl::Status RunWorker(const Run& run, const tessel::PartitionPlan& plan) {
  const Shape& s = run.shape;
  tessel::HybridOptions o;
  TESSEL_ASSIGN_OR_RETURN(o.worker, tessel::WorkerOptionsFromFlags());
  o.worker.job = absl::GetFlag(FLAGS_job);
  o.worker.rank = absl::GetFlag(FLAGS_rank);
  o.worker.world_size = absl::GetFlag(FLAGS_world);
  o.worker.num_servers = absl::GetFlag(FLAGS_servers);
  o.config = run.config;
  // What every process must agree on besides dp/tp/pp (checked at start-up).
  o.fingerprint =
      absl::StrCat("D=", s.inputs, " H=", s.hidden, " O=", s.outputs, " batch=", run.batch,
                   " steps=", run.steps, " seed=", run.seed, " lr=", absl::GetFlag(FLAGS_lr));
  TESSEL_ASSIGN_OR_RETURN(auto session, tessel::HybridSession::Connect(o));
  tessel::HybridSession& hs = *session;
  tessel::Worker& worker = hs.worker();
  const tessel::RankCoords me = hs.coords();
  const std::vector<float> teacher = RandomNetwork(s, run.seed);
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> init,
                          plan.Slice(RandomNetwork(s, run.seed + 1), me.p, me.t));
  TESSEL_RETURN_IF_ERROR(worker.RegisterLayout(plan.Layout(me.p), init));

  // The model's part: forward and backward of this rank's share. Every
  // message (activations, their gradients, the output's sum) is the
  // PipelineStage's.
  tessel::PipelineStage stage(&hs.peers(), hs.config(), hs.rank());
  const int m = run.rows(), h = s.hidden / run.config.tp, mb = run.config.micro_batches;
  const size_t n = plan.partition_size(me.p);
  int64_t k = 0;
  Batch batch;
  Params w;
  float loss_sum = 0;
  std::vector<std::vector<float>> hid(mb);  // per micro-batch, until its backward
  std::vector<float> grads(n), g(n);
  tessel::StageFunctions f;
  f.input_size = stage.first_stage() ? -1 : static_cast<int64_t>(m) * h;
  f.output_size = static_cast<int64_t>(m) * (stage.last_stage() ? s.outputs : h);
  f.forward = [&](int j, std::vector<float> in) -> absl::StatusOr<std::vector<float>> {
    if (w.w1 != nullptr) {
      hid[j].resize(static_cast<size_t>(m) * h);
      HiddenForward(m, s.inputs, h, batch.x.data() + static_cast<size_t>(j) * m * s.inputs, w.w1,
                    w.b1, hid[j].data());
      if (!stage.last_stage()) return hid[j];  // to stage 1; kept for backward
    } else {
      hid[j] = std::move(in);
    }
    std::vector<float> y(static_cast<size_t>(m) * s.outputs);
    OutPartial(m, h, s.outputs, hid[j].data(), w.w2, me.t == 0 ? w.b2 : nullptr, y.data());
    TESSEL_RETURN_IF_ERROR(stage.SumOverTensorGroup(tessel::TensorSum::kForward, k, j, 0,
                                                    absl::MakeSpan(y), "out's output"));
    std::vector<float> dy(y.size());
    loss_sum += LossGrad(m, s.outputs, y.data(),
                         batch.target.data() + static_cast<size_t>(j) * m * s.outputs, dy.data());
    return dy;  // d(loss)/d(output), back into backward(j)
  };
  f.backward = [&](int j, std::vector<float> d) -> absl::StatusOr<std::vector<float>> {
    const Grads gp = Locate<Grads>(plan, me.p, g.data());
    std::vector<float> dhid;
    if (gp.w2 != nullptr) {
      dhid.resize(static_cast<size_t>(m) * h);
      OutBackward(m, h, s.outputs, d.data(), hid[j].data(), w.w2, gp.w2, gp.b2, dhid.data());
    } else {
      dhid = std::move(d);
    }
    if (gp.w1 != nullptr) {
      HiddenBackward(m, s.inputs, h, batch.x.data() + static_cast<size_t>(j) * m * s.inputs,
                     hid[j].data(), dhid.data(), gp.w1, gp.b1);
    }
    Accumulate(j, mb, g, &grads);
    std::vector<float>().swap(hid[j]);
    return dhid;  // to stage 0 (stage 0's own goes nowhere)
  };
  const bool reports_loss = stage.last_stage() && me.t == 0 && me.d == 0;
  for (k = worker.step(); k < run.steps; ++k) {
    batch = MakeBatch(s, teacher, run.seed, k, me.d, run.batch);
    w = Locate<Params>(plan, me.p, worker.params().data());
    loss_sum = 0;
    TESSEL_RETURN_IF_ERROR(stage.Step(k, f));
    std::copy(grads.begin(), grads.end(), worker.grads().begin());
    TESSEL_RETURN_IF_ERROR(worker.Step());
    if (reports_loss && ((k + 1) % absl::GetFlag(FLAGS_log_every) == 0 || k + 1 == run.steps)) {
      std::printf("step %lld/%d loss %.6f (replica 0)\n", static_cast<long long>(k + 1), run.steps,
                  loss_sum / static_cast<float>(mb));
      std::fflush(stdout);
    }
  }
  std::vector<float> mine;
  if (me.d == 0) {
    TESSEL_ASSIGN_OR_RETURN(mine, worker.GatherAll());
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> full,
                          tessel::CollectPartitions(hs.peers(), hs.config(), hs.rank(), plan,
                                                    std::move(mine), run.steps));
  if (hs.rank() == 0) {
    std::printf("final: %zu parameters from %d partition(s)\n", full.size(),
                run.config.tp * run.config.pp);
    const std::string out = absl::GetFlag(FLAGS_out);
    if (!out.empty()) TESSEL_RETURN_IF_ERROR(examples::WriteNpy(out, full));
  }
  return hs.Finish();
}

// The same training in one process: each tensor rank's share with the same
// functions, the output's partials summed in rank order, the replicas' mean
// and SGD as the servers compute them.
absl::Status RunReference(const Run& run, const tessel::OptimizerParams& opt) {
  if (opt.kind != tessel::OptimizerParams::Kind::kSgd || opt.momentum != 0.f ||
      opt.weight_decay != 0.f) {
    return absl::InvalidArgumentError(
        "--reference implements plain SGD only: use --optimizer=sgd without --momentum or "
        "--weight_decay");
  }
  const Shape& s = run.shape;
  const int tp = run.config.tp, dp = run.config.dp, mb = run.config.micro_batches;
  TESSEL_ASSIGN_OR_RETURN(auto plan, tessel::PartitionPlan::Create(Tensors(s, 1), tp, 1));
  const std::vector<float> teacher = RandomNetwork(s, run.seed);
  const std::vector<float> init = RandomNetwork(s, run.seed + 1);
  std::vector<std::vector<float>> parts(tp);
  for (int t = 0; t < tp; ++t) parts[t] = *plan.Slice(init, 0, t);
  const size_t n = plan.partition_size(0);
  const int m = run.rows(), h = s.hidden / tp, o = s.outputs;
  const float neg_lr = -opt.lr;
  for (int64_t k = 0; k < run.steps; ++k) {
    std::vector<std::vector<std::vector<float>>> grads(dp, std::vector<std::vector<float>>(tp));
    float loss0 = 0;
    for (int d = 0; d < dp; ++d) {
      const Batch b = MakeBatch(s, teacher, run.seed, k, d, run.batch);
      for (int j = 0; j < mb; ++j) {
        const float* x = b.x.data() + static_cast<size_t>(j) * m * s.inputs;
        std::vector<std::vector<float>> hid(tp, std::vector<float>(static_cast<size_t>(m) * h));
        std::vector<std::vector<float>> partial(tp, std::vector<float>(static_cast<size_t>(m) * o));
        for (int t = 0; t < tp; ++t) {
          const Params w = Locate<Params>(plan, 0, parts[t].data());
          HiddenForward(m, s.inputs, h, x, w.w1, w.b1, hid[t].data());
          OutPartial(m, h, o, hid[t].data(), w.w2, t == 0 ? w.b2 : nullptr, partial[t].data());
        }
        std::vector<float> y = partial[0];
        for (int t = 1; t < tp; ++t) {
          for (size_t i = 0; i < y.size(); ++i) y[i] += partial[t][i];
        }
        std::vector<float> dy(y.size());
        const float loss =
            LossGrad(m, o, y.data(), b.target.data() + static_cast<size_t>(j) * m * o, dy.data());
        if (d == 0) loss0 += loss;
        for (int t = 0; t < tp; ++t) {
          const Params w = Locate<Params>(plan, 0, parts[t].data());
          std::vector<float> g(n), dhid(static_cast<size_t>(m) * h);
          const Grads gp = Locate<Grads>(plan, 0, g.data());
          OutBackward(m, h, o, dy.data(), hid[t].data(), w.w2, gp.w2, gp.b2, dhid.data());
          HiddenBackward(m, s.inputs, h, x, hid[t].data(), dhid.data(), gp.w1, gp.b1);
          Accumulate(j, mb, g, &grads[d][t]);
        }
      }
    }
    for (int t = 0; t < tp; ++t) {
      for (size_t i = 0; i < n; ++i) {
        float mean = grads[0][t][i];
        for (int d = 1; d < dp; ++d) mean += grads[d][t][i];
        mean /= static_cast<float>(dp);
        parts[t][i] = parts[t][i] + neg_lr * mean;
      }
    }
    if ((k + 1) % absl::GetFlag(FLAGS_log_every) == 0 || k + 1 == run.steps) {
      std::printf("step %lld/%d loss %.6f (replica 0)\n", static_cast<long long>(k + 1), run.steps,
                  loss0 / static_cast<float>(mb));
    }
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<float> full, plan.Assemble(parts));
  std::printf("final: %zu parameters (reference, tp=%d)\n", full.size(), tp);
  const std::string out = absl::GetFlag(FLAGS_out);
  return out.empty() ? absl::OkStatus() : examples::WriteNpy(out, full);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "A two-layer regression network trained with hybrid DP x TP x PP (examples/README.md).\n"
      "  hybrid_regression --registry=HOST:PORT --rank=R --world=W --dp=D --tp=T --pp=P\n"
      "      [--micro_batches=M --steps=N --optimizer=sgd --lr=0.05 --out=FINAL.npy]\n"
      "  hybrid_regression --reference --dp=D --tp=T [...]   (one process, no cluster)");
  tessel::ParseFlags(argc, argv);
  Run run;
  run.shape = {absl::GetFlag(FLAGS_inputs), absl::GetFlag(FLAGS_hidden),
               absl::GetFlag(FLAGS_outputs)};
  run.config = {absl::GetFlag(FLAGS_dp), absl::GetFlag(FLAGS_tp), absl::GetFlag(FLAGS_pp),
                absl::GetFlag(FLAGS_micro_batches)};
  run.batch = absl::GetFlag(FLAGS_batch);
  run.steps = absl::GetFlag(FLAGS_steps);
  run.seed = absl::GetFlag(FLAGS_seed);
  auto refuse = [](const absl::Status& s) {
    std::fprintf(stderr, "hybrid_regression: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  if (run.config.micro_batches < 1 || run.batch % run.config.micro_batches != 0) {
    return refuse(absl::InvalidArgumentError(
        absl::StrCat("--batch=", run.batch,
                     " is not a multiple of --micro_batches=", run.config.micro_batches)));
  }
  // The cut; refused here (naming the tensor) if tp does not divide
  // --hidden, or a stage would hold nothing (--pp > 2).
  auto plan = tessel::PartitionPlan::Create(Tensors(run.shape, run.config.pp), run.config.tp,
                                            run.config.pp);
  if (!plan.ok()) return refuse(plan.status());
  absl::Status s;
  if (absl::GetFlag(FLAGS_reference)) {
    auto opt = tessel::OptimizerFromFlags();
    if (!opt.ok()) return refuse(opt.status());
    s = RunReference(run, *opt);
  } else {
    s = RunWorker(run, *plan);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "hybrid_regression: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
