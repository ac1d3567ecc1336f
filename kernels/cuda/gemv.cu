// gemv.cu: decode-shaped matrix-vector products, y[M,N] = x[M,K] . W[N,K]^T.
//
// W is the nn.Linear weight of a Llama layer (row-major [N, K], row stride ldw elements); x holds M
// activation rows (row stride ldx elements, M small: 1..16 for decode); y is [M, N] contiguous
// (row stride N). Inputs bf16 or fp16, fp32 accumulation, output in the input dtype.
//
// Design (one concept: a memory-bound streaming read of W):
//   * one warp per output column n (a row of W); WARPS_PER_BLOCK = 8 warps, 256 threads per block;
//     grid.x = ceil(N / 8).
//   * each lane reads 16-byte vectors (uint4 = 8 halves) of W with __ldg, UNROLL = 4 vectors in
//     flight before the first use, lane-strided so a warp reads 512 contiguous bytes per vector step;
//     the matching 16-byte vectors of x come from L1/L2 (x is tiny and shared by all warps).
//   * MT accumulators (a compile-time tile of rows of x, MT in {1,2,4,8,16}); M > MT loops over row
//     tiles (re-reading W: correct, not fast; the host picks MT >= M).
//   * warp-shuffle butterfly reduction (__shfl_xor_sync), after which lane m stores row m.
//   * vector path only when ldx, ldw and the split's first k are multiples of 8 and x, W are
//     16-byte aligned (a run-time, block-uniform test); the elements past the last whole vector
//     of the K range (K % 8 of them) go through a scalar tail. Without the vector path the whole
//     range is scalar (correct, slow). The host passes k_chunk % 8 == 0, so every split starts
//     8-aligned and only the last split can have a tail.
//   * split-K: grid.y = splits; split s covers k in [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its
//     fp32 partial sums to ws[s][M][N]; gemv_splitk_reduce_<dt> sums the splits in a fixed order
//     (deterministic, no atomics) and converts to the output dtype. Used when ceil(N/8) blocks would
//     not fill the GPU.
//
// Entry points (all extern "C", 256 threads per block, no dynamic shared memory):
//   gemv_<dt>_m<MT>(const T* x, const T* W, T* y, int M, int N, int K, int ldx, int ldw)
//       grid (ceil(N/8), 1, 1)
//   gemv_splitk_<dt>_m<MT>(const T* x, const T* W, float* ws, int M, int N, int K, int ldx, int ldw,
//                          int k_chunk)
//       grid (ceil(N/8), splits, 1); k_chunk a positive multiple of 8, splits*k_chunk >= K
//   gemv_splitk_reduce_<dt>(const float* ws, T* y, int M, int N, int splits)
//       grid (ceil(M*N/256), 1, 1)
//   with <dt> in {bf16, fp16} (T = __nv_bfloat16 / __half) and <MT> in {1, 2, 4, 8, 16}.
// kernels/cuda_models.py holds the launch geometry, the split heuristic, the FLOP/byte model and a
// numpy model of the partition; docs/cuda_kernels.md explains what is and is not proven without a GPU.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace roofprof_gemv {

constexpr int WARPS_PER_BLOCK = 8;
constexpr int THREADS = WARPS_PER_BLOCK * 32;
constexpr int VEC = 8;     // halves per 16-byte vector
constexpr int UNROLL = 4;  // 16-byte W vectors in flight per lane
constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// One 32-bit word holding two 16-bit values -> two floats (low half first).
__device__ __forceinline__ float2 word_to_float2(unsigned int u, __half) {
  __half2 h = *reinterpret_cast<const __half2*>(&u);
  return __half22float2(h);
}
__device__ __forceinline__ float2 word_to_float2(unsigned int u, __nv_bfloat16) {
  // bf16 -> fp32 is exact: the bf16 bits are the top 16 bits of the fp32 value.
  return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}

// acc += dot(w[0..8), x[0..8)) for one 16-byte vector of each.
template <typename T>
__device__ __forceinline__ float dot8(const uint4& w, const uint4& x, float acc) {
  const unsigned int wv[4] = {w.x, w.y, w.z, w.w};
  const unsigned int xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 wf = word_to_float2(wv[j], T());
    const float2 xf = word_to_float2(xv[j], T());
    acc = fmaf(xf.x, wf.x, acc);
    acc = fmaf(xf.y, wf.y, acc);
  }
  return acc;
}

__device__ __forceinline__ uint4 ldg128(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// The shared body of the plain and the split-K kernels. `split` selects the K range; when `ws` is
// non-null the fp32 partial sums go to ws[split][M][N], otherwise the converted result goes to y.
template <typename T, int MT>
__device__ __forceinline__ void gemv_body(const T* __restrict__ x, const T* __restrict__ W,
                                          T* __restrict__ y, float* __restrict__ ws, int M, int N,
                                          int K, int ldx, int ldw, int k_chunk, int split) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n = blockIdx.x * WARPS_PER_BLOCK + warp;
  if (n >= N) return;  // warp-uniform: the whole warp leaves together

  const long long k_begin_ll = static_cast<long long>(split) * k_chunk;
  const int k_begin = k_begin_ll < K ? static_cast<int>(k_begin_ll) : K;
  const int k_end = (K - k_begin < k_chunk) ? K : k_begin + k_chunk;
  const bool vec_ok = ((ldx | ldw | k_begin) & (VEC - 1)) == 0 &&
                      ((reinterpret_cast<unsigned long long>(x) |
                        reinterpret_cast<unsigned long long>(W)) & 15ull) == 0;
  const int n_vec = vec_ok ? (k_end - k_begin) / VEC : 0;  // whole 16-byte vectors in this split
  const int k_tail = k_begin + n_vec * VEC;                // first element of the scalar tail

  const T* w_row = W + static_cast<long long>(n) * ldw;

  for (int m0 = 0; m0 < M; m0 += MT) {
    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.0f;

    // Vector body: lane handles vectors v = lane, lane+32, ...; UNROLL of them per trip.
    int v = lane;
    for (; v + (UNROLL - 1) * 32 < n_vec; v += UNROLL * 32) {
      uint4 w[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) w[u] = ldg128(w_row + k_begin + (v + u * 32) * VEC);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m0 + m < M) {
          const T* x_row = x + static_cast<long long>(m0 + m) * ldx + k_begin;
#pragma unroll
          for (int u = 0; u < UNROLL; ++u) {
            const uint4 xv = ldg128(x_row + (v + u * 32) * VEC);
            acc[m] = dot8<T>(w[u], xv, acc[m]);
          }
        }
      }
    }
    for (; v < n_vec; v += 32) {
      const uint4 w = ldg128(w_row + k_begin + v * VEC);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m0 + m < M) {
          const uint4 xv = ldg128(x + static_cast<long long>(m0 + m) * ldx + k_begin + v * VEC);
          acc[m] = dot8<T>(w, xv, acc[m]);
        }
      }
    }
    // Scalar tail: elements [k_tail, k_end).
    for (int k = k_tail + lane; k < k_end; k += 32) {
      const float wk = to_float(w_row[k]);
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        if (m0 + m < M) {
          acc[m] = fmaf(to_float(x[static_cast<long long>(m0 + m) * ldx + k]), wk, acc[m]);
        }
      }
    }

    // Butterfly reduction: afterwards every lane holds the full sums.
#pragma unroll
    for (int m = 0; m < MT; ++m) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[m] += __shfl_xor_sync(FULL_MASK, acc[m], off);
    }
    // Lane m stores row m0 + m (MT <= 16 < 32).
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (lane == m && m0 + m < M) {
        const long long row = m0 + m;
        if (ws != nullptr) {
          ws[(static_cast<long long>(split) * M + row) * N + n] = acc[m];
        } else {
          y[row * N + n] = from_float<T>(acc[m]);
        }
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void splitk_reduce_body(const float* __restrict__ ws, T* __restrict__ y,
                                                   int M, int N, int splits) {
  const long long total = static_cast<long long>(M) * N;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    float s = 0.0f;
    for (int p = 0; p < splits; ++p) s += ws[p * total + i];  // fixed order: deterministic
    y[i] = from_float<T>(s);
  }
}

}  // namespace roofprof_gemv

#define ROOFPROF_GEMV_ENTRIES(DT, T, MT)                                                         \
  extern "C" __global__ void __launch_bounds__(roofprof_gemv::THREADS)                          \
      gemv_##DT##_m##MT(const T* __restrict__ x, const T* __restrict__ W, T* __restrict__ y,    \
                        int M, int N, int K, int ldx, int ldw) {                                 \
    roofprof_gemv::gemv_body<T, MT>(x, W, y, nullptr, M, N, K, ldx, ldw, K, 0);                 \
  }                                                                                              \
  extern "C" __global__ void __launch_bounds__(roofprof_gemv::THREADS)                          \
      gemv_splitk_##DT##_m##MT(const T* __restrict__ x, const T* __restrict__ W,                \
                               float* __restrict__ ws, int M, int N, int K, int ldx, int ldw,   \
                               int k_chunk) {                                                    \
    roofprof_gemv::gemv_body<T, MT>(x, W, nullptr, ws, M, N, K, ldx, ldw, k_chunk,              \
                                    static_cast<int>(blockIdx.y));                               \
  }

#define ROOFPROF_GEMV_DTYPE(DT, T)                                                               \
  ROOFPROF_GEMV_ENTRIES(DT, T, 1)                                                                \
  ROOFPROF_GEMV_ENTRIES(DT, T, 2)                                                                \
  ROOFPROF_GEMV_ENTRIES(DT, T, 4)                                                                \
  ROOFPROF_GEMV_ENTRIES(DT, T, 8)                                                                \
  ROOFPROF_GEMV_ENTRIES(DT, T, 16)                                                               \
  extern "C" __global__ void __launch_bounds__(roofprof_gemv::THREADS)                          \
      gemv_splitk_reduce_##DT(const float* __restrict__ ws, T* __restrict__ y, int M, int N,    \
                              int splits) {                                                      \
    roofprof_gemv::splitk_reduce_body<T>(ws, y, M, N, splits);                                   \
  }

ROOFPROF_GEMV_DTYPE(bf16, __nv_bfloat16)
ROOFPROF_GEMV_DTYPE(fp16, __half)
