// The out-of-place update (OptimizerUpdate::Run/RunMean(in, out, ...) and
// ReduceAndApply(..., in, out, ...), core/optimizer.h, core/reduce.h): for
// every optimizer configuration (every kernel template variant: each kind,
// weight decay, momentum's first and later steps, Nesterov, centered,
// loss scaling), the parameters written to `out` and the state are bitwise
// the in-place update's, `in` is left as it was, and in == out is the
// in-place call. A shard server keeps the previous version's parameters
// this way (server/served_versions.h).
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/optimizer.h"
#include "core/optimizer_testing.h"
#include "core/reduce.h"
#include "gtest/gtest.h"

namespace tessel {
namespace {

using optimizer_testing::AllConfigs;
using optimizer_testing::Config;
using optimizer_testing::Describe;
using optimizer_testing::RandomGrad;
using optimizer_testing::RandomVector;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every configuration, and each with loss scaling (grad_scale != 1: the
// kernels run over a scaled block).
std::vector<Config> Configs() {
  std::vector<Config> all = AllConfigs();
  const size_t plain = all.size();
  for (size_t i = 0; i < plain; ++i) {
    Config c = all[i];
    c.name += "_scaled";
    c.params.grad_scale = 0.25f;
    all.push_back(c);
  }
  return all;
}

struct Track {
  std::vector<float> params;
  std::vector<std::vector<float>> state;
  Track(const OptimizerParams& p, std::vector<float> init) : params(std::move(init)) {
    state.assign(StateSlots(p), std::vector<float>(params.size(), 0.f));
    std::vector<float*> s = Ptrs();
    InitState(p, s.data(), params.size());
  }
  std::vector<float*> Ptrs() {
    std::vector<float*> s;
    for (auto& slot : state) s.push_back(slot.data());
    return s;
  }
};

class OutOfPlaceTest : public testing::TestWithParam<Config> {};

// Run: one trajectory in place, one ping-ponging between two buffers (as a
// shard's two served versions do), over sizes around the kernels' blocks.
TEST_P(OutOfPlaceTest, RunMatchesInPlaceBitwise) {
  const OptimizerParams& p = GetParam().params;
  std::mt19937_64 rng(7);
  for (size_t n : {1, 7, 33, 1000, 1025, 4099}) {
    const std::vector<float> init = RandomVector(rng, n, -2.0, 2.0);
    Track in_place(p, init);
    Track copied(p, init);
    std::vector<float> other(n, -3.f);  // the second buffer: garbage, all overwritten
    for (int64_t step = 1; step <= 4; ++step) {
      const std::vector<float> grad = RandomGrad(rng, n);
      const OptimizerUpdate update(p, step);
      update.Run(in_place.params.data(), grad.data(), in_place.Ptrs().data(), 0, n);
      const std::vector<float> before = copied.params;
      update.Run(copied.params.data(), other.data(), grad.data(), copied.Ptrs().data(), 0, n);
      ASSERT_TRUE(SameBits(copied.params, before)) << Describe(p) << " n=" << n << ": in written";
      ASSERT_TRUE(SameBits(other, in_place.params))
          << Describe(p) << " n=" << n << " step " << step;
      for (size_t k = 0; k < in_place.state.size(); ++k) {
        ASSERT_TRUE(SameBits(copied.state[k], in_place.state[k]))
            << Describe(p) << " n=" << n << " step " << step << " slot " << k;
      }
      std::swap(copied.params, other);
    }
  }
}

// RunMean (the mean computed in the kernel's pass) and ReduceAndApply over
// 1..4 ranks, out of place against in place.
TEST_P(OutOfPlaceTest, MeanAndReduceMatchInPlaceBitwise) {
  const OptimizerParams& p = GetParam().params;
  std::mt19937_64 rng(11);
  const size_t n = 2500;  // more than one of ReduceAndApply's blocks
  for (int w = 1; w <= 4; ++w) {
    const std::vector<float> init = RandomVector(rng, n, -2.0, 2.0);
    Track in_place(p, init), copied(p, init), mean_in_place(p, init), mean_copied(p, init);
    std::vector<float> out(n, 5.f), mean_out(n, 5.f);
    for (int64_t step = 1; step <= 3; ++step) {
      std::vector<std::vector<float>> grads;
      std::vector<const float*> srcs;
      for (int r = 0; r < w; ++r) grads.push_back(RandomGrad(rng, n));
      for (int r = 0; r < w; ++r) srcs.push_back(grads[r].data());
      ReduceAndApply(p, step, in_place.params.data(), srcs.data(), w, in_place.Ptrs().data(), n);
      ReduceAndApply(p, step, copied.params.data(), out.data(), srcs.data(), w,
                     copied.Ptrs().data(), n);
      ASSERT_TRUE(SameBits(out, in_place.params)) << Describe(p) << " w=" << w << " step " << step;
      for (size_t k = 0; k < in_place.state.size(); ++k) {
        ASSERT_TRUE(SameBits(copied.state[k], in_place.state[k])) << Describe(p) << " w=" << w;
      }
      std::swap(copied.params, out);
      if (w == 2) {
        const OptimizerUpdate update(p, step);
        update.RunMean(mean_in_place.params.data(), srcs[0], srcs[1], 2.f,
                       mean_in_place.Ptrs().data(), 0, n);
        update.RunMean(mean_copied.params.data(), mean_out.data(), srcs[0], srcs[1], 2.f,
                       mean_copied.Ptrs().data(), 0, n);
        ASSERT_TRUE(SameBits(mean_out, mean_in_place.params)) << Describe(p) << " step " << step;
        std::swap(mean_copied.params, mean_out);
      }
    }
  }
}

// in == out through the out-of-place entry point is the in-place update.
TEST_P(OutOfPlaceTest, SamePointerIsInPlace) {
  const OptimizerParams& p = GetParam().params;
  std::mt19937_64 rng(13);
  const size_t n = 777;
  const std::vector<float> init = RandomVector(rng, n, -2.0, 2.0);
  Track a(p, init), b(p, init);
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grad = RandomGrad(rng, n);
    const OptimizerUpdate update(p, step);
    update.Run(a.params.data(), grad.data(), a.Ptrs().data(), 0, n);
    update.Run(b.params.data(), b.params.data(), grad.data(), b.Ptrs().data(), 0, n);
    ASSERT_TRUE(SameBits(a.params, b.params)) << Describe(p) << " step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(AllKinds, OutOfPlaceTest, testing::ValuesIn(Configs()),
                         [](const testing::TestParamInfo<Config>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tessel
