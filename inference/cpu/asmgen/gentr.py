# 16x16 dword transpose for pack16T, with a register allocator and a Python simulation.
import sys
free = [f'Z{i}' for i in range(1, 15)]  # Z0 holds the xor constant at first, Z15 reserved
code = []
rows = [f'Z{16+j}' for j in range(16)]
sim = {}
def alloc():
    return free.pop(0)
def release(r):
    free.append(r)
# simulation: each register holds list of 16 (row, col) labels
for j in range(16):
    sim[rows[j]] = [(j, c) for c in range(16)]
def lanes(v):  # 4 lanes of 4
    return [v[4*l:4*l+4] for l in range(4)]
def unpack(kind, a, b, w):  # w = element size in dwords (1 or 2)
    A, B = sim[a], sim[b]
    out = []
    for l in range(4):
        la, lb = A[4*l:4*l+4], B[4*l:4*l+4]
        if w == 1:
            idx = [0, 1] if kind == 'lo' else [2, 3]
            for i in idx:
                out += [la[i], lb[i]]
        else:
            q = 0 if kind == 'lo' else 1
            out += la[2*q:2*q+2] + lb[2*q:2*q+2]
    return out
def shuf(imm, a, b):
    A, B = lanes(sim[a]), lanes(sim[b])
    sel = [(imm >> 0) & 3, (imm >> 2) & 3, (imm >> 4) & 3, (imm >> 6) & 3]
    return A[sel[0]] + A[sel[1]] + B[sel[2]] + B[sel[3]]
def op(name, a, b, dst, res):
    code.append(f'\t{name} {b}, {a}, {dst}' if not name.startswith('VSHUF') else f'\t{name} {b}, {a}, {dst}')
    sim[dst] = res
# stage 1
t = [None]*16
for p in range(8):
    a, b = rows[2*p], rows[2*p+1]
    d0 = alloc()
    r0 = unpack('lo', a, b, 1); r1 = unpack('hi', a, b, 1)
    op('VPUNPCKLDQ', a, b, d0, r0)
    op('VPUNPCKHDQ', a, b, a, r1)  # overwrite a
    t[2*p], t[2*p+1] = d0, a
    release(b)
# stage 2
u = [None]*16
for q in range(4):
    t0, t1, t2, t3 = t[4*q], t[4*q+1], t[4*q+2], t[4*q+3]
    d0, d1 = alloc(), alloc()
    op('VPUNPCKLQDQ', t0, t2, d0, unpack('lo', t0, t2, 2))
    op('VPUNPCKHQDQ', t0, t2, t0, unpack('hi', t0, t2, 2))
    d2 = alloc()
    op('VPUNPCKLQDQ', t1, t3, d2, unpack('lo', t1, t3, 2))
    op('VPUNPCKHQDQ', t1, t3, t1, unpack('hi', t1, t3, 2))
    release(t2); release(t3); release(d1)
    u[4*q], u[4*q+1], u[4*q+2], u[4*q+3] = d0, t0, d2, t1
# stage 3 and 4 per column b
outs = {}
for b in range(4):
    a_, b_, c_, d_ = u[b], u[4+b], u[8+b], u[12+b]
    v, w_ = alloc(), a_
    op('VSHUFI32X4 $0x88,', a_, b_, v, shuf(0x88, a_, b_))
    op('VSHUFI32X4 $0xdd,', a_, b_, a_, shuf(0xdd, a_, b_))
    v2 = alloc()
    op('VSHUFI32X4 $0x88,', c_, d_, v2, shuf(0x88, c_, d_))
    op('VSHUFI32X4 $0xdd,', c_, d_, c_, shuf(0xdd, c_, d_))
    release(b_); release(d_)
    w2 = c_
    o = alloc()
    op('VSHUFI32X4 $0x88,', v, v2, o, shuf(0x88, v, v2)); outs[b] = o
    op('VSHUFI32X4 $0xdd,', v, v2, v, shuf(0xdd, v, v2)); outs[b+8] = v
    op('VSHUFI32X4 $0x88,', w_, w2, v2, shuf(0x88, w_, w2)); outs[b+4] = v2
    op('VSHUFI32X4 $0xdd,', w_, w2, w_, shuf(0xdd, w_, w2)); outs[b+12] = w_
    for c in (b, b+4, b+8, b+12):
        code.append(f'\tVMOVDQU32 {outs[c]}, {c}*LDST')
    for c in (b, b+4, b+8, b+12):
        release(outs[c])
    release(w2) if w2 not in [outs[x] for x in outs] else None
# verify
for c, r in outs.items():
    assert sim[r] == [(j, c) for j in range(16)], (c, r, sim[r])
print('\n'.join(code).replace('$0x88,', '$0x88,').replace(',,', ','), file=sys.stdout)
