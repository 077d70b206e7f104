// out = astype(a): any strided input to any strided output of another dtype.
// Float -> integer truncates toward zero and saturates (NaN -> 0); integer -> narrower integer
// wraps; anything -> bool is != 0 (every backend's rules: ember_core.dtypes.float_to_integer).
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, params_addr; uint n, run; } pc;

#include "convert.glsl"

#define OPERANDS 2
void element(int at[OPERANDS]) {
    O_BUF(pc.out_addr).v[at[0]] = O_STORE(convert(A_LOAD(A_BUF(pc.a_addr).v[at[1]])));
}

#include "elementwise_walk.glsl"
