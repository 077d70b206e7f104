// Integers in [low, low + range): elements 2k and 2k + 1 take the word pairs (w0, w1) and
// (w2, w3) of block k; v = w_hi << 32 | w_lo; value = low + v % range.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, offset, range; int64_t low; uint n, k0, k1; } pc;

#include "philox.glsl"

void main() {
    uint blocks = (pc.n + 1u) / 2u;
    for (uint j = gl_GlobalInvocationID.x; j < blocks; j += gl_NumWorkGroups.x * WG) {
        uvec4 w = philox_block(pc.offset, uint64_t(j), pc.k0, pc.k1);
        for (uint q = 0u; q < 2u && 2u * j + q < pc.n; q++) {
            uint64_t v = (uint64_t(w[2u * q]) << 32) | uint64_t(w[2u * q + 1u]);
            int64_t value = pc.low + int64_t(v % pc.range);
#if defined(O_IS_BOOL)
            O_BUF(pc.out_addr).v[2u * j + q] = O_STORE(value != 0l);
#else
            O_BUF(pc.out_addr).v[2u * j + q] = O_STORE(O_T(value));
#endif
        }
    }
}
