// reduce.comp's contract (same push constants and params) with one invocation per (row, chunk),
// which walks its elements in order: no shared memory and no barriers.  For devices that run
// invocations on CPU cores (lavapipe), where a workgroup-wide tree costs more than the sums it
// makes, and for short rows anywhere.  The host keeps chunks short (accuracy) by adding passes.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint groups, chunks, chunk_len, row_len; } pc;

#include "reduce_ops.glsl"

void main() {
    Params p = Params(pc.params_addr);
    int n_outer = p.v[0], n_inner = p.v[1], offset = p.v[2];
    int outer_shape = 3, outer_strides = 3 + n_outer, inner_shape = 3 + 2 * n_outer, inner_strides = inner_shape + n_inner;
    for (uint g = gl_GlobalInvocationID.x; g < pc.groups; g += gl_NumWorkGroups.x * 64u) {
        uint row = g / pc.chunks, start = (g % pc.chunks) * pc.chunk_len;
        uint stop = min(pc.row_len, start + pc.chunk_len);
        int row_at = offset + strided_offset(p, outer_shape, outer_strides, n_outer, row);
        ACC_T acc = identity();
        if (n_inner == 1) {  // the common case: one stride, no index arithmetic per element
            int stride = p.v[inner_strides];
            for (uint r = start; r < stop; r++) acc = combine(acc, TO_ACC(A_LOAD(A_BUF(pc.a_addr).v[row_at + int(r) * stride])));
        } else {
            for (uint r = start; r < stop; r++) {
                int at = row_at + strided_offset(p, inner_shape, inner_strides, n_inner, r);
                acc = combine(acc, TO_ACC(A_LOAD(A_BUF(pc.a_addr).v[at])));
            }
        }
        O_BUF(pc.out_addr).v[g] = ACC_RESULT(acc);
    }
}
