#!/usr/bin/python3
"""Prints the float16 / bfloat16 oracle tables of tests/common/reduce_test.cc.

The expectations come from numpy (float16 casts and ufuncs) and torch (bfloat16 casts and
ops), never from Hora's converters, so the C++ test compares Hora against an independent
reference. Inputs and outputs are bit patterns. Run by hand and paste the output over the
tables in reduce_test.cc when a case is added:  /usr/bin/python3 tests/common/gen_half_tables.py
"""

import numpy as np
import torch


def f32(bits):
    return np.array([bits], dtype=np.uint32).view(np.float32)


def f16(bits):
    return np.array([bits], dtype=np.uint16).view(np.float16)


def bf16(bits):
    return torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def bits16(t):
    if isinstance(t, torch.Tensor):
        return int(t.view(torch.int16).item()) & 0xFFFF
    return int(t.view(np.uint16)[0])


def fbits(x):
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


TO_HALF = [
    (fbits(1.0), "1"), (fbits(-2.5), "-2.5"), (fbits(65504), "half max"),
    (0x477FEFFF, "just below the overflow tie"), (0x477FF000, "65520, the overflow tie -> inf"),
    (fbits(1e6), "overflow"), (fbits(-1e6), "negative overflow"),
    (0x7F800000, "inf"), (0xFF800000, "-inf"), (0x80000000, "-0"),
    (fbits(2.0**-14), "smallest normal"), (fbits(2.0**-24), "smallest subnormal"),
    (fbits(2.0**-25), "2^-25, tie between 0 and 2^-24 -> 0 (even)"),
    (fbits(3 * 2.0**-25), "1.5 * 2^-24, tie -> 2 * 2^-24 (even)"),
    (fbits(2.0**-25) + 1, "just above the tie -> 2^-24"), (fbits(2.0**-26), "underflow to 0"),
    (fbits(1023 * 2.0**-24), "largest subnormal"),
    (fbits(1023.5 * 2.0**-24), "subnormal tie -> smallest normal"),
    (fbits(2049), "2049, tie -> 2048 (even)"), (fbits(2051), "2051, tie -> 2052 (even)"),
    (fbits(1 + 2.0**-11), "1 + 2^-11, tie -> 1"), (fbits(1 + 3 * 2.0**-11), "tie -> 1 + 2^-9"),
    (fbits(1 + 2.0**-11) + 8, "just above the tie -> 1 + 2^-10"),
    (fbits(0.1), "0.1"), (fbits(-1 / 3), "-1/3"),
]
TO_BF16 = [
    (fbits(1.0), "1"), (fbits(-3.0), "-3"), (fbits(1 + 2.0**-8), "1 + 2^-8, tie -> 1"),
    (fbits(1 + 3 * 2.0**-8), "tie -> 1 + 2^-6"), (fbits(1 + 2.0**-8) + 8, "above the tie"),
    (0x7F7FFFFF, "FLT_MAX rounds to inf"), (0x7F7F7FFF, "below the tie -> bf16 max"),
    (0x7F7F8000, "tie above bf16 max (odd) -> inf"), (0x7F800000, "inf"), (0xFF800000, "-inf"),
    (0x80000000, "-0"), (0x00000001, "smallest float denormal -> 0"),
    (0x00018000, "denormal tie, odd -> up"), (0x00008000, "denormal tie, even -> down"),
    (fbits(0.1), "0.1"), (fbits(1.5e30), "1.5e30"), (fbits(-1 / 3), "-1/3"),
]
FROM_HALF = [0x0001, 0x03FF, 0x0400, 0x3555, 0x7BFF, 0x7C00, 0xFC00, 0x8000, 0x8001, 0xC100]
HALF_OPS = [
    ("kSum", 0x6800, 0x3C00, "2048 + 1: tie -> 2048"), ("kSum", 0x6800, 0x4200, "2048 + 3: tie -> 2052"),
    ("kSum", 0x3C00, 0x1000, "1 + 2^-11: tie -> 1"), ("kSum", 0x3C01, 0x1000, "tie -> even"),
    ("kSum", 0x7BFF, 0x4C00, "65504 + 16: tie -> inf"), ("kSum", 0x7BFF, 0x4800, "65504 + 8 -> 65504"),
    ("kSum", 0x7BFF, 0x7BFF, "overflow -> inf"), ("kSum", 0x0001, 0x0001, "subnormals"),
    ("kSum", 0x03FF, 0x0001, "largest subnormal + smallest -> smallest normal"),
    ("kSum", 0x3E00, 0xC100, "1.5 + -2.5"), ("kAverage", 0x3E00, 0x3800, "average reduces as sum"),
    ("kProduct", 0x0001, 0x3800, "2^-24 * 0.5: tie -> 0"),
    ("kProduct", 0x0003, 0x3800, "3 * 2^-24 * 0.5: tie -> 2 * 2^-24"),
    ("kProduct", 0x5C00, 0x5C00, "256 * 256 -> inf"), ("kProduct", 0x3555, 0x4200, "0.333 * 3"),
    ("kMin", 0x3C00, 0xFC00, "min with -inf"), ("kMax", 0x0001, 0x8001, "max of +-2^-24"),
    ("kMin", 0x7BFF, 0x7C00, "min with inf"), ("kMax", 0xC100, 0xC200, "max(-2.5, -3)"),
]
BF16_OPS = [
    ("kSum", 0x3F80, 0x3B80, "1 + 2^-8: tie -> 1"), ("kSum", 0x3F81, 0x3B80, "tie -> even"),
    ("kSum", 0x4380, 0x3F80, "256 + 1: tie -> 256"), ("kSum", 0x4380, 0x4040, "256 + 3: tie -> 260"),
    ("kSum", 0x7F7F, 0x7F7F, "overflow -> inf"), ("kSum", 0x0001, 0x0001, "denormals"),
    ("kAverage", 0x3FC0, 0x3F00, "average reduces as sum"),
    ("kProduct", 0x0001, 0x3F00, "denormal * 0.5: tie -> 0"), ("kProduct", 0x0003, 0x3F00, "tie -> 2"),
    ("kProduct", 0x7F00, 0x4000, "overflow -> inf"), ("kProduct", 0x3EAB, 0x4040, "0.333 * 3"),
    ("kMin", 0x3F80, 0xFF80, "min with -inf"), ("kMax", 0xC040, 0xC0A0, "max(-3, -5)"),
    ("kMin", 0x4040, 0xC0A0, "min(3, -5)"),
]
HALF_SCALES = [(0x0001, 0.5), (0x0003, 0.5), (0x7BFF, 2.0), (0x4200, 1 / 3), (0x3C00, 1 / 3),
               (0xC900, 1 / 3)]
BF16_SCALES = [(0x0001, 0.5), (0x0003, 0.5), (0x7F7F, 2.0), (0x4040, 1 / 3), (0x3F80, 1 / 3)]

NP_OPS = {"kSum": np.add, "kAverage": np.add, "kProduct": np.multiply, "kMin": np.minimum,
          "kMax": np.maximum}
TORCH_OPS = {"kSum": torch.add, "kAverage": torch.add, "kProduct": torch.mul,
             "kMin": torch.minimum, "kMax": torch.maximum}


def main():
    with np.errstate(over="ignore"):
        print("// float32 bits -> float16 bits: numpy astype(float16)")
        print("const FloatToBits16 kToHalf[] = {")
        for x, note in TO_HALF:
            print("    {0x%08xu, 0x%04x},  // %s" % (x, bits16(f32(x).astype(np.float16)), note))
        print("};")
        print("// float32 bits -> bfloat16 bits: torch .to(bfloat16)")
        print("const FloatToBits16 kToBfloat16[] = {")
        for x, note in TO_BF16:
            t = torch.from_numpy(f32(x).copy()).to(torch.bfloat16)
            print("    {0x%08xu, 0x%04x},  // %s" % (x, bits16(t), note))
        print("};")
        print("// float16 bits -> float32 bits: numpy astype(float32)")
        print("const Bits16ToFloat kFromHalf[] = {")
        for h in FROM_HALF:
            out = int(f16(h).astype(np.float32).view(np.uint32)[0])
            print("    {0x%04x, 0x%08xu}," % (h, out))
        print("};")
        print("// float16 ops: numpy float16 ufuncs")
        print("const Reduction16 kHalfOps[] = {")
        for op, a, b, note in HALF_OPS:
            out = bits16(NP_OPS[op](f16(a), f16(b)))
            print("    {ReduceOp::%s, 0x%04x, 0x%04x, 0x%04x},  // %s" % (op, a, b, out, note))
        print("};")
        print("// bfloat16 ops: torch bfloat16 ops")
        print("const Reduction16 kBfloat16Ops[] = {")
        for op, a, b, note in BF16_OPS:
            out = bits16(TORCH_OPS[op](bf16(a), bf16(b)))
            print("    {ReduceOp::%s, 0x%04x, 0x%04x, 0x%04x},  // %s" % (op, a, b, out, note))
        print("};")
        print("// float16 scaled: numpy float16(float64(x) * factor)")
        print("const Scale16 kHalfScales[] = {")
        for h, fac in HALF_SCALES:
            out = bits16((f16(h).astype(np.float64) * fac).astype(np.float16))
            print("    {0x%04x, %.17g, 0x%04x}," % (h, fac, out))
        print("};")
        print("// bfloat16 scaled: torch bfloat16(float64(x) * factor)")
        print("const Scale16 kBfloat16Scales[] = {")
        for h, fac in BF16_SCALES:
            out = bits16((bf16(h).double() * fac).to(torch.bfloat16))
            print("    {0x%04x, %.17g, 0x%04x}," % (h, fac, out))
        print("};")


if __name__ == "__main__":
    main()
