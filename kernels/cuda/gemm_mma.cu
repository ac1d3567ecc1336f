// gemm_mma.cu: tensor-core GEMM, C[M,N] = A[M,K] . B[N,K]^T (both operands K-major: the nn.Linear
// layout, A = activations, B = weight), bf16 or fp16 in, fp32 accumulate, output bf16/fp16 or fp32.
//
// Plainly correct over clever (an Ampere-style mma.sync kernel; on Hopper it runs on the mma.sync
// path, below the wgmma peak: see docs/cuda_kernels.md):
//   * block tile BM x BN x BK = 128 x 128 x 32, 256 threads = 8 warps arranged WARPS_M x WARPS_N =
//     2 x 4; each warp owns a 64 x 32 sub-tile = MT x NT = 4 x 4 fragments of 16 x 8.
//   * STAGES = 3 shared-memory stages filled by cp.async.cg (16-byte LDGSTS, L1 bypass), one
//     commit group per K tile, cp.async.wait_group STAGES-2 before each tile is used.
//   * shared memory: per stage A[BM][BK] and B[BN][BK] halves, rows of 64 bytes = 4 chunks of 16
//     bytes; chunk c of row r lives at chunk position c ^ ((r >> 1) & 3) (XOR swizzle). The 8 row
//     addresses of one ldmatrix 8x8 matrix (8 consecutive rows, one chunk column) then hit 8
//     distinct 16-byte bank groups: no bank conflicts, and no padding (3 stages = 48 KiB, exactly
//     the static limit).
//   * fragments by ldmatrix.sync.aligned.m8n8.x4.shared.b16 and the documented PTX layout of
//     mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (groupID = lane >> 2,
//     tig = lane & 3):
//       A a0..a7 : row g (+8 for a2,a3,a6,a7), col 2*tig + (i&1) (+8 for i >= 4)
//       B b0..b3 : row(k) 2*tig + (i&1) (+8 for i >= 2), col(n) g
//       C c0..c3 : row g (+8 for i >= 2), col 2*tig + (i&1)
//     A: lane L addresses row (L & 15), k chunk (L >> 4) of a 16x16 block -> registers a0a1, a2a3,
//        a4a5, a6a7 in that order.
//     B: lane L addresses n row (L & 7) + 8*(L >> 4), k chunk (L >> 3) & 1 of a 16(n) x 16(k)
//        block -> {b0b1, b2b3} of n-tile j and of n-tile j+1.
//   * edges: rows of A/B past M/N and k chunks past K are zero-filled by cp.async (src-size 0; the
//     source address is clamped to the matrix base); the epilogue stores only row < M, col < N.
//   * REQUIREMENT: K % 8 == 0 (every 16-byte chunk of a row is either wholly inside K or wholly past
//     it, and rows are 16-byte aligned), A, B 16-byte aligned. M, N, K any positive otherwise.
//
// Entry points (extern "C", 256 threads, 49152 bytes of static shared memory, no dynamic):
//   gemm_mma_<in>_<out>(const Tin* A, const Tin* B, Tout* C, int M, int N, int K)
//   <in> in {bf16, fp16}; <out> in {<in>, f32}; grid (ceil(N/128), ceil(M/128), 1).
// kernels/cuda_models.py holds a numpy model of exactly this tiling (swizzle, ldmatrix addressing,
// fragment layout, edge masking, stage rotation), checked against A @ B.T on ragged shapes.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace roofprof_gemm {

constexpr int BM = 128;
constexpr int BN = 128;
constexpr int BK = 32;
constexpr int STAGES = 3;
constexpr int WARPS_M = 2;
constexpr int WARPS_N = 4;
constexpr int THREADS = WARPS_M * WARPS_N * 32;
constexpr int WM = BM / WARPS_M;  // 64 rows per warp
constexpr int WN = BN / WARPS_N;  // 32 cols per warp
constexpr int MT = WM / 16;       // 4 m16 fragments per warp
constexpr int NT = WN / 8;        // 4 n8 fragments per warp
constexpr int CHUNKS = BK / 8;    // 16-byte chunks per smem row
static_assert(CHUNKS == 4, "the swizzle below assumes 4 chunks (64 bytes) per row");
static_assert((BM * CHUNKS) % THREADS == 0 && (BN * CHUNKS) % THREADS == 0, "tile/thread mismatch");
static_assert(NT % 2 == 0, "B fragments are loaded two n-tiles per ldmatrix.x4");

__device__ __forceinline__ int swizzle(int row, int chunk) { return chunk ^ ((row >> 1) & 3); }

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src, bool valid) {
  // src-size 0: nothing is read and the 16 destination bytes are zero-filled.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem_dst)),
               "l"(gmem_src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem_src) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(smem_src)));
}

template <typename T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

// Output conversion: a pair of adjacent columns (c0 at col, c1 at col + 1).
__device__ __forceinline__ void store_pair(float* C, long long idx, float c0, float c1, bool pair) {
  if (pair) {
    *reinterpret_cast<float2*>(C + idx) = make_float2(c0, c1);
  } else {
    C[idx] = c0;
  }
}
__device__ __forceinline__ void store_pair(__nv_bfloat16* C, long long idx, float c0, float c1,
                                           bool pair) {
  if (pair) {
    *reinterpret_cast<__nv_bfloat162*>(C + idx) = __floats2bfloat162_rn(c0, c1);
  } else {
    C[idx] = __float2bfloat16_rn(c0);
  }
}
__device__ __forceinline__ void store_pair(__half* C, long long idx, float c0, float c1, bool pair) {
  if (pair) {
    *reinterpret_cast<__half2*>(C + idx) = __floats2half2_rn(c0, c1);
  } else {
    C[idx] = __float2half_rn(c0);
  }
}

template <typename TO>
__device__ __forceinline__ void store_fragment_row(TO* C, int M, int N, int row, int col, float c0,
                                                   float c1) {
  if (row >= M || col >= N) return;
  const long long idx = static_cast<long long>(row) * N + col;
  // A 2-element store needs col + 1 < N and an even N (then idx is even and the pair is aligned).
  const bool pair = (col + 1 < N) && ((N & 1) == 0);
  store_pair(C, idx, c0, c1, pair);
  if (!pair && col + 1 < N) store_pair(C, idx + 1, c1, 0.0f, false);
}

template <typename T, typename TO>
__device__ __forceinline__ void gemm_body(const T* __restrict__ A, const T* __restrict__ B,
                                          TO* __restrict__ C, int M, int N, int K) {
  // Raw 16-bit storage (the bits of T); 2 operands x 3 stages x 128 rows x 32 halves = 48 KiB.
  __shared__ __align__(128) unsigned short sA[STAGES][BM * BK];
  __shared__ __align__(128) unsigned short sB[STAGES][BN * BK];

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_m = warp / WARPS_N;  // 0..1
  const int warp_n = warp % WARPS_N;  // 0..3
  const int block_m = blockIdx.y * BM;
  const int block_n = blockIdx.x * BN;
  const int k_tiles = (K + BK - 1) / BK;

  // Issue the cp.async copies of K tile `kt` into stage `stage` (no commit).
  auto load_tile = [&](int stage, int kt) {
#pragma unroll
    for (int i = 0; i < (BM * CHUNKS) / THREADS; ++i) {
      const int id = tid + i * THREADS;
      const int row = id / CHUNKS;
      const int c = id % CHUNKS;
      const int gr = block_m + row;
      const int gk = kt * BK + c * 8;
      const bool valid = gr < M && gk < K;
      const T* src = valid ? A + static_cast<long long>(gr) * K + gk : A;
      cp_async16(&sA[stage][row * BK + swizzle(row, c) * 8], src, valid);
    }
#pragma unroll
    for (int i = 0; i < (BN * CHUNKS) / THREADS; ++i) {
      const int id = tid + i * THREADS;
      const int row = id / CHUNKS;
      const int c = id % CHUNKS;
      const int gr = block_n + row;
      const int gk = kt * BK + c * 8;
      const bool valid = gr < N && gk < K;
      const T* src = valid ? B + static_cast<long long>(gr) * K + gk : B;
      cp_async16(&sB[stage][row * BK + swizzle(row, c) * 8], src, valid);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

  // Prologue: tiles 0 .. STAGES-2 (one commit group each, empty groups past the end keep the
  // group count uniform so wait_group<STAGES-2> always means "tile kt has landed").
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile kt visible to all warps; all warps are done with tile kt-1

    // Prefetch tile kt+STAGES-1 into the stage that held tile kt-1.
    const int next = kt + STAGES - 1;
    if (next < k_tiles) load_tile(next % STAGES, next);
    cp_async_commit();

    const int stage = kt % STAGES;
    const unsigned short* a_s = sA[stage];
    const unsigned short* b_s = sB[stage];
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned a_frag[MT][4];
      unsigned b_frag[NT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int row = warp_m * WM + mt * 16 + (lane & 15);
        const int chunk = kk * 2 + (lane >> 4);
        ldmatrix_x4(a_frag[mt], a_s + row * BK + swizzle(row, chunk) * 8);
      }
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        const int row = warp_n * WN + np * 16 + (lane & 7) + ((lane >> 4) << 3);
        const int chunk = kk * 2 + ((lane >> 3) & 1);
        unsigned r[4];
        ldmatrix_x4(r, b_s + row * BK + swizzle(row, chunk) * 8);
        b_frag[2 * np][0] = r[0];
        b_frag[2 * np][1] = r[1];
        b_frag[2 * np + 1][0] = r[2];
        b_frag[2 * np + 1][1] = r[3];
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) Mma<T>::run(acc[mt][nt], a_frag[mt], b_frag[nt]);
    }
  }
  cp_async_wait<0>();  // drain (only empty groups can be left)

  // Epilogue: C fragment c0,c1 at (g, 2*tig..+1), c2,c3 at (g+8, 2*tig..+1).
  const int g = lane >> 2;
  const int tig = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int row = block_m + warp_m * WM + mt * 16 + g;
      const int col = block_n + warp_n * WN + nt * 8 + tig * 2;
      store_fragment_row(C, M, N, row, col, acc[mt][nt][0], acc[mt][nt][1]);
      store_fragment_row(C, M, N, row + 8, col, acc[mt][nt][2], acc[mt][nt][3]);
    }
  }
}

}  // namespace roofprof_gemm

#define ROOFPROF_GEMM_ENTRY(NAME, T, TO)                                                        \
  extern "C" __global__ void __launch_bounds__(roofprof_gemm::THREADS)                         \
      NAME(const T* __restrict__ A, const T* __restrict__ B, TO* __restrict__ C, int M, int N,  \
           int K) {                                                                             \
    roofprof_gemm::gemm_body<T, TO>(A, B, C, M, N, K);                                          \
  }

ROOFPROF_GEMM_ENTRY(gemm_mma_bf16_bf16, __nv_bfloat16, __nv_bfloat16)
ROOFPROF_GEMM_ENTRY(gemm_mma_bf16_f32, __nv_bfloat16, float)
ROOFPROF_GEMM_ENTRY(gemm_mma_fp16_fp16, __half, __half)
ROOFPROF_GEMM_ENTRY(gemm_mma_fp16_f32, __half, float)
