// gpu_bench: what the device path costs and hides, on a CUDA device.
//
//   1. staging bandwidth: pinned host <-> device copies of 1-256 MiB, GB/s
//      (median of --repeats), beside the PCIe peak (--pcie_peak_gbs; 63.0 =
//      PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 / 8);
//   2. overlap: one training step of an MLP on the device with each layer's
//      gradient copied to pinned host memory behind its own event, as
//      DeviceStaging does: how much of the copy time ran while backward was
//      still computing (the device's own event clock), at each of
//      --overlap_batches;
//   3. step time: forward + backward of the demo MLP on the device vs
//      Mlp::LossAndGrad on one CPU core;
//   4. top-k on the device (DeviceStaging's compression, --topk_ratio):
//      compress a 4 and a 64 MiB bucket and copy its pairs to pinned host
//      memory, against copying the dense bucket.
//
// Without a GPU, --device=cuda says why and exits 0; --device=host measures
// the CPU emulation (checks the benchmark runs; its numbers are not a GPU's).
//
//   bazel run //benchmarks:gpu_bench                  # cuda
//   bazel run //benchmarks:gpu_bench -- --device=host --overlap_batches=64
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/topk.h"
#include "gpu/device.h"
#include "model/dataset.h"
#include "model/device_layers.h"
#include "model/device_mlp.h"
#include "model/mlp.h"
#include "runtime/cli.h"

ABSL_FLAG(std::string, device, "cuda", "cuda, or host (the CPU emulation)");
ABSL_FLAG(double, pcie_peak_gbs, 63.0, "the host link's peak, GB/s (PCIe 5.0 x16: 63.0)");
ABSL_FLAG(int, repeats, 5, "repeats per measurement (the median is reported)");
ABSL_FLAG(std::string, overlap_layers, "1024,4096,4096,4096,10",
          "MLP of the overlap measurement (inputs, hidden..., classes)");
ABSL_FLAG(std::string, demo_layers, "64,512,512,10", "the demo's MLP, for the step time");
ABSL_FLAG(int, batch, 64, "rows per step of the step-time measurement");
ABSL_FLAG(double, topk_ratio, 0.01, "top-k ratio of the compression measurement");
ABSL_FLAG(std::string, overlap_batches, "64,1024",
          "batches of the overlap measurement: at a small batch a fast GPU finishes backward "
          "long before PCIe has moved the gradients; at a larger one backward can cover them");

namespace {

using tessel::gpu::Device;
using tessel::gpu::DeviceBuffer;
using tessel::gpu::Stream;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int> Sizes(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(s, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      std::fprintf(stderr, "gpu_bench: bad size '%s' (a positive integer)\n",
                   std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

#define CHECK_OK(expr)                                                                       \
  do {                                                                                       \
    absl::Status _s = (expr);                                                                \
    if (!_s.ok()) {                                                                          \
      std::fprintf(stderr, "gpu_bench: %s: %s\n", #expr, std::string(_s.message()).c_str()); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

template <typename T>
DeviceBuffer<T> Alloc(Device* d, size_t n) {
  auto b = DeviceBuffer<T>::Create(d, n);
  CHECK_OK(b.status());
  return std::move(*b);
}

void Bandwidth(Device* d) {
  const int repeats = absl::GetFlag(FLAGS_repeats);
  const double peak = absl::GetFlag(FLAGS_pcie_peak_gbs);
  std::printf("\n1. staging bandwidth (pinned host memory; median of %d; PCIe peak %.1f GB/s)\n",
              repeats, peak);
  std::printf("%8s  %14s  %8s  %14s  %8s\n", "MiB", "to host GB/s", "of peak", "to device GB/s",
              "of peak");
  for (size_t mib : {1, 16, 64, 256}) {
    const size_t bytes = mib << 20;
    std::vector<char> host(bytes, 1);
    CHECK_OK(d->PinHost(host.data(), bytes));
    auto dev = Alloc<char>(d, bytes);
    auto a = d->NewEvent(), b = d->NewEvent();
    std::vector<double> down, up;
    for (int r = 0; r < repeats + 1; ++r) {
      d->Record(Stream::kToHost, a.get());
      d->CopyToHost(Stream::kToHost, host.data(), dev.data(), bytes);
      d->Record(Stream::kToHost, b.get());
      CHECK_OK(d->Synchronize(b.get()));
      auto ms = d->ElapsedMs(a.get(), b.get());
      CHECK_OK(ms.status());
      if (r > 0) down.push_back(bytes / (*ms * 1e6));  // the first warms up
      d->Record(Stream::kToDevice, a.get());
      d->CopyToDevice(Stream::kToDevice, dev.data(), host.data(), bytes);
      d->Record(Stream::kToDevice, b.get());
      CHECK_OK(d->Synchronize(b.get()));
      ms = d->ElapsedMs(a.get(), b.get());
      CHECK_OK(ms.status());
      if (r > 0) up.push_back(bytes / (*ms * 1e6));
    }
    d->UnpinHost(host.data());
    std::printf("%8zu  %14.2f  %7.1f%%  %14.2f  %7.1f%%\n", mib, Median(down),
                100 * Median(down) / peak, Median(up), 100 * Median(up) / peak);
  }
}

// One step: forward, then backward layer by layer with each layer's gradient
// copied to pinned host memory on kToHost behind an event (DeviceStaging's
// pattern). Returns the fraction of copy time before backward's end.
void Overlap(Device* d, int batch) {
  const tessel::model::Mlp m(Sizes(absl::GetFlag(FLAGS_overlap_layers)));
  auto mlp = tessel::model::DeviceMlp::Create(m, d, batch);
  CHECK_OK(mlp.status());
  std::vector<float> params(m.num_params()), grads(m.num_params());
  m.Init(params.data(), 1);
  CHECK_OK(d->PinHost(grads.data(), grads.size() * sizeof(float)));
  auto dp = Alloc<float>(d, params.size());
  auto dg = Alloc<float>(d, params.size());
  d->CopyToDevice(Stream::kCompute, dp.data(), params.data(), params.size() * sizeof(float));
  tessel::model::Dataset data =
      tessel::model::MakeClusters(batch, m.num_inputs(), m.num_classes(), 1);
  const int layers = m.num_layers();
  std::vector<std::unique_ptr<tessel::gpu::Event>> computed, begun, landed;
  for (int l = 0; l < layers; ++l) {
    computed.push_back(d->NewEvent());
    begun.push_back(d->NewEvent());
    landed.push_back(d->NewEvent());
  }
  std::vector<double> hidden, copy_ms, backward_ms;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats) + 1; ++r) {
    CHECK_OK((*mlp)->SetBatch(data.x.data(), data.y.data()));
    for (int l = 0; l < layers; ++l) (*mlp)->Forward(l, dp.data() + m.LayerRange(l).first);
    for (int l = layers; l-- > 0;) {
      auto [off, n] = m.LayerRange(l);
      (*mlp)->Backward(l, dp.data() + off, dg.data() + off);
      d->Record(Stream::kCompute, computed[l].get());
      d->Wait(Stream::kToHost, computed[l].get());
      d->Record(Stream::kToHost, begun[l].get());
      d->CopyToHost(Stream::kToHost, grads.data() + off, dg.data() + off, n * sizeof(float));
      d->Record(Stream::kToHost, landed[l].get());
    }
    CHECK_OK(d->SynchronizeStream(Stream::kToHost));
    CHECK_OK((*mlp)->Loss().status());
    if (r == 0) continue;
    const tessel::gpu::Event* origin = computed[layers - 1].get();
    auto done = d->ElapsedMs(origin, computed[0].get());
    CHECK_OK(done.status());
    double total = 0, before = 0;
    for (int l = 0; l < layers; ++l) {
      auto b = d->ElapsedMs(origin, begun[l].get());
      auto e = d->ElapsedMs(origin, landed[l].get());
      CHECK_OK(b.status());
      CHECK_OK(e.status());
      total += *e - *b;
      before += std::max(0.0, std::min(*e, *done) - *b);
    }
    hidden.push_back(total > 0 ? before / total : 0);
    copy_ms.push_back(total);
    backward_ms.push_back(*done);
  }
  d->UnpinHost(grads.data());
  std::printf(
      "\n2. overlap: MLP %s (%zu parameters, %.1f MiB of gradients), batch %d\n"
      "   gradient copies %.3f ms in all; backward after the first gradient %.3f ms;\n"
      "   hidden behind backward: %.1f%% of the copy time (median of %zu)\n",
      absl::GetFlag(FLAGS_overlap_layers).c_str(), m.num_params(), m.num_params() * 4.0 / (1 << 20),
      batch, Median(copy_ms), Median(backward_ms), 100 * Median(hidden), hidden.size());
}

void StepTime(Device* d) {
  const tessel::model::Mlp m(Sizes(absl::GetFlag(FLAGS_demo_layers)));
  const int batch = absl::GetFlag(FLAGS_batch);
  auto mlp = tessel::model::DeviceMlp::Create(m, d, batch);
  CHECK_OK(mlp.status());
  std::vector<float> params(m.num_params()), grads(m.num_params());
  m.Init(params.data(), 1);
  auto dp = Alloc<float>(d, params.size());
  auto dg = Alloc<float>(d, params.size());
  d->CopyToDevice(Stream::kCompute, dp.data(), params.data(), params.size() * sizeof(float));
  tessel::model::Dataset data =
      tessel::model::MakeClusters(batch, m.num_inputs(), m.num_classes(), 1);
  const int steps = 200;
  std::vector<double> device_ms, cpu_ms;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats) + 1; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < steps; ++k) {
      CHECK_OK((*mlp)->SetBatch(data.x.data(), data.y.data()));
      for (int l = 0; l < m.num_layers(); ++l)
        (*mlp)->Forward(l, dp.data() + m.LayerRange(l).first);
      for (int l = m.num_layers(); l-- > 0;) {
        auto [off, n] = m.LayerRange(l);
        (*mlp)->Backward(l, dp.data() + off, dg.data() + off);
      }
      CHECK_OK((*mlp)->Loss().status());  // waits, as a step does
    }
    auto t1 = std::chrono::steady_clock::now();
    for (int k = 0; k < steps / 10; ++k) {
      m.LossAndGrad(params.data(), data.x.data(), data.y.data(), batch, grads.data());
    }
    auto t2 = std::chrono::steady_clock::now();
    if (r == 0) continue;
    device_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / steps);
    cpu_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count() / (steps / 10));
  }
  std::printf(
      "\n3. step time (forward + backward, batch %d, MLP %s): device %.3f ms, CPU (one core) "
      "%.3f ms: %.2fx\n",
      batch, absl::GetFlag(FLAGS_demo_layers).c_str(), Median(device_ms), Median(cpu_ms),
      Median(cpu_ms) / Median(device_ms));
}

// Top-k on the device (DeviceStaging's compression): residual += gradient,
// select, write the pairs, copy them to pinned host memory, against copying
// the dense gradient. Device clock, median of --repeats.
void Compression(Device* d) {
  const double ratio = absl::GetFlag(FLAGS_topk_ratio);
  std::printf("\n4. top-k on the device (ratio %g; median of %d), against the dense copy\n", ratio,
              absl::GetFlag(FLAGS_repeats));
  std::printf("%8s  %14s  %18s  %12s  %12s\n", "MiB", "dense copy ms", "top-k + pairs ms",
              "pairs bytes", "of dense");
  for (size_t mib : {4, 64}) {
    const size_t n = (mib << 20) / sizeof(float);
    const int64_t k = tessel::TopkCount(ratio, static_cast<int64_t>(n));
    const size_t pair_bytes = tessel::SparseBytes(k);
    std::vector<float> host(n);
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.f, 1.f);
    for (float& v : host) v = g(rng);
    CHECK_OK(d->PinHost(host.data(), n * sizeof(float)));
    auto grad = Alloc<float>(d, n);
    auto residual = Alloc<float>(d, n);
    auto wire = Alloc<uint8_t>(d, pair_bytes);
    d->CopyToDevice(Stream::kToHost, grad.data(), host.data(), n * sizeof(float));
    d->Fill(Stream::kToHost, residual.data(), 0.f, n);
    CHECK_OK(d->SynchronizeStream(Stream::kToHost));
    std::vector<uint8_t> pairs(pair_bytes);
    CHECK_OK(d->PinHost(pairs.data(), pair_bytes));
    auto a = d->NewEvent(), b = d->NewEvent();
    std::vector<double> dense_ms, topk_ms;
    for (int r = 0; r < absl::GetFlag(FLAGS_repeats) + 1; ++r) {
      d->Record(Stream::kToHost, a.get());
      d->CopyToHost(Stream::kToHost, host.data(), grad.data(), n * sizeof(float));
      d->Record(Stream::kToHost, b.get());
      CHECK_OK(d->Synchronize(b.get()));
      auto ms = d->ElapsedMs(a.get(), b.get());
      CHECK_OK(ms.status());
      if (r > 0) dense_ms.push_back(*ms);
      d->Record(Stream::kToHost, a.get());
      d->TopkCompress(Stream::kToHost, grad.data(), residual.data(), static_cast<int64_t>(n), k,
                      wire.data());
      d->CopyToHost(Stream::kToHost, pairs.data(), wire.data(), pair_bytes);
      d->Record(Stream::kToHost, b.get());
      CHECK_OK(d->Synchronize(b.get()));
      ms = d->ElapsedMs(a.get(), b.get());
      CHECK_OK(ms.status());
      if (r > 0) topk_ms.push_back(*ms);
    }
    d->UnpinHost(pairs.data());
    d->UnpinHost(host.data());
    std::printf("%8zu  %14.3f  %18.3f  %12zu  %11.2f%%\n", mib, Median(dense_ms), Median(topk_ms),
                pair_bytes, 100.0 * pair_bytes / (n * sizeof(float)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  tessel::ParseFlags(argc, argv);
  const std::string kind = absl::GetFlag(FLAGS_device);
  auto device = tessel::gpu::OpenDevice(kind);
  // The MLP computes through its layers on the device (cuBLAS on cuda).
  absl::Status usable = device.status();
  if (device.ok()) usable = tessel::model::OpenDeviceLayers(device->get()).status();
  if (!usable.ok()) {
    std::printf(
        "gpu_bench: no %s device: %s; nothing measured (--device=host measures the CPU "
        "emulation)\n",
        kind.c_str(), std::string(usable.message()).c_str());
    return usable.code() == absl::StatusCode::kFailedPrecondition ? 0 : 2;
  }
  std::printf("gpu_bench on %s\n", (*device)->description().c_str());
  if (kind == "host") std::printf("(the CPU emulation: these numbers are not a GPU's)\n");
  Bandwidth(device->get());
  for (int batch : Sizes(absl::GetFlag(FLAGS_overlap_batches))) Overlap(device->get(), batch);
  StepTime(device->get());
  Compression(device->get());
  return 0;
}
