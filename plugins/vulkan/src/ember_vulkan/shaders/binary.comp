// out = op(a, b), op a specialization constant (BOP_*); inputs are strided views already
// broadcast to out's shape (stride 0 on broadcast dims).
layout(local_size_x = 256) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, params_addr; uint n, run; } pc;

#include "binary_ops.glsl"

#define OPERANDS 3
void element(int at[OPERANDS]) {
    A_T a = A_LOAD(A_BUF(pc.a_addr).v[at[1]]);
    B_T b = B_LOAD(B_BUF(pc.b_addr).v[at[2]]);
    O_BUF(pc.out_addr).v[at[0]] = O_STORE(apply(a, b));
}

#include "elementwise_walk.glsl"
