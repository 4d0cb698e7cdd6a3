// fp32rows: a float32 linear layer on x86 CPUs with AVX2 and FMA, each output the same bits alone and inside a k-row
// pass, on every such CPU. Written for specviz (specviz's own code, under the project's licence).
//
//   y[m, n] = bias[n] + reduce(Σ_k x[m, k] · w[n, k])
//
// - every output is one chain of eight-lane fused multiply-adds over k in order (lane j sums the products k ≡ j mod 8),
//   the eight lanes are then added in one fixed order, ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), and the
//   bias last: nothing in that arithmetic depends on how many rows the pass has, which rows sit beside it, or which
//   thread computes it;
// - there is one path, AVX2 + FMA (a 512-bit path would sum sixteen lanes and round differently), so every x86 CPU
//   with AVX2 computes the same bits;
// - work is split over blocks of eight outputs; a block's eight weight rows stay in the L1 cache while every row of x
//   passes over them, so a one-row step streams the weights once at memory speed and each further row costs only its
//   products.
// torch's float32 linear (MKL or oneDNN) picks its kernel by the number of rows, so a token's logits changed in the
// last bits between a one-token step and a verify pass (kernels/forms.py), and on an AMD EPYC its one-row products of
// the bundled pair's shapes read 8–9 GB/s.
#include <torch/all.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

namespace specviz_fp32rows {

namespace {

constexpr int LANES = 8;
constexpr int BLOCK = 8;  // outputs at a time: eight independent FMA chains

inline float reduce_lanes(__m256 v) {
  const __m128 halves = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // l0+l4 … l3+l7
  const __m128 pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));  // (l0+l4)+(l2+l6), (l1+l5)+(l3+l7)
  return _mm_cvtss_f32(_mm_add_ss(pairs, _mm_shuffle_ps(pairs, pairs, 1)));
}

// Outputs [n0, n0 + COUNT) for every row of x.
template <int COUNT>
void outputs(const float* x, const float* w, const float* bias, float* y, int64_t M, int64_t K, int64_t N, int64_t n0) {
  const float* rows = w + n0 * K;
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    __m256 acc[COUNT];
    for (int j = 0; j < COUNT; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k += LANES) {
      const __m256 xv = _mm256_loadu_ps(xm + k);
      for (int j = 0; j < COUNT; ++j) acc[j] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(rows + j * K + k), acc[j]);
    }
    for (int j = 0; j < COUNT; ++j) {
      const float sum = reduce_lanes(acc[j]);
      y[m * N + n0 + j] = bias ? sum + bias[n0 + j] : sum;
    }
  }
}

}  // anonymous namespace

// x (…, K) → (…, N) in float32; K a multiple of 8.
at::Tensor fp32rows_linear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  const int64_t K = x.size(-1);
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kFloat && weight.is_contiguous(),
              "fp32rows: the weight must be a contiguous 2-D float32 tensor");
  TORCH_CHECK(weight.size(1) == K, "fp32rows: the input has ", K, " features, the weights take ", weight.size(1));
  TORCH_CHECK(K % LANES == 0, "fp32rows: the input's features must be a multiple of 8");
  const int64_t N = weight.size(0);
  auto x2 = x.to(at::kFloat).contiguous().view({-1, K});
  const int64_t M = x2.size(0);
  at::Tensor bias_f;
  const float* bias_ptr = nullptr;
  if (bias.has_value() && bias->defined()) {
    bias_f = bias->to(at::kFloat).contiguous();
    TORCH_CHECK(bias_f.numel() == N, "fp32rows: the bias has ", bias_f.numel(), " values for ", N, " outputs");
    bias_ptr = bias_f.data_ptr<float>();
  }
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  auto y = at::empty({M, N}, x2.options());
  const float* xp = x2.data_ptr<float>();
  const float* wp = weight.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const int64_t blocks = N / BLOCK;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) outputs<BLOCK>(xp, wp, bias_ptr, yp, M, K, N, b * BLOCK);
  });
  for (int64_t n = blocks * BLOCK; n < N; ++n) outputs<1>(xp, wp, bias_ptr, yp, M, K, N, n);  // the same chain, alone
  return y.view(sizes).to(x.scalar_type());
}

TORCH_LIBRARY(LIBNAME, m) {
  m.def("fp32rows_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
}
TORCH_LIBRARY_IMPL(LIBNAME, CPU, m) {
  m.impl("fp32rows_linear", &fp32rows_linear);
}

}  // namespace specviz_fp32rows
