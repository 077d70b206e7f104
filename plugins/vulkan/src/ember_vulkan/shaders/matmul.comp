// out[b] = a[b] @ b[b] for (..., M, K) @ (..., K, N) strided operands with equal batch dims (stride
// 0 where broadcast); out is contiguous.  (16 RM) x (16 RN) output tiles staged through shared
// memory in steps of STEP along K; each of the 16 x 16 threads accumulates an RM x RN block.  The
// tile sizes are specialization constants (1-3; the host picks them, bench_vulkan.py sweeps them).
// float16 and float32 accumulate in float32, integers in their own type (wrapping).
// params: [nb, M, N, K, a_off, a_sm, a_sk, b_off, b_sk, b_sn, batch shape, a batch strides, b batch strides]
layout(local_size_x = 16, local_size_y = 16) in;
layout(constant_id = 1) const int RM = 4;
layout(constant_id = 2) const int RN = 4;
layout(constant_id = 3) const int STEP = 16;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, params_addr; uint base_x, base_y, base_z; } pc;

const int TILE_M = 16 * RM, TILE_N = 16 * RN;
shared A_T a_tile[STEP][TILE_M];
shared A_T b_tile[STEP][TILE_N];

void main() {
    Params p = Params(pc.params_addr);
    int nb = p.v[0], M = p.v[1], N = p.v[2], K = p.v[3];
    int a_sm = p.v[5], a_sk = p.v[6], b_sk = p.v[8], b_sn = p.v[9];
    uint batch = gl_WorkGroupID.z + pc.base_z;
    int a_at = p.v[4] + strided_offset(p, 10, 10 + nb, nb, batch);
    int b_at = p.v[7] + strided_offset(p, 10, 10 + 2 * nb, nb, batch);
    int row0 = int(gl_WorkGroupID.y + pc.base_y) * TILE_M, col0 = int(gl_WorkGroupID.x + pc.base_x) * TILE_N;
    int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y), tid = ty * 16 + tx;
    A_T acc[RM][RN];
    for (int i = 0; i < RM; i++)
        for (int j = 0; j < RN; j++) acc[i][j] = A_T(0);
    for (int k0 = 0; k0 < K; k0 += STEP) {
        for (int e = tid; e < TILE_M * STEP; e += 256) {
            int m = row0 + e / STEP, ka = k0 + e % STEP;
            A_T va = A_T(0);
            if (m < M && ka < K) va = A_LOAD(A_BUF(pc.a_addr).v[a_at + m * a_sm + ka * a_sk]);
            a_tile[e % STEP][e / STEP] = va;
        }
        for (int e = tid; e < STEP * TILE_N; e += 256) {
            int kb = k0 + e / TILE_N, n = col0 + e % TILE_N;
            A_T vb = A_T(0);
            if (kb < K && n < N) vb = A_LOAD(A_BUF(pc.b_addr).v[b_at + kb * b_sk + n * b_sn]);
            b_tile[e / TILE_N][e % TILE_N] = vb;
        }
        barrier();
        for (int k = 0; k < STEP; k++) {
            A_T av[RM], bv[RN];
            for (int i = 0; i < RM; i++) av[i] = a_tile[k][ty + 16 * i];
            for (int j = 0; j < RN; j++) bv[j] = b_tile[k][tx + 16 * j];
            for (int i = 0; i < RM; i++)
                for (int j = 0; j < RN; j++) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }
    uint out_at = batch * uint(M) * uint(N);
    for (int i = 0; i < RM; i++) {
        int m = row0 + ty + 16 * i;
        for (int j = 0; j < RN; j++) {
            int n = col0 + tx + 16 * j;
            if (m < M && n < N) A_BUF(pc.out_addr).v[out_at + uint(m * N + n)] = A_STORE(acc[i][j]);
        }
    }
}
