// x (outer, n, inner)[:, idx, :] = values (outer, m, inner), or += with accumulate.  One thread
// per (outer, inner) position walks idx in order, so repeated indices accumulate exactly and,
// without accumulate, the last write wins (as a sequential loop), with no atomics.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    uint64_t x_addr, idx_addr, v_addr;
    uint outer, inner, m, accumulate;
    int n, x_off, x_s0, x_s1, x_s2, v_off, v_s0, v_s1, v_s2, idx_off;
} pc;

void main() {
    uint total = pc.outer * pc.inner;
    for (uint t = gl_GlobalInvocationID.x; t < total; t += gl_NumWorkGroups.x * WG) {
        int o = int(t / pc.inner), in_ = int(t % pc.inner);
        int x_at = pc.x_off + o * pc.x_s0 + in_ * pc.x_s2, v_at = pc.v_off + o * pc.v_s0 + in_ * pc.v_s2;
        for (int j = 0; j < int(pc.m); j++) {
            int k = int(BufI64(pc.idx_addr).v[pc.idx_off + j]);
            if (k < 0) k += pc.n;
            int xi = x_at + k * pc.x_s1, vi = v_at + j * pc.v_s1;
            if (pc.accumulate != 0u) {
#if defined(A_IS_BOOL)
                A_T sum = A_LOAD(A_BUF(pc.x_addr).v[xi]) || A_LOAD(A_BUF(pc.v_addr).v[vi]);
#else
                A_T sum = A_LOAD(A_BUF(pc.x_addr).v[xi]) + A_LOAD(A_BUF(pc.v_addr).v[vi]);
#endif
                A_BUF(pc.x_addr).v[xi] = A_STORE(sum);
            } else {
                A_BUF(pc.x_addr).v[xi] = A_BUF(pc.v_addr).v[vi];
            }
        }
    }
}
