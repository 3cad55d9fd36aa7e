// Emulated WMMA (nvcuda::wmma, g++ build only): warp-collective fragments for
// bf16/half inputs with fp32 accumulation. As on the GPU, each lane holds only its
// share of a tile (element e of lane l is tile position e*32 + l, row-major), so
// per-lane loops over frag.x[] and warp reductions count every element once.
// mma_sync exchanges fragments through a per-block table at a warp rendezvous.
// Under nvcc, emu/cuda.cuh includes <mma.h> instead.
#ifndef EMU_WMMA_H
#define EMU_WMMA_H

#include <cstdint>
#include <type_traits>

#include "emu/device.h"

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K>
struct tile_shape;
template <int M, int N, int K>
struct tile_shape<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K>
struct tile_shape<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K>
struct tile_shape<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
  static_assert((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) || (M == 8 && N == 32 && K == 16),
                "WMMA shape must be 16x16x16, 32x8x16 or 8x32x16");
  static_assert(!std::is_same<Use, accumulator>::value || std::is_same<T, float>::value,
                "the emulator supports fp32 accumulators only");
  static_assert(std::is_same<Use, accumulator>::value ||
                    std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                "matrix_a/matrix_b fragments must be __nv_bfloat16 or __half");

 public:
  using element_type = T;
  using use = Use;
  using layout = Layout;
  static constexpr int rows = tile_shape<Use, M, N, K>::rows;
  static constexpr int cols = tile_shape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols / 32;
  T x[num_elements];
};

namespace detail {
inline unsigned lane() {
  const uint3& t = threadIdx;
  const dim3& d = blockDim;
  return (t.x + d.x * (t.y + d.y * t.z)) % 32;
}
inline unsigned linear_thread() {
  const uint3& t = threadIdx;
  const dim3& d = blockDim;
  return t.x + d.x * (t.y + d.y * t.z);
}
// Fragments published for mma_sync, per thread of the block running on this OS thread.
struct Published {
  const void* a;
  const void* b;
};
inline Published* published() {
  static thread_local Published table[1024];
  return table;
}
inline void check_ldm(unsigned ldm, unsigned multiple, const void* ptr, const char* file, int line) {
  if (ldm % multiple != 0)
    gpt2::emu::device_fault("wmma", "ldm must be a multiple of 16 bytes", file, line);
  if (reinterpret_cast<uintptr_t>(ptr) % 32 != 0)
    gpt2::emu::device_fault("wmma", "fragment pointer must be 32-byte aligned", file, line);
}
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, T value) {
  for (int e = 0; e < f.num_elements; ++e) f.x[e] = value;
}

template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* ptr, unsigned ldm,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(!std::is_same<Use, accumulator>::value, "accumulator loads need a layout_t argument");
  __syncwarp(0xffffffffu, file, line);
  detail::check_ldm(ldm, 16 / sizeof(T), ptr, file, line);
  unsigned lane = detail::lane();
  for (int e = 0; e < f.num_elements; ++e) {
    int p = e * 32 + static_cast<int>(lane), r = p / f.cols, c = p % f.cols;
    f.x[e] = std::is_same<L, row_major>::value ? ptr[r * ldm + c] : ptr[c * ldm + r];
  }
}

template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* ptr, unsigned ldm, layout_t layout,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  __syncwarp(0xffffffffu, file, line);
  detail::check_ldm(ldm, 4, ptr, file, line);
  unsigned lane = detail::lane();
  for (int e = 0; e < f.num_elements; ++e) {
    int p = e * 32 + static_cast<int>(lane), r = p / f.cols, c = p % f.cols;
    f.x[e] = layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r];
  }
}

template <int M, int N, int K>
inline void store_matrix_sync(float* ptr, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout,
                              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  __syncwarp(0xffffffffu, file, line);
  detail::check_ldm(ldm, 4, ptr, file, line);
  unsigned lane = detail::lane();
  for (int e = 0; e < f.num_elements; ++e) {
    int p = e * 32 + static_cast<int>(lane), r = p / f.cols, c = p % f.cols;
    (layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r]) = f.x[e];
  }
}

// d = a * b + c with fp32 accumulation (bf16/half products are exact in fp32).
template <int M, int N, int K, class T, class LA, class LB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, float>& c,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using FragA = fragment<matrix_a, M, N, K, T, LA>;
  using FragB = fragment<matrix_b, M, N, K, T, LB>;
  unsigned lane = detail::lane(), me = detail::linear_thread(), base = me - lane;
  detail::Published* table = detail::published();
  table[me] = detail::Published{&a, &b};
  __syncwarp(0xffffffffu, file, line);  // every lane has published its fragments
  float out[fragment<accumulator, M, N, K, float>::num_elements];
  for (int e = 0; e < d.num_elements; ++e) {
    int p = e * 32 + static_cast<int>(lane), r = p / N, col = p % N;
    float sum = c.x[e];
    for (int k = 0; k < K; ++k) {
      int pa = r * K + k, pb = k * N + col;
      const FragA* fa = static_cast<const FragA*>(table[base + pa % 32].a);
      const FragB* fb = static_cast<const FragB*>(table[base + pb % 32].b);
      sum += static_cast<float>(fa->x[pa / 32]) * static_cast<float>(fb->x[pb / 32]);
    }
    out[e] = sum;
  }
  __syncwarp(0xffffffffu, file, line);  // nobody overwrites a fragment another lane still reads
  for (int e = 0; e < d.num_elements; ++e) d.x[e] = out[e];
}

}  // namespace wmma
}  // namespace nvcuda

#endif  // EMU_WMMA_H
