/*
 * eg_gemm.h -- ember's own GEMM (eg_gemm_args; abi.h says how to launch): c = alpha * a @ b +
 * beta * c over a batch, every operand with its own batch, row and column strides (so a
 * transposed or sliced view is read where it lies).  What float matmul runs on when no vendor BLAS
 * loads (ember-rocm without hipBLAS / rocBLAS, ember-cuda without cuBLAS), or on request.
 *
 * Tiling: a block of EG_BLOCK threads computes a BM x BN tile of c; per step of BK along k it
 * stages a BM x BK tile of a and a BK x BN tile of b in shared memory (in the compute type), and
 * each thread accumulates a TM x TN micro-tile in registers (rows ty + i * BM / TM, columns
 * tx + j * BN / TN, so a warp's loads from the b tile are consecutive and its stores to c are too).
 * The next step's tiles are fetched into registers while this step computes.  Global loads run
 * along whichever of an operand's two strides is smaller, so row-major and transposed operands
 * both load coalesced.  No warp primitive: any warp size (32 or 64) runs the same code.
 *
 * Deterministic and vendor-neutral in its rounding: every element of c is one fused multiply-add
 * chain over k = 0, 1, ..., k - 1 in order, explicit (D::madd), in the accumulation type (float32
 * for float16 / bfloat16 / float32, float64 for float64, the complex types' parts likewise), then
 * alpha * acc (+ beta * c, c not read when beta is 0) (+ bias) (through relu) rounded once to c's
 * dtype.  No split-k, no atomics: the bits depend on the inputs and the shape only, on the host as on
 * any GPU.
 *
 * The epilogue lives in the store so that linear's and conv2d's bias and relu cost no pass of their
 * own over c: the bias is one more operand with c's shape (strides 0 where it broadcasts), added in
 * the accumulation type before the one rounding; relu is maximum(v, 0) with NaN and -0 kept, as
 * eg_conv.h's epilogue defines it.
 *
 * D: struct { typedef ... T (stored), C (accumulated); static C load(T); static T store(C);
 *             static C madd(C x, C y, C acc) (acc + x * y, fused); static C scalar(const double *re_im);
 *             static C relu(C) (v itself for the complex types, which no caller asks relu of) }
 */
#ifndef EG_GEMM_H
#define EG_GEMM_H

static EG_HD EG_INLINE eg_i64 eg_gemm_abs(eg_i64 v) { return v < 0 ? -v : v; }

/* This thread's share of one operand's ROWS x BK tile from global memory into registers: element
 * (r, kk) at base[r * row_stride + kk * k_stride], zero past `rows` or `depth`.  k_fast: consecutive
 * threads take consecutive kk (the operand's k stride is the smaller), else consecutive r. */
template <class D, int ROWS, int BK>
static __device__ EG_INLINE void eg_gemm_fetch(typename D::C *regs, const typename D::T *base, eg_i64 rows,
                                               eg_i64 depth, eg_i64 row_stride, eg_i64 k_stride, bool k_fast)
{
    constexpr int PER = ROWS * BK / EG_BLOCK;
EG_UNROLL
    for (int l = 0; l < PER; l++) {
        const int e = (int)threadIdx.x + l * EG_BLOCK;
        const int r = k_fast ? e / BK : e % ROWS, kk = k_fast ? e % BK : e / ROWS;
        regs[l] = r < rows && kk < depth ? D::load(base[r * row_stride + kk * k_stride]) : typename D::C{};
    }
}

/* The registers of eg_gemm_fetch into the shared tile, stored k-major: tile[kk * (ROWS + PAD) + r]. */
template <class D, int ROWS, int BK, int PAD>
static __device__ EG_INLINE void eg_gemm_stash(typename D::C *tile, const typename D::C *regs, bool k_fast)
{
    constexpr int PER = ROWS * BK / EG_BLOCK;
EG_UNROLL
    for (int l = 0; l < PER; l++) {
        const int e = (int)threadIdx.x + l * EG_BLOCK;
        const int r = k_fast ? e / BK : e % ROWS, kk = k_fast ? e % BK : e / ROWS;
        tile[kk * (ROWS + PAD) + r] = regs[l];
    }
}

template <class D, bool EPILOGUE, int BM, int BN, int BK, int TM, int TN>
static __device__ EG_INLINE void eg_gemm(const eg_gemm_args a)
{
    typedef typename D::T T;
    typedef typename D::C C;
    constexpr int TX = BN / TN, TY = BM / TM, PAD = 4;   /* PAD: k-fast stashes spread over the banks */
    static_assert(TX * TY == EG_BLOCK, "one micro-tile per thread of an EG_BLOCK block");
    static_assert(BM * BK % EG_BLOCK == 0 && BN * BK % EG_BLOCK == 0, "tiles load evenly");
    __shared__ C a_tile[BK * (BM + PAD)];
    __shared__ C b_tile[BK * (BN + PAD)];
    C a_next[BM * BK / EG_BLOCK], b_next[BN * BK / EG_BLOCK], acc[TM][TN];
    const int tx = (int)threadIdx.x % TX, ty = (int)threadIdx.x / TX;
    const eg_i64 tiles_n = (a.n + BN - 1) / BN, per_matrix = (a.m + BM - 1) / BM * tiles_n;
    /* a's rows are m, its k stride its column stride; b's "rows" are n (its columns), k its rows */
    const bool a_k_fast = eg_gemm_abs(a.a_strides[2]) < eg_gemm_abs(a.a_strides[1]);
    const bool b_k_fast = eg_gemm_abs(a.b_strides[1]) < eg_gemm_abs(a.b_strides[2]);
    const C alpha = D::scalar(a.alpha), beta = D::scalar(a.beta);
    const bool read_c = a.beta[0] != 0 || a.beta[1] != 0;
    for (eg_i64 tile = blockIdx.x; tile < per_matrix * a.batch; tile += gridDim.x) {
        const eg_i64 batch = tile / per_matrix, at = tile % per_matrix;
        const eg_i64 m0 = at / tiles_n * BM, n0 = at % tiles_n * BN, rows = a.m - m0, cols = a.n - n0;
        const T *pa = (const T *)a.a + batch * a.a_strides[0] + m0 * a.a_strides[1];
        const T *pb = (const T *)a.b + batch * a.b_strides[0] + n0 * a.b_strides[2];
EG_UNROLL
        for (int i = 0; i < TM; i++)
EG_UNROLL
            for (int j = 0; j < TN; j++) acc[i][j] = C{};
        if (a.k > 0) {
            eg_gemm_fetch<D, BM, BK>(a_next, pa, rows, a.k, a.a_strides[1], a.a_strides[2], a_k_fast);
            eg_gemm_fetch<D, BN, BK>(b_next, pb, cols, a.k, a.b_strides[2], a.b_strides[1], b_k_fast);
        }
        for (eg_i64 k0 = 0; k0 < a.k; k0 += BK) {
            EG_SYNC_THREADS();   /* every thread is done reading the previous step's tiles */
            eg_gemm_stash<D, BM, BK, PAD>(a_tile, a_next, a_k_fast);
            eg_gemm_stash<D, BN, BK, PAD>(b_tile, b_next, b_k_fast);
            EG_SYNC_THREADS();
            if (k0 + BK < a.k) {   /* the next step's loads are in flight while this one computes */
                const eg_i64 next = k0 + BK;
                eg_gemm_fetch<D, BM, BK>(a_next, pa + next * a.a_strides[2], rows, a.k - next, a.a_strides[1],
                                         a.a_strides[2], a_k_fast);
                eg_gemm_fetch<D, BN, BK>(b_next, pb + next * a.b_strides[1], cols, a.k - next, a.b_strides[2],
                                         a.b_strides[1], b_k_fast);
            }
EG_UNROLL
            for (int kk = 0; kk < BK; kk++) {   /* past k the tiles hold zeros: adding 0 * 0 keeps every value */
                C x[TM], y[TN];
EG_UNROLL
                for (int i = 0; i < TM; i++) x[i] = a_tile[kk * (BM + PAD) + ty + i * TY];
EG_UNROLL
                for (int j = 0; j < TN; j++) y[j] = b_tile[kk * (BN + PAD) + tx + j * TX];
EG_UNROLL
                for (int i = 0; i < TM; i++)
EG_UNROLL
                    for (int j = 0; j < TN; j++) acc[i][j] = D::madd(x[i], y[j], acc[i][j]);
            }
        }
        T *pc = (T *)a.c + batch * a.c_strides[0] + m0 * a.c_strides[1] + n0 * a.c_strides[2];
        const T *pbias = EPILOGUE && a.bias ? (const T *)a.bias + batch * a.bias_strides[0] +
                                                  m0 * a.bias_strides[1] + n0 * a.bias_strides[2]
                                            : nullptr;
EG_UNROLL
        for (int i = 0; i < TM; i++) {
            const int r = ty + i * TY;
EG_UNROLL
            for (int j = 0; j < TN; j++) {
                const int col = tx + j * TX;
                if (r >= rows || col >= cols) continue;
                T *out = pc + r * a.c_strides[1] + col * a.c_strides[2];
                C v = alpha * acc[i][j];
                if (read_c) v = v + beta * D::load(*out);
                if (pbias) v = v + D::load(pbias[r * a.bias_strides[1] + col * a.bias_strides[2]]);
                if (EPILOGUE && a.relu) v = D::relu(v);
                *out = D::store(v);
            }
        }
    }
}

/* eg_gemm_<dtype> ignores the epilogue's fields; eg_gemm_epilogue_<dtype> applies them (a kernel of its own:
 * the epilogue's registers made the 128 x 128 tiles spill, which a plain GEMM must not pay for) */
#define EG_GEMM_KERNEL(dtype, D, BM, BN, BK, TM, TN)                                                              \
    EG_KERNEL(eg_gemm_##dtype, eg_gemm_args) { eg_gemm<D, false, BM, BN, BK, TM, TN>(args); }                    \
    EG_KERNEL(eg_gemm_epilogue_##dtype, eg_gemm_args) { eg_gemm<D, true, BM, BN, BK, TM, TN>(args); }

#endif /* EG_GEMM_H */
