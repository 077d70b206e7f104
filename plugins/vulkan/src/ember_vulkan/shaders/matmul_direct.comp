// out[b] = a[b] @ b[b] like matmul.comp, for devices that run workgroups on CPU cores (lavapipe):
// no shared memory and no barriers (which such drivers emulate slowly); each invocation keeps a
// 4 x 4 block of out in registers and reads its operands straight from memory.  The params
// block and its layout are matmul.comp's; invocations walk blocks in (batch, row block, column
// block) order with a grid-stride loop.
layout(local_size_x = 16) in;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, params_addr; uint blocks; } pc;

void main() {
    Params p = Params(pc.params_addr);
    int nb = p.v[0], M = p.v[1], N = p.v[2], K = p.v[3];
    int a_sm = p.v[5], a_sk = p.v[6], b_sk = p.v[8], b_sn = p.v[9];
    uint col_blocks = uint(N + RB - 1) / RB, row_blocks = uint(M + RB - 1) / RB;
    for (uint g = gl_GlobalInvocationID.x; g < pc.blocks; g += gl_NumWorkGroups.x * 16u) {
        uint batch = g / (row_blocks * col_blocks), rest = g % (row_blocks * col_blocks);
        int row0 = int(rest / col_blocks) * RB, col0 = int(rest % col_blocks) * RB;
        int a_at = p.v[4] + strided_offset(p, 10, 10 + nb, nb, batch);
        int b_at = p.v[7] + strided_offset(p, 10, 10 + 2 * nb, nb, batch);
        // Rows and columns past the edge re-read the last valid one (in bounds) and are not stored.
        int a_row[RB], b_col[RB];
        for (int i = 0; i < RB; i++) a_row[i] = a_at + min(row0 + i, M - 1) * a_sm;
        for (int j = 0; j < RB; j++) b_col[j] = b_at + min(col0 + j, N - 1) * b_sn;
        A_T acc[RB][RB];
        for (int i = 0; i < RB; i++)
            for (int j = 0; j < RB; j++) acc[i][j] = A_T(0);
        for (int k = 0; k < K; k++) {
            A_T av[RB], bv[RB];
            for (int i = 0; i < RB; i++) av[i] = A_LOAD(A_BUF(pc.a_addr).v[a_row[i] + k * a_sk]);
            for (int j = 0; j < RB; j++) bv[j] = A_LOAD(A_BUF(pc.b_addr).v[b_col[j] + k * b_sk]);
            for (int i = 0; i < RB; i++)
                for (int j = 0; j < RB; j++) acc[i][j] += av[i] * bv[j];
        }
        uint out_at = batch * uint(M) * uint(N);
        for (int i = 0; i < RB; i++)
            for (int j = 0; j < RB; j++)
                if (row0 + i < M && col0 + j < N)
                    A_BUF(pc.out_addr).v[out_at + uint((row0 + i) * N + col0 + j)] = A_STORE(acc[i][j]);
    }
}
