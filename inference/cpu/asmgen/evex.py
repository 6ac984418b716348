# EVEX encoder for register-form AVX512_BF16 instructions (Go's assembler lacks them).
import sys
OPS = {  # name: (pp, map, opcode)
  'VDPBF16PS': (0b10, 0b10, 0x52),       # F3.0F38 52
  'VCVTNE2PS2BF16': (0b11, 0b10, 0x72),  # F2.0F38 72
}
def enc(op, dst, src1, src2, L=0b10):
    pp, mm, opc = OPS[op]
    R = (dst >> 3) & 1; Rp = (dst >> 4) & 1
    B = (src2 >> 3) & 1; X = (src2 >> 4) & 1
    V = src1 & 15; Vp = (src1 >> 4) & 1
    p0 = ((~R & 1) << 7) | ((~X & 1) << 6) | ((~B & 1) << 5) | ((~Rp & 1) << 4) | mm
    p1 = (0 << 7) | ((~V & 15) << 3) | (1 << 2) | pp
    p2 = (0 << 7) | (L << 5) | (0 << 4) | ((~Vp & 1) << 3) | 0
    modrm = 0xC0 | ((dst & 7) << 3) | (src2 & 7)
    return [0x62, p0, p1, p2, opc, modrm]
def go(op, dst, src1, src2):
    # Go operand order: op src2, src1, dst
    b = enc(op, dst, src1, src2)
    return '\t' + '; '.join('BYTE $0x%02x' % x for x in b) + ' // %s Z%d, Z%d, Z%d' % (op, src2, src1, dst)
if __name__ == '__main__':
    op, a, b, c = sys.argv[1:5]
    print(go(op, int(c), int(b), int(a)))
