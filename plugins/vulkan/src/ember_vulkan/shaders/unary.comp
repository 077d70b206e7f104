// out = op(a), op a specialization constant (UOP_*); strided input, contiguous or strided output.
// float16 computes in float32 and rounds once on the store.
layout(local_size_x = 256) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint n; } pc;

#include "unary_ops.glsl"

void main() {
    Params p = Params(pc.params_addr);
    int ndim = p.v[0];
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * WG) {
        A_T a = A_LOAD(A_BUF(pc.a_addr).v[operand_offset(p, ndim, 1, i)]);
        O_BUF(pc.out_addr).v[operand_offset(p, ndim, 0, i)] = O_STORE(apply(a));
    }
}
