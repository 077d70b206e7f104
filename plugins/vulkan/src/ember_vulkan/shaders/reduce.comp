// Reduces the trailing dims of a strided input: out[g] for g = row * chunks + chunk combines the
// elements [chunk * chunk_len, min(row_len, (chunk + 1) * chunk_len)) of row `row`.  With
// chunks > 1 the host runs it twice (partials, then a second pass over the partials), so that a
// long row spreads over many workgroups.  op: ROP_* (specialization constant 0).
// SUBGROUP_SUM (the reduce_subgroup variants, sum only): subgroupAdd instead of the shared-memory tree.
// params: [n_outer, n_inner, offset, outer shape, outer strides, inner shape, inner strides]
#if defined(SUBGROUP_SUM)
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
layout(local_size_x = 256) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint groups, chunks, chunk_len, row_len; } pc;

#include "reduce_ops.glsl"

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
#if defined(SUBGROUP_SUM)
        acc = subgroupAdd(acc);  // then one partial per subgroup, added by the first invocation
        if (subgroupElect()) partial[gl_SubgroupID] = acc;
        barrier();
        if (lid == 0u) {
            ACC_T total = partial[0];
            for (uint s = 1u; s < gl_NumSubgroups; s++) total += partial[s];
            O_BUF(pc.out_addr).v[g] = ACC_RESULT(total);
        }
#else
        partial[lid] = acc;
        barrier();
        for (uint s = WG / 2u; s > 0u; s >>= 1) {
            if (lid < s) partial[lid] = combine(partial[lid], partial[lid + s]);
            barrier();
        }
        if (lid == 0u) O_BUF(pc.out_addr).v[g] = ACC_RESULT(partial[0]);
#endif
        barrier();
    }
}
