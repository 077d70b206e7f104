// out = op(a), op a specialization constant (UOP_*); strided input, contiguous or strided output.
// float16 computes in float32 and rounds once on the store.
layout(local_size_x = 256) in;
layout(constant_id = 0) const int OP = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint n, run; } pc;

#include "unary_ops.glsl"

#define OPERANDS 2
void element(int at[OPERANDS]) {
    O_BUF(pc.out_addr).v[at[0]] = O_STORE(apply(A_LOAD(A_BUF(pc.a_addr).v[at[1]])));
}

#include "elementwise_walk.glsl"
