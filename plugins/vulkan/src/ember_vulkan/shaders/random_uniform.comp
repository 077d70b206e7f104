// Uniform floats: element i takes word i % 4 of block i / 4; u = (w >> (32 - p)) * 2^-p with
// p = 24 (float32) or 11 (float16); value = low + (high - low) * u in float32, each operation
// rounded on its own (`precise` forbids fused multiply-adds), then rounded once to float16.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, offset; uint n, k0, k1, bits; float low, high; } pc;

#include "philox.glsl"

void main() {
    uint blocks = (pc.n + 3u) / 4u;
    for (uint j = gl_GlobalInvocationID.x; j < blocks; j += gl_NumWorkGroups.x * WG) {
        uvec4 w = philox_block(pc.offset, uint64_t(j), pc.k0, pc.k1);
        for (uint q = 0u; q < 4u && 4u * j + q < pc.n; q++) {
            float u = ldexp(float(w[q] >> (32u - pc.bits)), -int(pc.bits));
            precise float span = pc.high - pc.low;
            precise float value = pc.low + span * u;
            O_BUF(pc.out_addr).v[4u * j + q] = O_STORE(value);
        }
    }
}
