// nonzero in two passes around a scan of per-chunk counts (scan.comp). An invocation owns CHUNK
// consecutive elements of x in C order. MODE 0: counts[c] = x's nonzero elements in chunk c. MODE 1:
// after the (inclusive) scan, chunk c writes the coordinates of its nonzero elements from row
// counts[c - 1] of out (int64, (count, ndim), contiguous). Floats test their bits: -0 is zero, a
// subnormal and NaN are not (also on a flushing device).
// params: [ndim, shape..., x offset, x strides...] (an elementwise operand block)
layout(local_size_x = 64) in;
layout(constant_id = 0) const int MODE = 0;
layout(push_constant) uniform Push { uint64_t out_addr, a_addr, counts_addr, params_addr; uint n, chunks, count; } pc;

#define CHUNK 256u

bool is_nonzero(uint i) {
    Params p = Params(pc.params_addr);
    A_T v = A_LOAD(A_BUF(pc.a_addr).v[operand_offset(p, p.v[0], 0, i)]);
#if defined(A_IS_FLOAT)
    return (floatBitsToUint(v) & 0x7fffffffu) != 0u;
#elif defined(A_IS_BOOL)
    return v;
#else
    return v != A_T(0);
#endif
}

void main() {
    Params p = Params(pc.params_addr);
    int ndim = p.v[0];
    BufI64 counts = BufI64(pc.counts_addr);
    for (uint c = gl_GlobalInvocationID.x; c < pc.chunks; c += gl_NumWorkGroups.x * 64u) {
        uint end = min(pc.n, (c + 1u) * CHUNK);
        if (MODE == 0) {
            int64_t found = 0;
            for (uint i = c * CHUNK; i < end; i++) found += is_nonzero(i) ? 1 : 0;
            counts.v[c] = found;
            continue;
        }
        uint row = c == 0u ? 0u : uint(counts.v[c - 1u]);
        for (uint i = c * CHUNK; i < end && row < pc.count; i++) {
            if (!is_nonzero(i)) continue;
            uint rest = i;
            for (int d = ndim - 1; d >= 0; d--) {
                uint size = uint(p.v[1 + d]);
                BufI64(pc.out_addr).v[row * uint(ndim) + uint(d)] = int64_t(d > 0 ? rest % size : rest);
                rest = d > 0 ? rest / size : 0u;
            }
            row++;
        }
    }
}
