// Reduces the trailing dims of a strided input: out[g] for g = row * chunks + chunk combines the
// elements [chunk * chunk_len, min(row_len, (chunk + 1) * chunk_len)) of row `row`.  With
// chunks > 1 the host runs it twice (partials, then a second pass over the partials), so that a
// long row spreads over many workgroups.  op: ROP_* (specialization constant 0).
// params: [n_outer, n_inner, offset, outer shape, outer strides, inner shape, inner strides]
layout(local_size_x = 256) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint groups, chunks, chunk_len, row_len; } pc;

#if defined(O_IS_BOOL) || defined(A_IS_BOOL)
#define ACC_T uint  // any/all and bool max/min: 0 or 1
  #if defined(A_IS_BOOL)
  #define TO_ACC(v) ((v) ? 1u : 0u)
  #else
  #define TO_ACC(v) ((v) != A_T(0) ? 1u : 0u)
  #endif
#else
#define ACC_T A_T
#define TO_ACC(v) (v)
#endif

ACC_T identity() {
#if defined(O_IS_BOOL) || defined(A_IS_BOOL)
    return (OP == ROP_ALL || OP == ROP_MIN || OP == ROP_PROD) ? 1u : 0u;
#elif defined(A_IS_FLOAT)
    const float inf = uintBitsToFloat(0x7f800000u);
    return OP == ROP_MAX ? -inf : OP == ROP_MIN ? inf : OP == ROP_PROD ? 1.0 : 0.0;
#elif defined(A_DTYPE_INT32)
    return OP == ROP_MAX ? int(0x80000000) : OP == ROP_MIN ? 0x7fffffff : OP == ROP_PROD ? 1 : 0;
#else
    return OP == ROP_MAX ? int64_t(0x8000000000000000l) : OP == ROP_MIN ? int64_t(0x7fffffffffffffffl)
         : OP == ROP_PROD ? int64_t(1) : int64_t(0);
#endif
}

ACC_T combine(ACC_T a, ACC_T b) {
    switch (OP) {
        case ROP_SUM: return a + b;
        case ROP_PROD: return a * b;
#if defined(A_IS_FLOAT) && !defined(O_IS_BOOL)
        case ROP_MAX: return isnan(a) ? a : isnan(b) ? b : max(a, b);  // NaN propagates
        case ROP_MIN: return isnan(a) ? a : isnan(b) ? b : min(a, b);
#else
        case ROP_MAX: return max(a, b);
        case ROP_MIN: return min(a, b);
#endif
    }
#if defined(O_IS_BOOL) || defined(A_IS_BOOL)
    return OP == ROP_ANY ? (a | b) : (a & b);
#else
    return a;
#endif
}

shared ACC_T partial[WG];

void main() {
    Params p = Params(pc.params_addr);
    int n_outer = p.v[0], n_inner = p.v[1], offset = p.v[2];
    int outer_shape = 3, outer_strides = 3 + n_outer, inner_shape = 3 + 2 * n_outer, inner_strides = inner_shape + n_inner;
    uint lid = gl_LocalInvocationID.x;
    for (uint g = gl_WorkGroupID.x; g < pc.groups; g += gl_NumWorkGroups.x) {
        uint row = g / pc.chunks, start = (g % pc.chunks) * pc.chunk_len;
        uint stop = min(pc.row_len, start + pc.chunk_len);
        int row_at = offset + strided_offset(p, outer_shape, outer_strides, n_outer, row);
        ACC_T acc = identity();
        for (uint r = start + lid; r < stop; r += WG) {
            int at = row_at + strided_offset(p, inner_shape, inner_strides, n_inner, r);
            acc = combine(acc, TO_ACC(A_LOAD(A_BUF(pc.a_addr).v[at])));
        }
        partial[lid] = acc;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1) {
            if (lid < s) partial[lid] = combine(partial[lid], partial[lid + s]);
            barrier();
        }
        if (lid == 0u) {
#if defined(O_IS_BOOL)
            O_BUF(pc.out_addr).v[g] = O_STORE(partial[0] != 0u);
#else
            O_BUF(pc.out_addr).v[g] = O_STORE(O_T(partial[0]));
#endif
        }
        barrier();
    }
}
