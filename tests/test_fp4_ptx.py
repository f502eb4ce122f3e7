"""The inline PTX of the packed-FP4 unpack (kernels/fp8_triton_jit.py ``_E2M1_*_PTX``), run
instruction by instruction by a small emulator of the few PTX instructions they use, on every
byte value: four packed bytes in (Triton's ``inline_asm_elementwise(pack=4)``: element i in
byte i), two 32-bit registers of 16-bit values out (elements 0, 1 in the first, low half first),
or one of four E4M3 bytes (the FP8 path's).
The CPU suite cannot run the asm; this checks its text. tests/gpu/test_moe_gpu.py runs it."""

from __future__ import annotations

import re

import pytest
import torch

from deepinfer_adapters.model_impl.quant import unpack_fp4

pytest.importorskip("triton")

MASK = 0xFFFFFFFF


def _half_bits_to_float(bits: int, dtype: torch.dtype) -> float:
    return torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(dtype).float().item()


def _float_to_half_bits(value: float, dtype: torch.dtype) -> int:
    return torch.tensor([value], dtype=dtype).view(torch.int16).to(torch.int32).item() & 0xFFFF


def run_ptx(text: str, operands: dict[int, int]) -> dict[int, int]:
    """Registers after running ``text``; ``operands``: $n -> 32-bit value (outputs read back)."""
    regs = {f"${n}": v for n, v in operands.items()}

    def val(tok: str) -> int:
        tok = tok.strip()
        return regs[tok] if tok in regs else int(tok, 0)

    for line in text.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, args = line.split(None, 1)
        if op == "mov.b32" and args.startswith("{"):  # {lo, hi}, src: split into 16-bit halves
            lo, hi, src = re.match(r"\{\s*(\w+),\s*(\w+)\s*\},\s*(\S+)", args).groups()
            regs[lo], regs[hi] = val(src) & 0xFFFF, val(src) >> 16
            continue
        d, *srcs = [a.strip() for a in args.split(",")]
        x = [val(s) for s in srcs]
        if op == "mov.b32":
            regs[d] = x[0]
        elif op == "and.b32":
            regs[d] = x[0] & x[1]
        elif op == "or.b32":
            regs[d] = x[0] | x[1]
        elif op == "shl.b32":
            regs[d] = (x[0] << x[1]) & MASK
        elif op == "shr.b32":
            regs[d] = x[0] >> x[1]
        elif op == "cvt.rn.f16x2.e4m3x2":  # low byte -> low half
            halves = [torch.tensor([(x[0] >> (8 * i)) & 0xFF], dtype=torch.uint8).view(torch.float8_e4m3fn).float()
                      .item() for i in range(2)]
            regs[d] = _float_to_half_bits(halves[0], torch.float16) | (_float_to_half_bits(halves[1], torch.float16) << 16)
        else:
            raise AssertionError(f"the emulator does not know {op!r}: extend it with the PTX ISA's meaning")
    return regs


def _words() -> list[int]:
    """Every byte value in every byte position, plus random words."""
    g = torch.Generator().manual_seed(0)
    words = [b * 0x01010101 for b in range(256)] + [int(v) for v in torch.randint(0, 2**32, (500,), generator=g)]
    return words + [(b << 8 * i) for b in range(256) for i in range(4)]


def _want(word: int, high: bool) -> list[float]:
    bytes_ = torch.tensor([(word >> 8 * i) & 0xFF for i in range(4)], dtype=torch.uint8)
    return unpack_fp4(bytes_).view(4, 2)[:, int(high)].tolist()


@pytest.mark.parametrize("high", [False, True])
def test_e4m3_unpack_gives_every_value_over_64(high):
    from deepinfer_adapters.kernels import fp8_triton_jit as jit

    text = (jit._E2M1_HIGH_PTX if high else jit._E2M1_LOW_PTX).value
    for word in _words():
        regs = run_ptx(text, {2: word})
        got = [_half_bits_to_float((regs[f"${i // 2}"] >> (16 * (i % 2))) & 0xFFFF, torch.float16) * 64
               for i in range(4)]
        assert got == _want(word, high), hex(word)


@pytest.mark.parametrize("high", [False, True])
def test_e4m3_byte_unpack_gives_every_value_over_64(high):
    """The FP8 path's unpack (``fp4_gemm_rows_kernel``): the E4M3 bytes themselves, no conversion."""
    from deepinfer_adapters.kernels import fp8_triton_jit as jit

    text = (jit._E2M1_HIGH_E4M3_PTX if high else jit._E2M1_LOW_E4M3_PTX).value
    for word in _words():
        out = run_ptx(text, {1: word})["$0"]
        codes = torch.tensor([(out >> 8 * i) & 0xFF for i in range(4)], dtype=torch.uint8)
        assert (codes.view(torch.float8_e4m3fn).float() * 64).tolist() == _want(word, high), hex(word)


def test_the_emulator_is_not_vacuous():
    """A wrong mask in the asm text is caught: the low unpack with the sign mask dropped."""
    from deepinfer_adapters.kernels import fp8_triton_jit as jit

    broken = jit._E2M1_LOW_PTX.value.replace("0x08080808", "0x00000000")
    assert run_ptx(broken, {2: 0x09})["$0"] != run_ptx(jit._E2M1_LOW_PTX.value, {2: 0x09})["$0"]  # -0.5 / 64
