// Emulated WMMA (nvcuda::wmma, g++ build only): warp-collective fragments for
// bf16/half inputs with fp32 accumulation. As on the GPU, each lane holds only its
// share of a tile (element e of lane l is tile position e*32 + l, row-major), so
// per-lane loops over frag.x[] and warp reductions count every element once.
// mma_sync exchanges fragments through a per-block table at a warp rendezvous.
// The emulated build's <mma.h> (emu/include/) includes it; nvcc uses the toolkit's.
//
// Profile build (emu/profile.h): loads and stores report the accesses the GPU's
// instructions make, not the element copies below (which are not counted):
//  * matrix_a/matrix_b loads as ldmatrix.x4 does: the tile's contiguous runs
//    (rows for row_major, columns for col_major) cut into 16-byte pieces; lanes
//    8i..8i+7 give the 8 rows of matrix i, matrices ordered rows 0-7, rows 8-15
//    of the first 16-byte column chunk, then the next chunk; 32 pieces per
//    request (a 16x16 bf16 tile: one request, 4 quarter-warp passes);
//  * accumulator loads/stores as the mma.sync C layout: 8x8 blocks, lane
//    (g = lane/4, t = lane%4) owns row g, columns 2t and 2t+1 of each block: one
//    8-byte access per block and lane in row-major memory, two 4-byte ones in
//    column-major memory.
#ifndef EMU_WMMA_H
#define EMU_WMMA_H

#include <cstdint>
#include <type_traits>

#include "emu/device.h"
#if GPT2_EMU_PROFILE
#include "emu/profile.h"
// The element copies below are the emulator's, not the GPU's: not instrumented.
#define GPT2_EMU_WMMA_UNCOUNTED __attribute__((no_sanitize("address"), noinline))
#else
#define GPT2_EMU_WMMA_UNCOUNTED
#endif

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
#if GPT2_EMU_PROFILE
// ldmatrix-style pieces of a tile of `runs` contiguous runs of `run_bytes` each,
// `stride` bytes apart: this lane's pieces, in the order the instruction takes them.
inline void report_tile_rows(const void* site, const void* ptr, int runs, int run_bytes, size_t stride) {
  const int rows_per_matrix = runs < 8 ? runs : 8;
  const unsigned me = lane();
  int piece = 0;
  for (int chunk = 0; chunk < run_bytes / 16; ++chunk)
    for (int block = 0; block < runs / rows_per_matrix; ++block)
      for (int r = 0; r < rows_per_matrix; ++r, ++piece)
        if (piece % 32 == static_cast<int>(me))
          gpt2::emu::profile::record(site, static_cast<const char*>(ptr) + (block * rows_per_matrix + r) * stride +
                                               chunk * 16, 16, false);
}
// The mma.sync C layout over a rows x cols fp32 tile: 8x8 blocks, this lane's pair in each.
inline void report_accumulator(const void* site, const float* ptr, int rows, int cols, unsigned ldm, bool row_major,
                               bool store) {
  const unsigned me = lane(), g = me / 4, t = me % 4;
  for (int br = 0; br < rows; br += 8)
    for (int bc = 0; bc < cols; bc += 8) {
      const int r = br + static_cast<int>(g), c = bc + 2 * static_cast<int>(t);
      if (row_major) {
        gpt2::emu::profile::record(site, ptr + size_t(r) * ldm + c, 8, store);
      } else {
        gpt2::emu::profile::record(site, ptr + size_t(c) * ldm + r, 4, store);
        gpt2::emu::profile::record(site, ptr + size_t(c + 1) * ldm + r, 4, store);
      }
    }
}
#endif
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, T value) {
  for (int e = 0; e < f.num_elements; ++e) f.x[e] = value;
}

template <class Use, int M, int N, int K, class T, class L>
GPT2_EMU_WMMA_UNCOUNTED inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const T* ptr, unsigned ldm,
                                                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  static_assert(!std::is_same<Use, accumulator>::value, "accumulator loads need a layout_t argument");
  __syncwarp(0xffffffffu, file, line);
  detail::check_ldm(ldm, 16 / sizeof(T), ptr, file, line);
#if GPT2_EMU_PROFILE
  constexpr bool kRowMajor = std::is_same<L, row_major>::value;
  detail::report_tile_rows(__builtin_return_address(0), ptr, kRowMajor ? f.rows : f.cols,
                           (kRowMajor ? f.cols : f.rows) * static_cast<int>(sizeof(T)), size_t(ldm) * sizeof(T));
#endif
  unsigned lane = detail::lane();
  for (int e = 0; e < f.num_elements; ++e) {
    int p = e * 32 + static_cast<int>(lane), r = p / f.cols, c = p % f.cols;
    f.x[e] = std::is_same<L, row_major>::value ? ptr[r * ldm + c] : ptr[c * ldm + r];
  }
}

template <int M, int N, int K>
GPT2_EMU_WMMA_UNCOUNTED inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* ptr,
                                                     unsigned ldm, layout_t layout,
                                                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  __syncwarp(0xffffffffu, file, line);
  detail::check_ldm(ldm, 4, ptr, file, line);
#if GPT2_EMU_PROFILE
  detail::report_accumulator(__builtin_return_address(0), ptr, f.rows, f.cols, ldm, layout == mem_row_major, false);
#endif
  unsigned lane = detail::lane();
  for (int e = 0; e < f.num_elements; ++e) {
    int p = e * 32 + static_cast<int>(lane), r = p / f.cols, c = p % f.cols;
    f.x[e] = layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r];
  }
}

template <int M, int N, int K>
GPT2_EMU_WMMA_UNCOUNTED inline void store_matrix_sync(float* ptr, const fragment<accumulator, M, N, K, float>& f,
                                                      unsigned ldm, layout_t layout,
                                                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  __syncwarp(0xffffffffu, file, line);
  detail::check_ldm(ldm, 4, ptr, file, line);
#if GPT2_EMU_PROFILE
  detail::report_accumulator(__builtin_return_address(0), ptr, f.rows, f.cols, ldm, layout == mem_row_major, true);
#endif
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
