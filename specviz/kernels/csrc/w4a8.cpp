// w4a8: a linear layer with 4-bit weights and 8-bit activations on x86 CPUs, a token's row independent of the others.
//
//   y[m, n] = bias[n] + Σ_g  s_a[m, g] · s_w[n, g] · Σ_{k ∈ g} a[m, k] · (w[n, k] − z_w[n, g])
//
// - activations: each row quantised alone, in groups of 32 inputs, to int8 with a float scale s_a per group
//   (symmetric: s_a = max |x| / 127), as llama.cpp's q8 activations are;
// - weights: 4-bit codes w (0–15) in groups of 32 along the input, a float16 scale s_w and an integer zero point z_w
//   each (0.5 + 2/32 + 1/32 = 0.59 bytes streamed per weight);
// - a group's product is an integer sum, exact in any order: Σ a·w (the codes as the unsigned operand of VPDPBUSD or
//   VPMADDUBSW, the activations as the signed one: |pair| ≤ 2 · 15 · 127 = 3810, and eight steps of pairs stay within
//   int16) minus z_w · Σ a; it is turned into float and added to the row's accumulator in a fixed order (group by group,
//   ((float(sum) · s_a) · s_w) + y, no FMA: built with -ffp-contract=off), so a row's output is bit-identical alone,
//   inside a k-row pass, and on every path below (AVX-512 VNNI, AVX-VNNI, AVX2): the paths differ only in how they form
//   the exact integer sums.
//
// From torchao (https://github.com/pytorch/ao, v0.18.0, torchao/csrc/cpu/aten_kernels/da8w4_linear.cpp),
// Copyright (c) Meta Platforms, Inc. and affiliates, BSD 3-Clause licence (THIRD_PARTY_NOTICES.md at the repository's
// root carries it). Kept from torchao: the VNNI weight layout and its packing, the zero-point broadcast, the shape of
// the AVX-512 VNNI small-row micro-kernel, and the blocking over output channels. Changed for specviz:
//   - activations quantised symmetrically per group of 32 (torchao: asymmetric uint8 per row), so the weights' codes
//     are the unsigned operand and no compensation table is needed; the weights' scales are float16 (torchao: float32):
//     a weight streams 0.59 bytes instead of 0.66, and the packed model is 19 % smaller;
//   - an AVX2 micro-kernel (VPMADDUBSW summed in int16 over a group, then VPMADDWD; VPDPBUSD on AVX-VNNI) that forms the
//     same integer sums as the AVX-512 VNNI one, prefetching the weights four groups ahead as that one does;
//   - rows go through the micro-kernels in chunks (AVX-512: up to 8, AVX2: up to 2): a row's sums and its epilogue are
//     the same in any chunk;
//   - the activation quantiser in C++ (AVX2 on both paths, the same IEEE operations as a scalar loop) and one fused op
//     (w4a8_linear) in front of the kernel;
//   - no oneDNN brgemm path and no scalar fallback: the library is built for one of the two paths (W4A8_AVX512 or
//     W4A8_AVX2) by specviz/kernels/w4a8.py, which says where neither can run.
#include <torch/all.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/cpu/vec/functional.h>
#include <c10/util/Unroll.h>
#include <immintrin.h>

#if !defined(W4A8_AVX512) && !defined(W4A8_AVX2)
#error "build with -DW4A8_AVX512 (AVX-512 VNNI) or -DW4A8_AVX2 (AVX2, FMA, F16C)"
#endif

namespace specviz_w4a8 {

namespace {

constexpr int BLOCK_N = 32;  // output channels per packed block
constexpr int GROUP = 32;    // inputs per weight group (one scale and zero point)

// Packs 4-bit codes (uint8, 0–15) [N, K], float16 scales [N, G] and int8 zero points [N, G] into torchao's VNNI
// layout: weights [N/32, K/32, 32, 16] (two channels' codes per byte, four inputs of a channel side by side), scales
// and zero points [N/32, G, 32].
std::tuple<at::Tensor, at::Tensor, at::Tensor> w4a8_prepack(
    const at::Tensor& codes, const at::Tensor& scales, const at::Tensor& qzeros) {
  TORCH_CHECK(codes.dim() == 2 && codes.scalar_type() == at::kByte, "w4a8: codes must be a 2-D uint8 tensor");
  const int64_t N = codes.size(0), K = codes.size(1), G = scales.size(1);
  TORCH_CHECK(N % BLOCK_N == 0 && K % GROUP == 0 && G * GROUP == K, "w4a8: shapes must be whole blocks of 32");
  const int64_t Nc = N / BLOCK_N, Kc = K / GROUP;
  auto reordered = codes.contiguous().view({Nc, BLOCK_N, Kc, GROUP}).permute({0, 2, 3, 1}).contiguous();
  auto packed = at::empty({Nc, Kc, GROUP, BLOCK_N / 2}, codes.options());
  auto blocked_scales = scales.to(at::kHalf).view({Nc, BLOCK_N, G}).permute({0, 2, 1}).contiguous();
  auto blocked_qzeros = qzeros.to(at::kChar).view({Nc, BLOCK_N, G}).permute({0, 2, 1}).contiguous();
  const uint8_t* in = reordered.data_ptr<uint8_t>();
  uint8_t* out = packed.data_ptr<uint8_t>();
  at::parallel_for(0, Nc * Kc, 1, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
      const uint8_t* in_ptr = in + block * GROUP * BLOCK_N;
      uint8_t* out_ptr = out + block * GROUP * BLOCK_N / 2;
      // channels 0–7 and 8–15 of each 16 share bytes: [k/4][pair of lanes][8 channels][4 inputs]
      for (int nb = 0; nb < BLOCK_N / 8; nb += 2) {
        for (int k = 0; k < GROUP; k += 4) {
          for (int ni = 0; ni < 8; ++ni) {
            for (int ki = 0; ki < 4; ++ki) {
              uint8_t first = in_ptr[nb * 8 + ni + (k + ki) * BLOCK_N];
              uint8_t second = in_ptr[(nb + 1) * 8 + ni + (k + ki) * BLOCK_N];
              out_ptr[(nb / 2 * 8 + ni) * 4 + k * BLOCK_N / 2 + ki] = (first & 0x0f) | ((second & 0x0f) << 4);
            }
          }
        }
      }
    }
  });
  return std::make_tuple(packed, blocked_scales, blocked_qzeros);
}

// 32 bytes of packed codes → the low nibbles (channels 0–7 of 16) and the high ones (8–15), 4 inputs each.
inline std::array<__m256i, 2> codes_as_int8(const uint8_t* packed) {
  __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed));
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  return {_mm256_and_si256(bytes, low_mask), _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_mask)};
}

// Rows [0, M) against one block of 32 channels × one group of 32 inputs, accumulated into C (ldc floats a row).
#if defined(W4A8_AVX512)

inline __m512i join(__m256i low, __m256i high) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

template <int M>
void group_rows_avx512(float* C, const int8_t* A, const float* scales_a, const int32_t* sums_a, const uint8_t* B,
                       const at::Half* scales_b, const int8_t* zps_b, int64_t lda, int64_t ld_meta, int64_t ldc) {
  constexpr int COLS = BLOCK_N / 16;
  constexpr int LDB = BLOCK_N / 2;
  __m512i vb[COLS], vc[M * COLS];
  c10::ForcedUnroll<M * COLS>{}([&](auto i) { vc[i] = _mm512_setzero_si512(); });
  __m512i va;
  auto compute = [&](auto i, int k) {
    constexpr int row = i / COLS, col = i % COLS;
    if constexpr (col == 0) va = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(A + row * lda + k));
    if constexpr (row == 0) {
      auto [low, high] = codes_as_int8(B + k * LDB + col * 32);
      vb[col] = join(low, high);
      _mm_prefetch(reinterpret_cast<const char*>(B + k * LDB + col * 32 + 128 * LDB), _MM_HINT_T0);
    }
    vc[i] = _mm512_dpbusd_epi32(vc[i], vb[col], va);  // codes (unsigned) · activations (signed), by fours
  };
  for (int k = 0; k < GROUP; k += 4) c10::ForcedUnroll<M * COLS>{}(compute, k);
  c10::ForcedUnroll<M * COLS>{}([&](auto i) {
    constexpr int row = i / COLS, col = i % COLS;
    const __m512i zps = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(zps_b + col * 16)));
    const __m512 scales = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales_b + col * 16)));
    __m512i sums = _mm512_sub_epi32(vc[i], _mm512_mullo_epi32(zps, _mm512_set1_epi32(sums_a[row * ld_meta])));
    __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(scales_a[row * ld_meta]));
    y = _mm512_mul_ps(y, scales);
    y = _mm512_add_ps(y, _mm512_loadu_ps(C + row * ldc + col * 16));
    _mm512_storeu_ps(C + row * ldc + col * 16, y);
  });
}

constexpr int64_t CHUNK_ROWS = 8;

#define W4A8_ROWS(M) group_rows_avx512<M>(C, A, sa, za, B, sb, zb, lda, ld_meta, ldc)

void group_chunk(float* C, const int8_t* A, const float* sa, const int32_t* za, const uint8_t* B, const at::Half* sb,
                 const int8_t* zb, int64_t rows, int64_t lda, int64_t ld_meta, int64_t ldc) {
  switch (rows) {
    case 1: W4A8_ROWS(1); break;
    case 2: W4A8_ROWS(2); break;
    case 3: W4A8_ROWS(3); break;
    case 4: W4A8_ROWS(4); break;
    case 5: W4A8_ROWS(5); break;
    case 6: W4A8_ROWS(6); break;
    case 7: W4A8_ROWS(7); break;
    case 8: W4A8_ROWS(8); break;
  }
}

void group_all_rows(float* C, const int8_t* A, const float* sa, const int32_t* za, const uint8_t* B,
                    const at::Half* sb, const int8_t* zb, int64_t M, int64_t lda, int64_t ld_meta, int64_t ldc) {
  for (int64_t m0 = 0; m0 < M; m0 += CHUNK_ROWS) {
    int64_t rows = std::min(CHUNK_ROWS, M - m0);
    group_chunk(C + m0 * ldc, A + m0 * lda, sa + m0 * ld_meta, za + m0 * ld_meta, B, sb, zb, rows, lda, ld_meta, ldc);
  }
}

#else  // W4A8_AVX2

constexpr int CG = BLOCK_N / 8;   // groups of 8 channels: one 256-bit vector of int32 sums each
constexpr int STEPS = GROUP / 4;  // four inputs per step

template <int M>
void group_rows_avx2(float* C, const int8_t* A, const float* scales_a, const int32_t* sums_a, const uint8_t* B,
                     const at::Half* scales_b, const int8_t* zps_b, int64_t lda, int64_t ld_meta, int64_t ldc) {
  constexpr int LDB = BLOCK_N / 2;
  __m256i acc[M][CG];  // AVX-VNNI: int32 sums by fours; AVX2: int16 sums of pairs (8 steps · 2 · 3810 ≤ 32767)
  for (int m = 0; m < M; ++m)
    for (int c = 0; c < CG; ++c) acc[m][c] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int s = 0; s < STEPS; ++s) {
    __m256i va[M];
    for (int m = 0; m < M; ++m) va[m] = _mm256_set1_epi32(*reinterpret_cast<const int32_t*>(A + m * lda + 4 * s));
    for (int half = 0; half < 2; ++half) {  // 16 channels a load: 0–7 in the low nibbles, 8–15 in the high
      auto [low, high] = codes_as_int8(B + s * 4 * LDB + half * 32);
      _mm_prefetch(reinterpret_cast<const char*>(B + s * 4 * LDB + half * 32 + 128 * LDB), _MM_HINT_T0);  // 4 groups on
      for (int m = 0; m < M; ++m) {
#if defined(__AVXVNNI__)
        acc[m][2 * half] = _mm256_dpbusd_avx_epi32(acc[m][2 * half], low, va[m]);
        acc[m][2 * half + 1] = _mm256_dpbusd_avx_epi32(acc[m][2 * half + 1], high, va[m]);
#else
        acc[m][2 * half] = _mm256_add_epi16(acc[m][2 * half], _mm256_maddubs_epi16(low, va[m]));
        acc[m][2 * half + 1] = _mm256_add_epi16(acc[m][2 * half + 1], _mm256_maddubs_epi16(high, va[m]));
#endif
      }
    }
  }
  for (int c = 0; c < CG; ++c) {
    const __m256i zps = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(zps_b + c * 8)));
    const __m256 scales = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales_b + c * 8)));
    for (int m = 0; m < M; ++m) {
#if defined(__AVXVNNI__)
      __m256i dot = acc[m][c];
#else
      __m256i dot = _mm256_madd_epi16(acc[m][c], _mm256_set1_epi16(1));
#endif
      __m256i sums = _mm256_sub_epi32(dot, _mm256_mullo_epi32(zps, _mm256_set1_epi32(sums_a[m * ld_meta])));
      __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(scales_a[m * ld_meta]));
      y = _mm256_mul_ps(y, scales);
      y = _mm256_add_ps(y, _mm256_loadu_ps(C + m * ldc + c * 8));
      _mm256_storeu_ps(C + m * ldc + c * 8, y);
    }
  }
}

void group_all_rows(float* C, const int8_t* A, const float* sa, const int32_t* za, const uint8_t* B,
                    const at::Half* sb, const int8_t* zb, int64_t M, int64_t lda, int64_t ld_meta, int64_t ldc) {
  int64_t m = 0;
  for (; m + 2 <= M; m += 2)
    group_rows_avx2<2>(C + m * ldc, A + m * lda, sa + m * ld_meta, za + m * ld_meta, B, sb, zb, lda, ld_meta, ldc);
  if (m < M) group_rows_avx2<1>(C + m * ldc, A + m * lda, sa + m * ld_meta, za + m * ld_meta, B, sb, zb, lda, ld_meta, ldc);
}

#endif

// Each row alone, in groups of 32: scale = max |x| / 127, a = round(x / scale), and Σ a per group. The same IEEE
// operations per element on every path (a maximum, one product, round-to-nearest-even, two clamps), eight lanes at a
// time with AVX2, which both paths have; bf16 rows (what the layers pass) convert by a shift, others element by element.
inline __m256 eight_as_float(const at::BFloat16* x) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

template <typename scalar_t>
inline __m256 eight_as_float(const scalar_t* x) {
  alignas(32) float values[8];
  for (int i = 0; i < 8; ++i) values[i] = static_cast<float>(x[i]);
  return _mm256_load_ps(values);
}

template <typename scalar_t>
void quantise_group(const scalar_t* x, int8_t* out, float* scale_out, int32_t* sum_out) {
  constexpr int LANES = GROUP / 8;
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 group[LANES];
  __m256 largest = _mm256_setzero_ps();
  for (int v = 0; v < LANES; ++v) {
    group[v] = eight_as_float(x + 8 * v);
    largest = _mm256_max_ps(_mm256_andnot_ps(sign, group[v]), largest);  // a NaN lane keeps `largest`, as std::max does
  }
  __m128 half = _mm_max_ps(_mm256_castps256_ps128(largest), _mm256_extractf128_ps(largest, 1));
  half = _mm_max_ps(half, _mm_movehl_ps(half, half));
  half = _mm_max_ss(half, _mm_shuffle_ps(half, half, 1));
  const float top = _mm_cvtss_f32(half);
  const float inverse = top > 0.f ? 127.f / top : 0.f;
  const __m256 scaled_by = _mm256_set1_ps(inverse), high = _mm256_set1_ps(127.f), low = _mm256_set1_ps(-127.f);
  __m256i codes[LANES];
  __m256i total = _mm256_setzero_si256();
  for (int v = 0; v < LANES; ++v) {
    __m256 r = _mm256_round_ps(_mm256_mul_ps(group[v], scaled_by), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_min_ps(_mm256_max_ps(r, low), high);  // max(−127, r) then min(127, ·), as the scalar clamp
    codes[v] = _mm256_cvtps_epi32(r);
    total = _mm256_add_epi32(total, codes[v]);
  }
  // int32 → int8 in order: pack pairs of vectors (lanes interleave by 128 bits), then put the 32-bit pieces back
  const __m256i low16 = _mm256_packs_epi32(codes[0], codes[1]), high16 = _mm256_packs_epi32(codes[2], codes[3]);
  const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(low16, high16), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bytes);
  __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
  sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4e));
  sum4 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0xb1));
  *scale_out = top / 127.f;
  *sum_out = _mm_cvtsi128_si32(sum4);
}

void quantise_rows(const at::Tensor& x2, int8_t* q, float* scales, int32_t* sums) {
  static_assert(GROUP == 32, "quantise_group packs four vectors of eight");
  const int64_t M = x2.size(0), K = x2.size(1), G = K / GROUP;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x2.scalar_type(), "w4a8_quantise", [&] {
    const scalar_t* xp = x2.data_ptr<scalar_t>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t g = 0; g < G; ++g)
        quantise_group(xp + m * K + g * GROUP, q + m * K + g * GROUP, scales + m * G + g, sums + m * G + g);
  });
}

template <typename out_t>
void store_rows(const float* y, out_t* out, int64_t rows, int64_t ld_out) {
  for (int64_t m = 0; m < rows; ++m)
    for (int n = 0; n < BLOCK_N; ++n) out[m * ld_out + n] = static_cast<out_t>(y[m * BLOCK_N + n]);
}

// x (…, K) in bf16/fp16/fp32 → (…, N) in x's dtype.
at::Tensor w4a8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& scales,
                       const at::Tensor& qzeros, const std::optional<at::Tensor>& bias) {
  const int64_t K = x.size(-1);
  auto x2 = x.contiguous().view({-1, K});
  const int64_t M = x2.size(0);
  const int64_t Nc = weight.size(0), Kc = weight.size(1), N = Nc * BLOCK_N;
  TORCH_CHECK(weight.size(2) == GROUP && weight.size(3) * 2 == BLOCK_N, "w4a8: unexpected packed weight shape");
  TORCH_CHECK(K == Kc * GROUP, "w4a8: the input has ", K, " features, the weights take ", Kc * GROUP);
  TORCH_CHECK(scales.scalar_type() == at::kHalf && qzeros.scalar_type() == at::kChar, "w4a8: scales fp16, zeros int8");
  auto q = at::empty({M, K}, x.options().dtype(at::kChar));
  auto sa = at::empty({M, Kc}, x.options().dtype(at::kFloat));
  auto za = at::empty({M, Kc}, x.options().dtype(at::kInt));
  quantise_rows(x2, q.data_ptr<int8_t>(), sa.data_ptr<float>(), za.data_ptr<int32_t>());
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  auto output = at::empty(sizes, x.options());
  const int8_t* a_ptr = q.data_ptr<int8_t>();
  const float* sa_ptr = sa.data_ptr<float>();
  const int32_t* za_ptr = za.data_ptr<int32_t>();
  const uint8_t* b_ptr = weight.data_ptr<uint8_t>();
  const at::Half* sb_ptr = scales.data_ptr<at::Half>();
  const int8_t* zb_ptr = qzeros.data_ptr<int8_t>();
  const float* bias_ptr = nullptr;
  at::Tensor bias_f;
  if (bias.has_value() && bias->defined()) {
    bias_f = bias->to(at::kFloat).contiguous();
    bias_ptr = bias_f.data_ptr<float>();
  }
  constexpr int64_t BLOCK_M = 64;  // rows of y kept in a thread's buffer at a time
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "w4a8_linear", [&] {
    scalar_t* out_ptr = output.data_ptr<scalar_t>();
    at::parallel_for(0, Nc, 1, [&](int64_t begin, int64_t end) {
      alignas(64) float y[BLOCK_M * BLOCK_N];
      for (int64_t nc = begin; nc < end; ++nc) {
        for (int64_t m0 = 0; m0 < M; m0 += BLOCK_M) {
          const int64_t rows = std::min(BLOCK_M, M - m0);
          for (int64_t m = 0; m < rows; ++m)
            for (int n = 0; n < BLOCK_N; ++n) y[m * BLOCK_N + n] = bias_ptr ? bias_ptr[nc * BLOCK_N + n] : 0.f;
          for (int64_t kc = 0; kc < Kc; ++kc) {
            group_all_rows(y, a_ptr + m0 * K + kc * GROUP, sa_ptr + m0 * Kc + kc, za_ptr + m0 * Kc + kc,
                           b_ptr + (nc * Kc + kc) * BLOCK_N * GROUP / 2, sb_ptr + (nc * Kc + kc) * BLOCK_N,
                           zb_ptr + (nc * Kc + kc) * BLOCK_N, rows, K, Kc, BLOCK_N);
          }
          store_rows(y, out_ptr + m0 * N + nc * BLOCK_N, rows, N);
        }
      }
    });
  });
  return output;
}

}  // anonymous namespace

TORCH_LIBRARY(LIBNAME, m) {
  m.def("w4a8_prepack(Tensor codes, Tensor scales, Tensor qzeros) -> (Tensor, Tensor, Tensor)");
  m.def("w4a8_linear(Tensor x, Tensor weight, Tensor scales, Tensor qzeros, Tensor? bias) -> Tensor");
}
TORCH_LIBRARY_IMPL(LIBNAME, CPU, m) {
  m.impl("w4a8_prepack", &w4a8_prepack);
  m.impl("w4a8_linear", &w4a8_linear);
}

}  // namespace specviz_w4a8
