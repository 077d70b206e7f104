// Last pass of sort / argsort: out[row, i] = x[row, index[row, i]] (sort: the elements' own bits, so
// NaN payloads and the sign of zero come through) or the index itself (argsort, int64 out).
// params: [n_outer, row_len, x_offset, x_stride, out_offset, out_stride, outer shape, x outer strides,
// out outer strides]
layout(local_size_x = 256) in;
layout(constant_id = 0) const int ARGSORT = 0;
layout(push_constant) uniform Push { uint64_t out_addr, index_addr, a_addr, params_addr; uint rows, span; } pc;

void main() {
    Params p = Params(pc.params_addr);
    int n_outer = p.v[0], row_len = p.v[1];
    uint total = pc.rows * uint(row_len);
    for (uint at = gl_GlobalInvocationID.x; at < total; at += gl_NumWorkGroups.x * WG) {
        uint row = at / uint(row_len), i = at % uint(row_len);
        uint source = BufU32(pc.index_addr).v[row * pc.span + i];
        int out_at = p.v[4] + strided_offset(p, 6, 6 + 2 * n_outer, n_outer, row) + int(i) * p.v[5];
        if (ARGSORT == 1) {
            BufI64(pc.out_addr).v[out_at] = int64_t(source);
        } else {
            int x_at = p.v[2] + strided_offset(p, 6, 6 + n_outer, n_outer, row) + int(source) * p.v[3];
            O_BUF(pc.out_addr).v[out_at] = A_BUF(pc.a_addr).v[x_at];
        }
    }
}
