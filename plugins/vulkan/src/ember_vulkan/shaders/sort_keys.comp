// First pass of sort / argsort: each row of x (the last dim, strided) becomes `span` (key, index)
// pairs in scratch, the keys complemented for a descending sort; the pairs past the row's end are
// padding that sorts after every element (the largest key, indices from row_len up).
// params: [n_outer, row_len, x_offset, x_stride, outer shape, x outer strides]
layout(local_size_x = 256) in;
layout(push_constant) uniform Push { uint64_t keys_addr, index_addr, a_addr, params_addr; uint rows, span, descending; } pc;

#include "sort_key.glsl"

void main() {
    Params p = Params(pc.params_addr);
    int n_outer = p.v[0], row_len = p.v[1], x_stride = p.v[3];
    uint64_t flip = pc.descending != 0u ? ~uint64_t(0) : uint64_t(0);
    uint total = pc.rows * pc.span;
    for (uint at = gl_GlobalInvocationID.x; at < total; at += gl_NumWorkGroups.x * WG) {
        uint row = at / pc.span, i = at % pc.span;
        uint64_t key = ~uint64_t(0);
        if (i < uint(row_len)) {
            int x_at = p.v[2] + strided_offset(p, 4, 4 + n_outer, n_outer, row) + int(i) * x_stride;
            key = sort_key(A_LOAD(A_BUF(pc.a_addr).v[x_at])) ^ flip;
        }
        BufU64(pc.keys_addr).v[at] = key;
        BufU32(pc.index_addr).v[at] = i;
    }
}
