// out = astype(a): any strided input to any strided output of another dtype.
// Float -> integer truncates toward zero and saturates (NaN -> 0); integer -> narrower integer
// wraps; anything -> bool is != 0 (ember-cpu's rules).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint n; } pc;

#include "convert.glsl"

void main() {
    Params p = Params(pc.params_addr);
    int ndim = p.v[0];
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * WG) {
        A_T a = A_LOAD(A_BUF(pc.a_addr).v[operand_offset(p, ndim, 1, i)]);
        O_BUF(pc.out_addr).v[operand_offset(p, ndim, 0, i)] = O_STORE(convert(a));
    }
}
