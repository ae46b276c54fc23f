#include "model/layer_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/internal/check.h"

namespace tessel::model::kernels {
namespace {

// c[j] += a * b[j] for j in [0, n).
inline void Axpy(int n, float a, const float* __restrict b, float* __restrict c) {
  for (int j = 0; j < n; ++j) c[j] += a * b[j];
}

// Axpy into four rows at once: each b[j] is loaded once for four outputs.
inline void Axpy4(int n, float a0, float a1, float a2, float a3, const float* __restrict b,
                  float* __restrict c0, float* __restrict c1, float* __restrict c2,
                  float* __restrict c3) {
  for (int j = 0; j < n; ++j) {
    const float bj = b[j];
    c0[j] += a0 * bj;
    c1[j] += a1 * bj;
    c2[j] += a2 * bj;
    c3[j] += a3 * bj;
  }
}

// c[m, n] += a[m, k] * b[k, n]; every c[i][j] accumulates its k products in
// ascending order of k.
void MatMulAccumulate(int m, int n, int k, const float* a, const float* b, float* c) {
  const size_t ks = static_cast<size_t>(k);
  const size_t ns = static_cast<size_t>(n);
  int i = 0;
  for (; i + 4 <= m; i += 4) {
    const float* a0 = a + static_cast<size_t>(i) * ks;
    float* c0 = c + static_cast<size_t>(i) * ns;
    for (size_t p = 0; p < ks; ++p) {
      Axpy4(n, a0[p], a0[ks + p], a0[2 * ks + p], a0[3 * ks + p], b + p * ns, c0, c0 + ns,
            c0 + 2 * ns, c0 + 3 * ns);
    }
  }
  for (; i < m; ++i) {
    const float* ai = a + static_cast<size_t>(i) * ks;
    float* ci = c + static_cast<size_t>(i) * ns;
    for (size_t p = 0; p < ks; ++p) Axpy(n, ai[p], b + p * ns, ci);
  }
}

// out[cols, rows] = in[rows, cols]^T.
void Transpose(int rows, int cols, const float* in, float* out) {
  const size_t r = static_cast<size_t>(rows);
  const size_t c = static_cast<size_t>(cols);
  constexpr size_t kTile = 16;
  for (size_t i0 = 0; i0 < r; i0 += kTile) {
    const size_t i1 = std::min(r, i0 + kTile);
    for (size_t j0 = 0; j0 < c; j0 += kTile) {
      const size_t j1 = std::min(c, j0 + kTile);
      for (size_t i = i0; i < i1; ++i) {
        for (size_t j = j0; j < j1; ++j) out[j * r + i] = in[i * c + j];
      }
    }
  }
}

}  // namespace

void Linear(int batch, int in, int out, const float* input, const float* weight, const float* bias,
            float* output, std::vector<float>* scratch) {
  TESSEL_MODEL_CHECK(batch >= 1 && in >= 1 && out >= 1, "Linear(batch=", batch, ", in=", in,
                     ", out=", out, ")");
  const size_t b = static_cast<size_t>(batch);
  const size_t o = static_cast<size_t>(out);
  for (size_t i = 0; i < b; ++i) {
    if (bias != nullptr) {
      std::copy(bias, bias + o, output + i * o);
    } else {
      std::fill(output + i * o, output + (i + 1) * o, 0.0f);
    }
  }
  scratch->resize(static_cast<size_t>(in) * o);
  Transpose(out, in, weight, scratch->data());
  MatMulAccumulate(batch, out, in, input, scratch->data(), output);
}

void Relu(float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) v[i] = std::max(v[i], 0.0f);
}

float SoftmaxCrossEntropy(const float* logits, const int32_t* y, int batch, int classes,
                          float* dlogits) {
  const size_t cs = static_cast<size_t>(classes);
  double total = 0.0;
  for (int i = 0; i < batch; ++i) {
    const int32_t label = y[i];
    TESSEL_MODEL_CHECK(label >= 0 && label < classes, "label ", label, " of row ", i,
                       " is outside [0, ", classes, ")");
    const float* z = logits + static_cast<size_t>(i) * cs;
    const float max = *std::max_element(z, z + cs);
    float sum = 0.0f;
    for (size_t c = 0; c < cs; ++c) sum += std::exp(z[c] - max);
    const float loss = std::log(sum) - (z[label] - max);
    total += loss;
    if (dlogits != nullptr) {
      float* dz = dlogits + static_cast<size_t>(i) * cs;
      for (size_t c = 0; c < cs; ++c) {
        const float p = std::exp(z[c] - max) / sum;
        const float target = static_cast<int32_t>(c) == label ? 1.0f : 0.0f;
        dz[c] = (p - target) / static_cast<float>(batch);
      }
    }
  }
  return static_cast<float>(total / batch);
}

void BiasGrad(int batch, int out, const float* d_output, float* d_bias) {
  std::fill(d_bias, d_bias + out, 0.0f);
  for (size_t i = 0; i < static_cast<size_t>(batch); ++i) {
    const float* row = d_output + i * out;
    for (int j = 0; j < out; ++j) d_bias[j] += row[j];
  }
}

void WeightGrad(int batch, int in, int out, const float* d_output, const float* input,
                float* d_weight, std::vector<float>* scratch) {
  std::fill(d_weight, d_weight + static_cast<size_t>(out) * in, 0.0f);
  scratch->resize(static_cast<size_t>(out) * batch);
  Transpose(batch, out, d_output, scratch->data());
  MatMulAccumulate(out, in, batch, scratch->data(), input, d_weight);
}

void InputGrad(int batch, int in, int out, const float* d_output, const float* weight,
               float* d_input) {
  std::fill(d_input, d_input + static_cast<size_t>(batch) * in, 0.0f);
  MatMulAccumulate(batch, in, out, d_output, weight, d_input);
}

void ReluMask(const float* activation, float* d, size_t n) {
  for (size_t e = 0; e < n; ++e) {
    if (!(activation[e] > 0.0f)) d[e] = 0.0f;
  }
}

}  // namespace tessel::model::kernels
