// argmax / argmin (AOP_*, specialization constant 0) along the last dim of a strided input: one
// workgroup per row; the first extreme wins, and a NaN counts as the extreme (the first NaN).
// params: [n_outer, 1, offset, outer shape, outer strides, row length, row stride]
layout(local_size_x = 256) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint rows, row_len; } pc;

#if defined(A_IS_BOOL)
#define VAL_T uint
#define TO_VAL(v) ((v) ? 1u : 0u)
#else
#define VAL_T A_T
#define TO_VAL(v) (v)
#endif

// Is (v1, i1) preferred over (v2, i2)?  Index -1 marks "nothing yet".
bool better(VAL_T v1, int i1, VAL_T v2, int i2) {
    if (i2 < 0) return i1 >= 0;
    if (i1 < 0) return false;
#if defined(A_IS_FLOAT)
    bool n1 = isnan(v1), n2 = isnan(v2);
    if (n1 || n2) return n1 && n2 ? i1 < i2 : n1;
#endif
    if (v1 != v2) return OP == AOP_ARGMAX ? v1 > v2 : v1 < v2;
    return i1 < i2;
}

shared VAL_T best_val[WG];
shared int best_idx[WG];

void main() {
    Params p = Params(pc.params_addr);
    int n_outer = p.v[0], offset = p.v[2];
    int stride = p.v[4 + 2 * n_outer];
    uint lid = gl_LocalInvocationID.x;
    for (uint row = gl_WorkGroupID.x; row < pc.rows; row += gl_NumWorkGroups.x) {
        int row_at = offset + strided_offset(p, 3, 3 + n_outer, n_outer, row);
        VAL_T val = VAL_T(0);
        int idx = -1;
        for (uint r = lid; r < pc.row_len; r += WG) {
            VAL_T v = TO_VAL(A_LOAD(A_BUF(pc.a_addr).v[row_at + int(r) * stride]));
            if (better(v, int(r), val, idx)) {
                val = v;
                idx = int(r);
            }
        }
        best_val[lid] = val;
        best_idx[lid] = idx;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1) {
            if (lid < s && better(best_val[lid + s], best_idx[lid + s], best_val[lid], best_idx[lid])) {
                best_val[lid] = best_val[lid + s];
                best_idx[lid] = best_idx[lid + s];
            }
            barrier();
        }
        if (lid == 0u) BufI64(pc.out_addr).v[row] = int64_t(best_idx[0]);
        barrier();
    }
}
