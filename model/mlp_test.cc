#include "model/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <list>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/dataset.h"

namespace tessel::model {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// Uniform in [-scale, scale). std::mt19937's output is fixed by the standard
// (the <random> distributions are not, so none is used).
std::vector<float> RandomVector(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  for (float& e : v) {
    e = scale * (2.0f * static_cast<float>(gen() >> 8) * 0x1.0p-24f - 1.0f);
  }
  return v;
}

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The MLP in the plainest possible double-precision code, independent of
// mlp.cc except for the documented layout: output j of layer l is
// b[j] + sum_k W[j][k] * input[k], with W and b at tensors()[2l], [2l + 1].
double ReferenceLoss(const Mlp& model, const std::vector<double>& params,
                     const std::vector<float>& x, const std::vector<int32_t>& y, int batch) {
  const std::vector<int>& sizes = model.sizes();
  const size_t num_layers = sizes.size() - 1;
  double total = 0.0;
  for (int i = 0; i < batch; ++i) {
    std::vector<double> h(x.begin() + i * sizes[0], x.begin() + (i + 1) * sizes[0]);
    for (size_t l = 0; l < num_layers; ++l) {
      const double* w = &params[model.tensors()[2 * l].offset];
      const double* b = &params[model.tensors()[2 * l + 1].offset];
      std::vector<double> next(sizes[l + 1]);
      for (int j = 0; j < sizes[l + 1]; ++j) {
        double sum = b[j];
        for (int k = 0; k < sizes[l]; ++k) sum += w[j * sizes[l] + k] * h[k];
        next[j] = (l + 1 < num_layers) ? std::max(sum, 0.0) : sum;
      }
      h = std::move(next);
    }
    double sum_exp = 0.0;
    for (double z : h) sum_exp += std::exp(z);
    total += std::log(sum_exp) - h[y[i]];
  }
  return total / batch;
}

TEST(MlpTest, TensorsArePackedInOrderWithTorchShapes) {
  const Mlp model({64, 256, 256, 10});
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  size_t offset = 0;
  for (const TensorInfo& t : model.tensors()) {
    names.push_back(t.name);
    shapes.push_back(t.shape);
    EXPECT_EQ(t.offset, offset) << t.name;
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
    EXPECT_EQ(t.numel, numel) << t.name;
    offset += t.numel;
  }
  EXPECT_THAT(names, ElementsAre("fc0.weight", "fc0.bias", "fc1.weight", "fc1.bias", "fc2.weight",
                                 "fc2.bias"));
  EXPECT_THAT(shapes, ElementsAre(ElementsAre(256, 64), ElementsAre(256), ElementsAre(256, 256),
                                  ElementsAre(256), ElementsAre(10, 256), ElementsAre(10)));
  EXPECT_EQ(model.num_params(), offset);
  EXPECT_EQ(model.num_params(), 85002u);
  EXPECT_EQ(model.num_inputs(), 64);
  EXPECT_EQ(model.num_classes(), 10);
}

TEST(MlpTest, CreateRejectsInvalidSizes) {
  for (const std::vector<int>& sizes :
       std::vector<std::vector<int>>{{}, {5}, {5, 0, 3}, {5, 7, -1}}) {
    EXPECT_EQ(Mlp::Create(sizes).status().code(), absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<Mlp> model = Mlp::Create({5, 7, 3});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->num_params(), 5u * 7 + 7 + 7 * 3 + 3);
}

TEST(MlpTest, InitUsesTorchDefaultBoundsAndIsSeeded) {
  const Mlp model({64, 256, 10});
  std::vector<float> a(model.num_params()), b(model.num_params()), c(model.num_params());
  model.Init(a.data(), 7);
  model.Init(b.data(), 7);
  model.Init(c.data(), 8);
  EXPECT_TRUE(BitwiseEqual(a, b));
  EXPECT_FALSE(BitwiseEqual(a, c));
  for (const TensorInfo& t : model.tensors()) {
    const int64_t in = model.sizes()[t.name[2] - '0'];
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    float lo = bound, hi = -bound;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      lo = std::min(lo, a[i]);
      hi = std::max(hi, a[i]);
    }
    EXPECT_GE(lo, -bound) << t.name;
    EXPECT_LT(hi, bound) << t.name;
    // Thousands of draws (fc1.bias has only 10) come near both ends.
    if (t.numel >= 64) {
      EXPECT_LT(lo, -0.9f * bound) << t.name;
      EXPECT_GT(hi, 0.9f * bound) << t.name;
    }
  }
}

struct GradCase {
  std::vector<int> sizes;
  int batch;
};

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << "sizes {" << absl::StrJoin(c.sizes, ", ") << "} batch " << c.batch;
}

class MlpGradientTest : public ::testing::TestWithParam<GradCase> {};

// Analytic float gradients against central differences of the double
// reference: this checks forward, backward and the layout convention at once.
TEST_P(MlpGradientTest, MatchesFiniteDifferencesOfDoubleReference) {
  const Mlp model(GetParam().sizes);
  const int batch = GetParam().batch;
  std::vector<float> params(model.num_params());
  model.Init(params.data(), 3);
  const std::vector<float> x =
      RandomVector(static_cast<size_t>(batch) * model.num_inputs(), 11, 2.0f);
  std::vector<int32_t> y(batch);
  for (int i = 0; i < batch; ++i) y[i] = (3 * i + 1) % model.num_classes();

  std::vector<float> grads(model.num_params());
  const float loss = model.LossAndGrad(params.data(), x.data(), y.data(), batch, grads.data());

  std::vector<double> p(params.begin(), params.end());
  const double reference_loss = ReferenceLoss(model, p, x, y, batch);
  EXPECT_NEAR(loss, reference_loss, 1e-5 * std::abs(reference_loss));

  constexpr double kStep = 1e-5;
  int meaningful = 0;
  for (const TensorInfo& t : model.tensors()) {
    int meaningful_in_tensor = 0;
    for (size_t i = t.offset; i < t.offset + t.numel; ++i) {
      const double saved = p[i];
      p[i] = saved + kStep;
      const double up = ReferenceLoss(model, p, x, y, batch);
      p[i] = saved - kStep;
      const double down = ReferenceLoss(model, p, x, y, batch);
      p[i] = saved;
      const double numeric = (up - down) / (2 * kStep);
      const double analytic = grads[i];
      const double magnitude = std::max(std::abs(numeric), std::abs(analytic));
      if (magnitude > 1e-3) {
        ++meaningful_in_tensor;
        EXPECT_LT(std::abs(analytic - numeric) / magnitude, 1e-2)
            << t.name << "[" << i - t.offset << "]: analytic " << analytic << " numeric "
            << numeric;
      } else {
        EXPECT_NEAR(analytic, numeric, 1e-5) << t.name << "[" << i - t.offset << "]";
      }
    }
    // Every tensor, and a good part of all parameters (ReLUs that are off
    // for the whole batch leave exact zeros), get the relative check.
    EXPECT_GT(meaningful_in_tensor, 0) << t.name;
    meaningful += meaningful_in_tensor;
  }
  EXPECT_GT(meaningful, static_cast<int>(p.size()) / 3);
}

// Batches of 1, 4 and 7 rows exercise the four-row kernel and its remainder.
INSTANTIATE_TEST_SUITE_P(Shapes, MlpGradientTest,
                         ::testing::Values(GradCase{{5, 3}, 4}, GradCase{{5, 7, 3}, 1},
                                           GradCase{{5, 7, 3}, 7}, GradCase{{4, 9, 6, 3}, 5},
                                           GradCase{{6, 8, 8, 8, 4}, 4}));

TEST(MlpTest, LossIsTheValueLossAndGradReturns) {
  const Mlp model({16, 32, 5});
  std::vector<float> params(model.num_params()), grads(model.num_params());
  model.Init(params.data(), 1);
  const std::vector<float> x = RandomVector(9 * 16, 2, 1.5f);
  const std::vector<int32_t> y = {0, 1, 2, 3, 4, 0, 1, 2, 3};
  const float loss = model.LossAndGrad(params.data(), x.data(), y.data(), 9, grads.data());
  EXPECT_EQ(model.Loss(params.data(), x.data(), y.data(), 9), loss);
  // Softmax of small logits: close to log(5) at initialisation.
  EXPECT_NEAR(loss, std::log(5.0f), 0.5f);
}

TEST(MlpTest, GradReadyHookFiresOncePerTensorInReverseOrderWhenFinal) {
  const Mlp model({8, 16, 16, 4});
  const int batch = 6;
  std::vector<float> params(model.num_params());
  model.Init(params.data(), 5);
  const std::vector<float> x = RandomVector(batch * 8, 6, 1.0f);
  const std::vector<int32_t> y = {0, 1, 2, 3, 2, 1};

  std::vector<float> expected(model.num_params());
  const float expected_loss =
      model.LossAndGrad(params.data(), x.data(), y.data(), batch, expected.data());

  std::vector<float> grads(model.num_params(), std::numeric_limits<float>::quiet_NaN());
  std::vector<size_t> order;
  const float loss =
      model.LossAndGrad(params.data(), x.data(), y.data(), batch, grads.data(), [&](size_t index) {
        order.push_back(index);
        const TensorInfo& t = model.tensors()[index];
        EXPECT_EQ(std::memcmp(&grads[t.offset], &expected[t.offset], t.numel * sizeof(float)), 0)
            << t.name << " is not final when its hook fires";
      });
  EXPECT_THAT(order, ElementsAre(5, 4, 3, 2, 1, 0));
  EXPECT_EQ(loss, expected_loss);
  EXPECT_TRUE(BitwiseEqual(grads, expected));
}

TEST(MlpTest, LayerRangesTileTheParameterVectorInLayerOrder) {
  const Mlp model({6, 8, 5, 3});
  ASSERT_EQ(model.num_layers(), 3);
  size_t offset = 0;
  for (int l = 0; l < model.num_layers(); ++l) {
    const TensorInfo& weight = model.tensors()[2 * l];
    const TensorInfo& bias = model.tensors()[2 * l + 1];
    const std::pair<size_t, size_t> range = model.LayerRange(l);
    EXPECT_EQ(range.first, offset) << "layer " << l;
    EXPECT_EQ(range.first, weight.offset) << "layer " << l;
    EXPECT_EQ(range.second, weight.numel + bias.numel) << "layer " << l;
    EXPECT_EQ(bias.offset + bias.numel, range.first + range.second) << "layer " << l;
    offset += range.second;
  }
  EXPECT_EQ(offset, model.num_params());
  EXPECT_EQ(Mlp({4, 2}).num_layers(), 1);
}

// Runs one pass through an MlpStepper the way an FSDP worker does: every call
// gets its own copy of the layer's parameters, gathered just before it. The
// copies all stay allocated, so no two calls see the same address, and they
// start 1 to 4 floats into their buffers, so the alignment varies too. After
// each call its copy is overwritten with NaN: a stepper that kept the pointer
// would read NaN later. Each backward writes into a NaN-filled buffer of its
// own, copied into grads afterwards. Returns Loss() (checked to be the same
// bits at every point it may be called).
float LayerWiseLossAndGrad(const Mlp& model, const std::vector<float>& params,
                           const std::vector<float>& x, const std::vector<int32_t>& y, int batch,
                           std::vector<float>* grads) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::list<std::vector<float>> buffers;  // Keeps every copy allocated.
  auto gather = [&](int layer) {
    const auto [offset, numel] = model.LayerRange(layer);
    const size_t skip = 1 + buffers.size() % 4;
    std::vector<float>& buffer = buffers.emplace_back(skip + numel, kNaN);
    std::copy(params.begin() + offset, params.begin() + offset + numel, buffer.begin() + skip);
    return buffer.data() + skip;
  };
  auto poison_last = [&] { std::fill(buffers.back().begin(), buffers.back().end(), kNaN); };

  MlpStepper stepper(model, x.data(), y.data(), batch);
  for (int l = 0; l < model.num_layers(); ++l) {
    stepper.Forward(l, gather(l));
    poison_last();
  }
  const float loss = stepper.Loss();
  grads->assign(model.num_params(), kNaN);
  for (int l = model.num_layers() - 1; l >= 0; --l) {
    const auto [offset, numel] = model.LayerRange(l);
    std::vector<float> layer_grads(numel, kNaN);
    stepper.Backward(l, gather(l), layer_grads.data());
    poison_last();
    std::copy(layer_grads.begin(), layer_grads.end(), grads->begin() + offset);
    const float later_loss = stepper.Loss();
    EXPECT_EQ(std::memcmp(&later_loss, &loss, sizeof(float)), 0) << "after Backward(" << l << ")";
  }
  return loss;
}

class MlpStepperShapeTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(MlpStepperShapeTest, LayerWiseIsBitwiseLossAndGrad) {
  const Mlp model(GetParam().sizes);
  const int batch = GetParam().batch;
  for (uint32_t seed : {1u, 2u, 3u}) {
    std::vector<float> params(model.num_params());
    model.Init(params.data(), seed);
    const std::vector<float> x =
        RandomVector(static_cast<size_t>(batch) * model.num_inputs(), 100 + seed, 2.0f);
    std::vector<int32_t> y(batch);
    for (int i = 0; i < batch; ++i) {
      y[i] = static_cast<int32_t>((5 * i + seed) % model.num_classes());
    }

    std::vector<float> expected(model.num_params());
    const float expected_loss =
        model.LossAndGrad(params.data(), x.data(), y.data(), batch, expected.data());
    std::vector<float> grads;
    const float loss = LayerWiseLossAndGrad(model, params, x, y, batch, &grads);

    EXPECT_EQ(std::memcmp(&loss, &expected_loss, sizeof(float)), 0)
        << "seed " << seed << ": " << loss << " vs " << expected_loss;
    for (const TensorInfo& t : model.tensors()) {
      EXPECT_EQ(std::memcmp(&grads[t.offset], &expected[t.offset], t.numel * sizeof(float)), 0)
          << "seed " << seed << ": " << t.name << " differs";
    }
    // Not vacuous: some gradient is not zero.
    EXPECT_GT(std::count_if(grads.begin(), grads.end(), [](float g) { return g != 0.0f; }), 0)
        << "seed " << seed;
  }
}

// The gradient cases (both matrix kernels and their remainders) plus a hidden
// layer one unit wide and the demo model at two batch sizes.
INSTANTIATE_TEST_SUITE_P(Shapes, MlpStepperShapeTest,
                         ::testing::Values(GradCase{{5, 3}, 4}, GradCase{{5, 7, 3}, 1},
                                           GradCase{{5, 7, 3}, 7}, GradCase{{4, 9, 6, 3}, 5},
                                           GradCase{{6, 8, 8, 8, 4}, 4}, GradCase{{7, 1, 5}, 6},
                                           GradCase{{64, 256, 256, 10}, 5},
                                           GradCase{{64, 256, 256, 10}, 32}));

TEST(MlpStepperTest, SingleClassGivesZeroLossAndGradients) {
  const Mlp model({3, 4, 1});
  std::vector<float> params(model.num_params());
  model.Init(params.data(), 9);
  const std::vector<float> x = RandomVector(2 * 3, 9, 1.0f);
  const std::vector<int32_t> y = {0, 0};
  std::vector<float> expected(model.num_params()), grads;
  const float expected_loss =
      model.LossAndGrad(params.data(), x.data(), y.data(), 2, expected.data());
  EXPECT_EQ(LayerWiseLossAndGrad(model, params, x, y, 2, &grads), expected_loss);
  EXPECT_TRUE(BitwiseEqual(grads, expected));
  EXPECT_EQ(expected_loss, 0.0f);
}

// Ten SGD steps of the demo model, layer-wise and whole: the same bits.
TEST(MlpStepperTest, LayerWiseTrainingMatchesLossAndGradTraining) {
  const Mlp model({64, 256, 256, 10});
  const Dataset data = MakeClusters(512, 64, 10, 3);
  std::vector<float> whole(model.num_params()), layer_wise(model.num_params());
  model.Init(whole.data(), 3);
  layer_wise = whole;
  std::vector<float> grads(model.num_params()), layer_grads;
  for (int64_t step = 0; step < 10; ++step) {
    const Dataset b = Batch(data, step, 0, 1, 16);
    const float loss = model.LossAndGrad(whole.data(), b.x.data(), b.y.data(), 16, grads.data());
    const float layer_loss = LayerWiseLossAndGrad(model, layer_wise, b.x, b.y, 16, &layer_grads);
    ASSERT_EQ(std::memcmp(&loss, &layer_loss, sizeof(float)), 0) << "step " << step;
    for (size_t i = 0; i < whole.size(); ++i) {
      whole[i] -= 0.1f * grads[i];
      layer_wise[i] -= 0.1f * layer_grads[i];
    }
  }
  EXPECT_TRUE(BitwiseEqual(whole, layer_wise));
}

// A three-layer model, its parameters, and a batch, for the precondition
// checks. Death tests run in a forked child, so each can advance the stepper.
class MlpStepperDeathTest : public ::testing::Test {
 protected:
  MlpStepperDeathTest()
      : model_({4, 6, 5, 3}),
        params_(model_.num_params()),
        grads_(model_.num_params()),
        x_(RandomVector(2 * 4, 1, 1.0f)),
        y_({0, 2}) {
    model_.Init(params_.data(), 1);
  }

  MlpStepper NewStepper() const { return MlpStepper(model_, x_.data(), y_.data(), 2); }
  const float* Params(int layer) const { return params_.data() + model_.LayerRange(layer).first; }
  float* Grads(int layer) { return grads_.data() + model_.LayerRange(layer).first; }

  const Mlp model_;
  std::vector<float> params_;
  std::vector<float> grads_;
  const std::vector<float> x_;
  const std::vector<int32_t> y_;
};

TEST_F(MlpStepperDeathTest, ForwardOutOfOrderDies) {
  MlpStepper stepper = NewStepper();
  EXPECT_DEATH(stepper.Forward(1, Params(1)),
               "Forward\\(1\\) out of order: the next call must be Forward\\(0\\)");
  stepper.Forward(0, Params(0));
  EXPECT_DEATH(stepper.Forward(0, Params(0)), "Forward\\(0\\) out of order.*Forward\\(1\\)");
  EXPECT_DEATH(stepper.Forward(2, Params(2)), "Forward\\(2\\) out of order.*Forward\\(1\\)");
}

TEST_F(MlpStepperDeathTest, BackwardOrLossBeforeLastForwardDies) {
  MlpStepper stepper = NewStepper();
  EXPECT_DEATH(stepper.Backward(2, Params(2), Grads(2)),
               "Backward\\(2\\) out of order: the next call must be Forward\\(0\\)");
  stepper.Forward(0, Params(0));
  stepper.Forward(1, Params(1));
  EXPECT_DEATH(stepper.Backward(2, Params(2), Grads(2)),
               "Backward\\(2\\) out of order.*Forward\\(2\\)");
  EXPECT_DEATH(stepper.Loss(), "Loss\\(\\) before the last forward.*Forward\\(2\\)");
}

TEST_F(MlpStepperDeathTest, BackwardOutOfOrderDies) {
  MlpStepper stepper = NewStepper();
  for (int l = 0; l < 3; ++l) stepper.Forward(l, Params(l));
  EXPECT_DEATH(stepper.Backward(0, Params(0), Grads(0)),
               "Backward\\(0\\) out of order.*Backward\\(2\\)");
  stepper.Backward(2, Params(2), Grads(2));
  EXPECT_DEATH(stepper.Backward(2, Params(2), Grads(2)),
               "Backward\\(2\\) out of order.*Backward\\(1\\)");
  EXPECT_DEATH(stepper.Forward(0, Params(0)), "Forward\\(0\\) out of order.*Backward\\(1\\)");
  stepper.Backward(1, Params(1), Grads(1));
  stepper.Backward(0, Params(0), Grads(0));
  EXPECT_DEATH(stepper.Backward(0, Params(0), Grads(0)), "the pass is complete");
  EXPECT_DEATH(stepper.Forward(0, Params(0)), "the pass is complete");
  EXPECT_TRUE(std::isfinite(stepper.Loss()));  // Loss() stays allowed.
}

TEST_F(MlpStepperDeathTest, LayerOutsideModelDies) {
  MlpStepper stepper = NewStepper();
  EXPECT_DEATH(stepper.Forward(-1, Params(0)), "Forward\\(-1\\): layer is outside \\[0, 3\\)");
  EXPECT_DEATH(stepper.Forward(3, Params(0)), "Forward\\(3\\): layer is outside \\[0, 3\\)");
  for (int l = 0; l < 3; ++l) stepper.Forward(l, Params(l));
  EXPECT_DEATH(stepper.Backward(3, Params(0), Grads(0)),
               "Backward\\(3\\): layer is outside \\[0, 3\\)");
  EXPECT_DEATH(model_.LayerRange(3), "layer 3 is outside \\[0, 3\\)");
  EXPECT_DEATH(model_.LayerRange(-1), "layer -1 is outside \\[0, 3\\)");
}

TEST_F(MlpStepperDeathTest, BadBatchOrLabelDiesAtConstruction) {
  EXPECT_DEATH({ MlpStepper stepper(model_, x_.data(), y_.data(), 0); }, "batch = 0");
  const std::vector<int32_t> bad = {0, 3};
  EXPECT_DEATH({ MlpStepper stepper(model_, x_.data(), bad.data(), 2); },
               "label 3 of row 1 is outside \\[0, 3\\)");
}

TEST(MlpTest, TrainingIsBitwiseDeterministic) {
  const Mlp model({64, 256, 256, 10});
  const Dataset data = MakeClusters(512, 64, 10, 21);
  auto train = [&] {
    std::vector<float> params(model.num_params()), grads(model.num_params());
    model.Init(params.data(), 21);
    std::vector<float> losses;
    for (int64_t step = 0; step < 20; ++step) {
      const Dataset b = Batch(data, step, 0, 1, 32);
      losses.push_back(model.LossAndGrad(params.data(), b.x.data(), b.y.data(), 32, grads.data()));
      for (size_t i = 0; i < params.size(); ++i) params[i] -= 0.1f * grads[i];
    }
    params.insert(params.end(), losses.begin(), losses.end());
    return params;
  };
  EXPECT_TRUE(BitwiseEqual(train(), train()));
}

// What a data-parallel job relies on: the mean of the ranks' gradients over
// their slices is the single-process gradient of the global batch (up to the
// order of the float sums).
TEST(MlpTest, MeanOfRankGradientsIsSingleProcessGradient) {
  const Mlp model({64, 256, 256, 10});
  const Dataset data = MakeClusters(1000, 64, 10, 4);
  std::vector<float> params(model.num_params());
  model.Init(params.data(), 4);
  constexpr int kWorld = 4;
  constexpr int kPerRank = 8;
  constexpr int64_t kStep = 40;  // Wraps around the 1000 rows.

  const Dataset global = Batch(data, kStep, 0, 1, kWorld * kPerRank);
  std::vector<float> single(model.num_params());
  model.LossAndGrad(params.data(), global.x.data(), global.y.data(), kWorld * kPerRank,
                    single.data());

  std::vector<double> mean(model.num_params(), 0.0);
  std::vector<float> grads(model.num_params());
  for (int rank = 0; rank < kWorld; ++rank) {
    const Dataset b = Batch(data, kStep, rank, kWorld, kPerRank);
    model.LossAndGrad(params.data(), b.x.data(), b.y.data(), kPerRank, grads.data());
    for (size_t i = 0; i < mean.size(); ++i) mean[i] += grads[i] / kWorld;
  }
  double max_abs = 0.0, max_diff = 0.0;
  for (size_t i = 0; i < mean.size(); ++i) {
    max_abs = std::max(max_abs, std::abs(static_cast<double>(single[i])));
    max_diff = std::max(max_diff, std::abs(mean[i] - single[i]));
  }
  EXPECT_LT(max_diff, 1e-5 * max_abs);
}

TEST(DatasetTest, MakeClustersShapeLabelsAndScale) {
  const Dataset data = MakeClusters(2000, 16, 5, 1);
  EXPECT_EQ(data.num_features, 16);
  EXPECT_EQ(data.num_classes, 5);
  ASSERT_EQ(data.size(), 2000u);
  ASSERT_EQ(data.x.size(), 2000u * 16);
  std::vector<int> counts(5, 0);
  for (int32_t label : data.y) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 5);
    ++counts[label];
  }
  for (int count : counts) EXPECT_GT(count, 300);  // About 400 each.
  double sum_squares = 0.0;
  for (float v : data.x) sum_squares += static_cast<double>(v) * v;
  EXPECT_NEAR(sum_squares / data.x.size(), 1.0, 0.3);
}

TEST(DatasetTest, MakeClustersIsSeededAndPrefixStable) {
  const Dataset a = MakeClusters(300, 8, 4, 9);
  const Dataset b = MakeClusters(300, 8, 4, 9);
  const Dataset c = MakeClusters(300, 8, 4, 10);
  const Dataset longer = MakeClusters(500, 8, 4, 9);
  EXPECT_TRUE(BitwiseEqual(a.x, b.x));
  EXPECT_EQ(a.y, b.y);
  EXPECT_FALSE(BitwiseEqual(a.x, c.x));
  EXPECT_TRUE(BitwiseEqual(a.x, std::vector<float>(longer.x.begin(), longer.x.begin() + 300 * 8)));
  EXPECT_EQ(a.y, std::vector<int32_t>(longer.y.begin(), longer.y.begin() + 300));
  EXPECT_EQ(MakeClusters(0, 8, 4, 9).size(), 0u);
}

TEST(DatasetTest, SplitKeepsRowsInOrder) {
  const Dataset data = MakeClusters(10, 3, 2, 1);
  const DatasetSplit split = Split(data, 7);
  EXPECT_EQ(split.train.size(), 7u);
  EXPECT_EQ(split.test.size(), 3u);
  EXPECT_EQ(split.test.num_features, 3);
  EXPECT_EQ(split.test.num_classes, 2);
  std::vector<float> x = split.train.x;
  x.insert(x.end(), split.test.x.begin(), split.test.x.end());
  std::vector<int32_t> y = split.train.y;
  y.insert(y.end(), split.test.y.begin(), split.test.y.end());
  EXPECT_TRUE(BitwiseEqual(x, data.x));
  EXPECT_EQ(y, data.y);
}

// Row indices of a batch, read back through the features: in this data set
// feature 0 of row r is made r, so each batch row says where it came from.
std::vector<int> RowIndices(const Dataset& batch) {
  std::vector<int> rows;
  for (size_t i = 0; i < batch.size(); ++i) {
    rows.push_back(static_cast<int>(batch.x[i * batch.num_features]));
  }
  return rows;
}

Dataset IndexedData(int n) {
  Dataset data = MakeClusters(n, 2, 3, 1);
  for (int r = 0; r < n; ++r) data.x[2 * r] = static_cast<float>(r);
  return data;
}

TEST(DatasetTest, BatchTakesConsecutiveRowsAndWraps) {
  const Dataset data = IndexedData(10);
  EXPECT_THAT(RowIndices(Batch(data, 0, 0, 1, 4)), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(RowIndices(Batch(data, 2, 0, 1, 4)), ElementsAre(8, 9, 0, 1));
  EXPECT_THAT(RowIndices(Batch(data, 1, 1, 2, 3)), ElementsAre(9, 0, 1));
  // A global batch larger than the data set repeats rows.
  EXPECT_THAT(RowIndices(Batch(data, 0, 0, 1, 12)),
              ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1));
  // step * global batch overflows 64 bits: (2^62 * 8) mod 10 = 2^65 mod 10.
  EXPECT_THAT(RowIndices(Batch(data, int64_t{1} << 62, 0, 2, 4)), ElementsAre(2, 3, 4, 5));
  const Dataset b = Batch(data, 3, 0, 1, 2);
  EXPECT_EQ(b.num_features, 2);
  EXPECT_EQ(b.num_classes, 3);
  EXPECT_EQ(b.y[0], data.y[6]);
  EXPECT_EQ(b.y[1], data.y[7]);
}

TEST(DatasetTest, RankSlicesConcatenateToSingleProcessBatch) {
  for (int n : {1, 7, 10, 64}) {
    const Dataset data = IndexedData(n);
    for (int world = 1; world <= 4; ++world) {
      for (int per_rank = 1; per_rank <= 5; ++per_rank) {
        for (int64_t step = 0; step < 12; ++step) {
          const Dataset single = Batch(data, step, 0, 1, world * per_rank);
          std::vector<float> x;
          std::vector<int32_t> y;
          for (int rank = 0; rank < world; ++rank) {
            const Dataset b = Batch(data, step, rank, world, per_rank);
            x.insert(x.end(), b.x.begin(), b.x.end());
            y.insert(y.end(), b.y.begin(), b.y.end());
          }
          ASSERT_TRUE(BitwiseEqual(x, single.x))
              << "n " << n << " world " << world << " per_rank " << per_rank << " step " << step;
          ASSERT_EQ(y, single.y);
        }
      }
    }
  }
}

// The end-to-end check: plain SGD and Adam, written here, train the demo
// model on the demo data. Batch 32 over 3072 training rows: 96 steps an epoch.
class TrainingTest : public ::testing::Test {
 protected:
  TrainingTest()
      : model_({64, 256, 256, 10}),
        split_(Split(MakeClusters(4096, 64, 10, 1), 3072)),
        params_(model_.num_params()),
        grads_(model_.num_params()) {
    model_.Init(params_.data(), 1);
  }

  float Step(int64_t step) {
    const Dataset b = Batch(split_.train, step, 0, 1, kBatch);
    return model_.LossAndGrad(params_.data(), b.x.data(), b.y.data(), kBatch, grads_.data());
  }

  float TestLoss() const {
    return model_.Loss(params_.data(), split_.test.x.data(), split_.test.y.data(),
                       static_cast<int>(split_.test.size()));
  }

  static constexpr int kBatch = 32;
  const Mlp model_;
  const DatasetSplit split_;
  std::vector<float> params_;
  std::vector<float> grads_;
};

TEST_F(TrainingTest, SgdReachesEightyPercentHeldOut) {
  const float initial_loss = TestLoss();
  constexpr float kLearningRate = 0.1f;
  for (int64_t step = 0; step < 300; ++step) {
    Step(step);
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i] -= kLearningRate * grads_[i];
    }
    if (step + 1 == 96) {
      // One epoch in: learning, but the task is not trivial.
      EXPECT_LT(model_.Accuracy(params_.data(), split_.train), 0.99);
    }
  }
  EXPECT_LT(TestLoss(), 0.5f * initial_loss);
  EXPECT_GT(model_.Accuracy(params_.data(), split_.test), 0.80);
  // About 4.5% of labels are noise: nothing fits the training set exactly.
  EXPECT_LT(model_.Accuracy(params_.data(), split_.train), 0.99);
}

TEST_F(TrainingTest, AdamReachesEightyFivePercentHeldOut) {
  constexpr float kLearningRate = 1e-3f, kBeta1 = 0.9f, kBeta2 = 0.999f, kEpsilon = 1e-8f;
  std::vector<float> m(params_.size(), 0.0f), v(params_.size(), 0.0f);
  float beta1_t = 1.0f, beta2_t = 1.0f;
  for (int64_t step = 0; step < 300; ++step) {
    Step(step);
    beta1_t *= kBeta1;
    beta2_t *= kBeta2;
    for (size_t i = 0; i < params_.size(); ++i) {
      m[i] = kBeta1 * m[i] + (1 - kBeta1) * grads_[i];
      v[i] = kBeta2 * v[i] + (1 - kBeta2) * grads_[i] * grads_[i];
      const float m_hat = m[i] / (1 - beta1_t);
      const float v_hat = v[i] / (1 - beta2_t);
      params_[i] -= kLearningRate * m_hat / (std::sqrt(v_hat) + kEpsilon);
    }
  }
  EXPECT_GT(model_.Accuracy(params_.data(), split_.test), 0.85);
}

}  // namespace
}  // namespace tessel::model
