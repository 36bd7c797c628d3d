# Rewrites a src/device/*.cu file for the CPU emulation (emu.h): the include of
# cuda_common.cuh becomes emu.h, dynamic shared memory the emulator's buffer, and every launch
# kernel<<<grid, block, smem, stream>>>(args) a call of emu_launch, threaded when the kernel
# body synchronises. Usage: conv.py IN.cu OUT.cpp
import re, sys
src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
s = s.replace('#include "device/cuda_common.cuh"', '#include "emu.h"')
s = s.replace('extern __shared__ float sm[];', 'float *sm = emu_dyn;')
s = s.replace('#include "dtrain/device_cuda.h"', '')
def split_top(t):
    out, depth, cur = [], 0, ''
    for ch in t:
        if ch in '([{': depth += 1
        if ch in ')]}': depth -= 1
        if ch == ',' and depth == 0:
            out.append(cur); cur = ''
        else: cur += ch
    out.append(cur)
    return [x.strip() for x in out]
SYNCPAT = re.compile(r'dt_block_sum|dt_block_max|__syncthreads|__shfl|__syncwarp|warp_sum|warp_max|warp_axpy')
SYNCED = set()
for km in re.finditer(r'__global__ void (\w+)\(', s):
    body_start = s.index('{', km.end())
    depth, k = 0, body_start
    while True:
        if s[k] == '{': depth += 1
        elif s[k] == '}':
            depth -= 1
            if depth == 0: break
        k += 1
    if SYNCPAT.search(s[body_start:k]): SYNCED.add(km.group(1))
def base(n): return n.split('<')[0]
pat = re.compile(r'([A-Za-z_]\w*(?:<\w+>)?)\s*<<<(.*?)>>>\s*\((.*?)\);', re.S)
def rep(m):
    name, cfg, args = m.group(1), m.group(2), m.group(3)
    c = split_top(cfg)
    smem = c[2] if len(c) > 2 else '0'
    threaded = 'true' if base(name) in SYNCED else 'false'
    return 'emu_launch(dim3(%s), dim3(%s), %s, %s, [&] { %s(%s); });' % (c[0], c[1], smem, threaded, name, args)
s, n = pat.subn(rep, s)
sys.stderr.write('%s: %d launches, threaded kernels %s\n' % (src, n, sorted(SYNCED)))
open(dst, 'w').write(s)
