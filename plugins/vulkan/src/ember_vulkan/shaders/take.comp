// out (outer, m, inner), contiguous = x (outer, n, inner), strided, at idx (m int64, in [-n, n)).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push {
    uint64_t out_addr, x_addr, idx_addr;
    uint outer, m, inner;
    int n, x_off, x_s0, x_s1, x_s2, idx_off;
} pc;

void main() {
    uint total = pc.outer * pc.m * pc.inner;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * WG) {
        uint o = i / (pc.m * pc.inner), j = (i / pc.inner) % pc.m, in_ = i % pc.inner;
        int k = int(BufI64(pc.idx_addr).v[pc.idx_off + int(j)]);
        if (k < 0) k += pc.n;
        O_BUF(pc.out_addr).v[i] = A_BUF(pc.x_addr).v[pc.x_off + int(o) * pc.x_s0 + k * pc.x_s1 + int(in_) * pc.x_s2];
    }
}
