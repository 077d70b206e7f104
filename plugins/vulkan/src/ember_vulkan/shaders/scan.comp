// out[..., i] = x[..., 0] op ... op x[..., i] along the last dim (OP 0: cumulative_sum, 1:
// cumulative_prod), one invocation per row walking it in order.  Accumulates in the output's
// compute type: int64 for integer and bool inputs, float32 for float16.
// params: [n_outer, row_len, x_offset, x_stride, out_offset, out_stride, outer shape, x outer strides,
// out outer strides]
layout(local_size_x = 64) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint rows; } pc;

void main() {
    Params p = Params(pc.params_addr);
    int n_outer = p.v[0], row_len = p.v[1], x_stride = p.v[3], out_stride = p.v[5];
    for (uint row = gl_GlobalInvocationID.x; row < pc.rows; row += gl_NumWorkGroups.x * 64u) {
        int x_at = p.v[2] + strided_offset(p, 6, 6 + n_outer, n_outer, row);
        int out_at = p.v[4] + strided_offset(p, 6, 6 + 2 * n_outer, n_outer, row);
        O_T acc = O_T(OP == 0 ? 0 : 1);
        for (int i = 0; i < row_len; i++) {
            O_T v = O_T(A_LOAD(A_BUF(pc.a_addr).v[x_at + i * x_stride]));
            acc = OP == 0 ? acc + v : acc * v;
            O_BUF(pc.out_addr).v[out_at + i * out_stride] = O_STORE(acc);
        }
    }
}
