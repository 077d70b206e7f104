// out[b] = a[b] @ b[b] for (..., M, K) @ (..., K, N) strided operands with equal batch dims (stride
// 0 where broadcast); out is contiguous.  64 x 64 output tiles staged through shared memory in
// steps of 16 along K; each of the 16 x 16 threads accumulates a 4 x 4 block.  float16 and
// float32 accumulate in float32, integers in their own type (wrapping).
// params: [nb, M, N, K, a_off, a_sm, a_sk, b_off, b_sk, b_sn, batch shape, a batch strides, b batch strides]
layout(local_size_x = 16, local_size_y = 16) in;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, params_addr; uint base_x, base_y, base_z; } pc;

#define TILE 64
#define STEP 16
shared A_T a_tile[STEP][TILE];
shared A_T b_tile[STEP][TILE];

void main() {
    Params p = Params(pc.params_addr);
    int nb = p.v[0], M = p.v[1], N = p.v[2], K = p.v[3];
    int a_sm = p.v[5], a_sk = p.v[6], b_sk = p.v[8], b_sn = p.v[9];
    uint batch = gl_WorkGroupID.z + pc.base_z;
    int a_at = p.v[4] + strided_offset(p, 10, 10 + nb, nb, batch);
    int b_at = p.v[7] + strided_offset(p, 10, 10 + 2 * nb, nb, batch);
    int row0 = int(gl_WorkGroupID.y + pc.base_y) * TILE, col0 = int(gl_WorkGroupID.x + pc.base_x) * TILE;
    int tx = int(gl_LocalInvocationID.x), ty = int(gl_LocalInvocationID.y), tid = ty * 16 + tx;
    A_T acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = A_T(0);
    for (int k0 = 0; k0 < K; k0 += STEP) {
        for (int e = tid; e < TILE * STEP; e += 256) {
            int m = row0 + (e >> 4), ka = k0 + (e & 15);
            A_T va = A_T(0);
            if (m < M && ka < K) va = A_LOAD(A_BUF(pc.a_addr).v[a_at + m * a_sm + ka * a_sk]);
            a_tile[e & 15][e >> 4] = va;
            int kb = k0 + (e >> 6), n = col0 + (e & 63);
            A_T vb = A_T(0);
            if (kb < K && n < N) vb = A_LOAD(A_BUF(pc.b_addr).v[b_at + kb * b_sk + n * b_sn]);
            b_tile[e >> 6][e & 63] = vb;
        }
        barrier();
        for (int k = 0; k < STEP; k++) {
            A_T av[4], bv[4];
            for (int i = 0; i < 4; i++) av[i] = a_tile[k][ty + 16 * i];
            for (int j = 0; j < 4; j++) bv[j] = b_tile[k][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        barrier();
    }
    uint out_at = batch * uint(M) * uint(N);
    for (int i = 0; i < 4; i++) {
        int m = row0 + ty + 16 * i;
        for (int j = 0; j < 4; j++) {
            int n = col0 + tx + 16 * j;
            if (m < M && n < N) A_BUF(pc.out_addr).v[out_at + uint(m * N + n)] = A_STORE(acc[i][j]);
        }
    }
}
