// out = op(a, b), op a specialization constant (BOP_*); inputs are strided views already
// broadcast to out's shape (stride 0 on broadcast dims).
layout(local_size_x = 256) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, params_addr; uint n; } pc;

#include "binary_ops.glsl"

void main() {
    Params p = Params(pc.params_addr);
    int ndim = p.v[0];
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * WG) {
        A_T a = A_LOAD(A_BUF(pc.a_addr).v[operand_offset(p, ndim, 1, i)]);
        B_T b = B_LOAD(B_BUF(pc.b_addr).v[operand_offset(p, ndim, 2, i)]);
        O_BUF(pc.out_addr).v[operand_offset(p, ndim, 0, i)] = O_STORE(apply(a, b));
    }
}
