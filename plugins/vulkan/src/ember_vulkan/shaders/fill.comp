// Fills a contiguous range with one element's bit pattern (FILL_BUF / FILL_T: 1, 2, 4 or 8 bytes
// wide); the host converts the Python scalar to the dtype's bits.
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t out_addr, bits; uint offset, n; } pc;

void main() {
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * WG) {
        FILL_BUF(pc.out_addr).v[pc.offset + i] = FILL_T(pc.bits);
    }
}
