// One pass of a bottom-up merge sort over each row's `span` (key, index) pairs, for CPU devices
// (lavapipe), where the bitonic network's barriers and many passes cost more than they save. The pass
// merges the sorted runs [2wm, 2wm + w) and [2wm + w, 2w(m + 1)) of the input buffers into the output
// buffers (rows are span-aligned and w < span, so no run crosses a row). Invocation c writes the
// `chunk` outputs from c * chunk on (chunk divides 2w): a binary search along the merge path finds how
// many of the outputs before them come from the left run, so no loop runs longer than `chunk` steps
// (llvmpipe stops any loop after 65535 iterations) and the last passes stay parallel. Pairs compare by
// key, then index, as in sort_network.comp.
layout(local_size_x = 64) in;
layout(push_constant) uniform Push { uint64_t keys_in, index_in, keys_out, index_out; uint chunks, width, chunk; } pc;

bool before(uint64_t ka, uint ia, uint64_t kb, uint ib) { return ka < kb || (ka == kb && ia < ib); }

void main() {
    BufU64 keys_in = BufU64(pc.keys_in), keys_out = BufU64(pc.keys_out);
    BufU32 index_in = BufU32(pc.index_in), index_out = BufU32(pc.index_out);
    uint w = pc.width;
    for (uint c = gl_GlobalInvocationID.x; c < pc.chunks; c += gl_NumWorkGroups.x * 64u) {
        uint start = c * pc.chunk, lo = start / (2u * w) * (2u * w), mid = lo + w, hi = mid + w, d = start - lo;
        uint a_lo = d > w ? d - w : 0u, a_hi = min(d, w);
        while (a_lo < a_hi) {  // the first m whose left element comes after the right one it meets
            uint m = (a_lo + a_hi) / 2u, b = mid + d - 1u - m;
            if (before(keys_in.v[b], index_in.v[b], keys_in.v[lo + m], index_in.v[lo + m])) a_hi = m;
            else a_lo = m + 1u;
        }
        uint i = lo + a_lo, j = mid + d - a_lo;
        for (uint o = start; o < start + pc.chunk; o++) {
            bool left = j == hi || (i < mid && before(keys_in.v[i], index_in.v[i], keys_in.v[j], index_in.v[j]));
            uint from = left ? i : j;
            keys_out.v[o] = keys_in.v[from];
            index_out.v[o] = index_in.v[from];
            if (left) i++;
            else j++;
        }
    }
}
