// out = cond ? b : c, on strided views already broadcast to out's shape.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, b_addr, c_addr, params_addr; uint n, run; } pc;

#define OPERANDS 4
void element(int at[OPERANDS]) {
    // two plain stores: a select over 8/16-bit values would need shaderInt8 / shaderFloat16
    if (A_LOAD(A_BUF(pc.a_addr).v[at[1]])) {
        O_BUF(pc.out_addr).v[at[0]] = B_BUF(pc.b_addr).v[at[2]];
    } else {
        O_BUF(pc.out_addr).v[at[0]] = C_BUF(pc.c_addr).v[at[3]];
    }
}

#include "elementwise_walk.glsl"
